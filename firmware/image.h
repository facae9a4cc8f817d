// One PE's program as the assembler produces it and the core loads it: code, initial data,
// queue-to-color bindings, the task table and named symbols. Also its binary file format.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <string>
#include <vector>

#include "firmware/isa.h"

namespace wafersim {

constexpr int kNumInputQueues = 8;   // architectural; depths are core parameters
constexpr int kNumOutputQueues = 6;

struct TaskDecl {
  uint8_t id = 0;
  uint32_t entry = 0;      // instruction index of the task's first instruction
  int color = -1;          // data task: fires when a wavelet of this color waits in its queue
  bool active = false;     // activated at reset
  bool blocked = false;    // blocked at reset
  std::string name;        // the entry label
};

struct DataBlock {
  uint32_t addr = 0;       // byte address in SRAM
  std::vector<uint8_t> bytes;
};

struct Symbol {
  std::string name;
  uint32_t addr = 0;       // byte address (data) or instruction index (code)
  bool code = false;
  NumFormat fmt = NumFormat::kF32;  // element format of a data symbol
  bool is_int = false;     // declared with i16/i32 rather than a float format
  uint32_t elem_bytes = 4;
  uint32_t count = 0;      // elements (data symbols)
};

struct PeImage {
  std::vector<uint64_t> code;        // encoded instructions, loaded at SRAM address 0
  std::vector<DataBlock> data;       // initial data, after the code
  int8_t inq_color[kNumInputQueues];   // -1: queue unused
  int8_t outq_color[kNumOutputQueues];
  std::vector<TaskDecl> tasks;
  std::vector<Symbol> symbols;

  PeImage();
  uint32_t code_bytes() const { return static_cast<uint32_t>(code.size()) * kInstrBytes; }
  uint32_t end_address() const;      // one past the highest byte used by code or data
  const Symbol* find(const std::string& name) const;

  bool operator==(const PeImage& o) const;
};

// Binary file: magic "WSIMG1\n\0", then little-endian sections. Throws std::runtime_error with
// the file name on a truncated or malformed file.
void write_image(const PeImage& img, std::ostream& os);
PeImage read_image(std::istream& is, const std::string& name);
void save_image_file(const PeImage& img, const std::string& path);  // atomic (temp + rename)
PeImage load_image_file(const std::string& path);

}  // namespace wafersim
