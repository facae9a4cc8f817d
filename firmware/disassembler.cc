// disassemble_image (declared in assembler.h): a PeImage as assembly text that assembles back to
// the same image.
#include <cstdio>
#include <sstream>
#include <stdexcept>

#include "firmware/assembler.h"

namespace wafersim {
namespace {

[[noreturn]] void unrepresentable(const std::string& why) {
  throw std::invalid_argument("image cannot be written as assembly: " + why);
}

// The Symbol the assembler makes for a code label; any other field value would not survive.
bool plain_code_symbol(const Symbol& s) {
  Symbol ref;
  ref.name = s.name;
  ref.addr = s.addr;
  ref.code = true;
  return s.code && s.fmt == ref.fmt && !s.is_int && s.elem_bytes == ref.elem_bytes &&
         s.count == ref.count;
}

// Checks that `s` is the symbol the assembler would make for `b` and returns the format name.
std::string data_format(const Symbol& s, const DataBlock& b) {
  const std::string where = "data symbol '" + s.name + "'";
  if (s.code) unrepresentable(where + " is marked as code");
  if (s.addr != b.addr) unrepresentable(where + " is not at its data block's address");
  std::string fmt;
  if (s.is_int) {
    if (s.fmt != NumFormat::kF32 || (s.elem_bytes != 2 && s.elem_bytes != 4)) {
      unrepresentable(where + " has an integer type that is neither i16 nor i32");
    }
    fmt = s.elem_bytes == 2 ? "i16" : "i32";
  } else {
    if (s.elem_bytes != (s.fmt == NumFormat::kF32 ? 4u : 2u)) {
      unrepresentable(where + ": element size does not match its format");
    }
    fmt = format_name(s.fmt);
  }
  if (s.count == 0 || uint64_t{s.count} * s.elem_bytes != b.bytes.size()) {
    unrepresentable(where + ": element count does not match its data block");
  }
  if (b.addr % s.elem_bytes != 0) unrepresentable(where + " is not naturally aligned");
  return fmt;
}

void write_data(std::ostream& os, const Symbol& s, const DataBlock& b, const std::string& fmt) {
  bool zero = true;
  for (uint8_t byte : b.bytes) zero = zero && byte == 0;
  char addr[16];
  std::snprintf(addr, sizeof addr, "0x%x", b.addr);
  os << ".org " << addr << '\n';
  if (zero) {
    os << ".space " << s.name << ", " << fmt << ", " << s.count << '\n';
    return;
  }
  os << ".data " << s.name << ", " << fmt;
  for (uint32_t k = 0; k < s.count; ++k) {
    uint32_t v = 0;
    for (uint32_t i = 0; i < s.elem_bytes; ++i) {
      v |= uint32_t{b.bytes[k * s.elem_bytes + i]} << (8 * i);
    }
    char text[16];
    if (!s.is_int) {  // raw bit patterns: exact whatever the value (NaN payloads, cb16 bias)
      std::snprintf(text, sizeof text, s.elem_bytes == 4 ? "0x%08x" : "0x%04x", v);
    } else if (s.elem_bytes == 2) {
      std::snprintf(text, sizeof text, "%d", static_cast<int16_t>(v));
    } else {
      std::snprintf(text, sizeof text, "%d", static_cast<int32_t>(v));
    }
    os << ", " << text;
  }
  os << '\n';
}

}  // namespace

// Layout: queue bindings, code with its labels, tasks, then each data block after an .org. The
// assembler lists code labels first (in code order) and data symbols after (in data order), so
// only images in that order can come back identical; others are refused rather than reordered.
std::string disassemble_image(const PeImage& img) {
  const std::vector<Symbol>& syms = img.symbols;
  size_t ncode = 0;
  for (; ncode < syms.size() && syms[ncode].code; ++ncode) {
    if (!plain_code_symbol(syms[ncode])) {
      unrepresentable("code symbol '" + syms[ncode].name + "' has data fields set");
    }
    if (syms[ncode].addr > img.code.size()) {
      unrepresentable("code label '" + syms[ncode].name + "' is past the end of code");
    }
    if (ncode > 0 && syms[ncode].addr < syms[ncode - 1].addr) {
      unrepresentable("code labels are not in code order");
    }
  }
  if (syms.size() - ncode != img.data.size()) {
    unrepresentable("data symbols and data blocks do not pair up one to one, in order");
  }

  std::ostringstream os;
  os << "; PE image: " << img.code.size() << " instructions, " << img.data.size()
     << " data blocks, " << img.tasks.size() << " tasks\n";
  for (int q = 0; q < kNumInputQueues; ++q) {
    if (img.inq_color[q] >= 0) os << ".inq " << q << ", " << int{img.inq_color[q]} << '\n';
  }
  for (int q = 0; q < kNumOutputQueues; ++q) {
    if (img.outq_color[q] >= 0) os << ".outq " << q << ", " << int{img.outq_color[q]} << '\n';
  }

  size_t s = 0;
  for (size_t i = 0; i <= img.code.size(); ++i) {
    for (; s < ncode && syms[s].addr == i; ++s) os << syms[s].name << ":\n";
    if (i == img.code.size()) break;
    try {
      os << "    " << disassemble(decode(img.code[i])) << '\n';
    } catch (const std::invalid_argument& e) {
      unrepresentable("instruction " + std::to_string(i) + ": " + e.what());
    }
  }

  for (const TaskDecl& t : img.tasks) {
    os << ".task " << int{t.id} << ", ";
    if (t.name.empty()) {
      os << '@' << t.entry;
    } else {
      const Symbol* label = img.find(t.name);
      if (!label || !label->code || label->addr != t.entry) {
        unrepresentable("task " + std::to_string(t.id) + " names '" + t.name +
                        "', which is not a code label at its entry");
      }
      os << t.name;
    }
    if (t.color >= 0) os << ", color=" << t.color;
    if (t.active) os << ", active";
    if (t.blocked) os << ", blocked";
    os << '\n';
  }

  for (size_t k = 0; k < img.data.size(); ++k) {
    const Symbol& sym = syms[ncode + k];
    write_data(os, sym, img.data[k], data_format(sym, img.data[k]));
  }
  return os.str();
}

}  // namespace wafersim
