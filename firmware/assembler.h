// The PE assembler and disassembler: assembly text (docs/isa.md) <-> PeImage.
#pragma once

#include <stdexcept>
#include <string>

#include "firmware/image.h"

namespace wafersim {

// What the target PE offers; the assembler rejects programs that do not fit it.
struct AsmTarget {
  uint32_t sram_bytes = 48 * 1024;
  int colors = 24;        // routable colors (fabric router.colors)
  int dsd_regs = 44;
  int cb16_bias = kCb16DefaultBias;
};

// Every error names the place: "prog.s:12:7: unknown mnemonic 'vadx'".
class AsmError : public std::runtime_error {
 public:
  AsmError(const std::string& file, int line, int column, const std::string& msg);
  int line() const { return m_line; }
  int column() const { return m_column; }

 private:
  int m_line, m_column;
};

//   PeImage img = assemble(read_file("gemv.s"), "gemv.s", AsmTarget{});
PeImage assemble(const std::string& text, const std::string& filename, const AsmTarget& target);

// Assembly text that assembles back to an identical image (round trip).
std::string disassemble_image(const PeImage& img);

}  // namespace wafersim
