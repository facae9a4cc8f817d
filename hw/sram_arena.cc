#include "hw/sram_arena.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <mutex>
#include <new>
#include <unordered_map>
#include <vector>

namespace wafersim {
namespace {

// Slabs of anonymous memory reserved without backing (MAP_NORESERVE): the kernel maps a zero page
// on first touch. Blocks are page multiples; a freed block's pages are dropped (MADV_DONTNEED)
// and the block kept for the next request of its size. Slabs live as long as the process.
struct Arena {
  std::mutex mu;
  uint8_t* next = nullptr;
  size_t left = 0;
  std::unordered_map<size_t, std::vector<uint8_t*>> free;
};

Arena& arena() {
  static Arena* a = new Arena;  // never destroyed: PEs may outlive static destructors
  return *a;
}

size_t page_round(size_t bytes) {
  static const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  return (std::max<size_t>(bytes, 1) + page - 1) / page * page;
}

}  // namespace

uint8_t* sram_alloc(size_t bytes) {
  const size_t n = page_round(bytes);
  Arena& a = arena();
  std::lock_guard<std::mutex> lock(a.mu);
  auto& list = a.free[n];
  if (!list.empty()) {
    uint8_t* p = list.back();
    list.pop_back();
    return p;
  }
  if (a.left < n) {
    const size_t slab = std::max<size_t>(n, size_t{256} << 20);
    void* m = mmap(nullptr, slab, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (m == MAP_FAILED) throw std::bad_alloc();
    a.next = static_cast<uint8_t*>(m);
    a.left = slab;  // the rest of the previous slab stays unused (less than one block)
  }
  uint8_t* p = a.next;
  a.next += n;
  a.left -= n;
  return p;
}

void sram_free(uint8_t* p, size_t bytes) {
  if (!p) return;
  const size_t n = page_round(bytes);
  madvise(p, n, MADV_DONTNEED);  // private anonymous memory: reads as zeros from now on
  Arena& a = arena();
  std::lock_guard<std::mutex> lock(a.mu);
  a.free[n].push_back(p);
}

}  // namespace wafersim
