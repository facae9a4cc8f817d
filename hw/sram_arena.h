// Host memory for the PEs' SRAM: zeroed blocks whose pages cost host memory only once a
// program touches them, so a wafer of small programs (a reduction, a stencil) fits the host.
#pragma once

#include <cstddef>
#include <cstdint>

namespace wafersim {

// A zeroed block of `bytes` (page-aligned). Thread-safe.
uint8_t* sram_alloc(size_t bytes);
// Returns a block from sram_alloc (its pages go back to the system; the next block handed out
// here reads as zeros again).
void sram_free(uint8_t* p, size_t bytes);

}  // namespace wafersim
