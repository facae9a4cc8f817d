#include "firmware/image.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include "hw/atomic_file.h"
#include "hw/file_read.h"
#include "hw/wavelet.h"

namespace wafersim {
namespace {

constexpr char kMagic[8] = {'W', 'S', 'I', 'M', 'G', '1', '\n', '\0'};
constexpr uint32_t kVersion = 1;

// Bounds on what a reader accepts, far above any real PE (48 KB of SRAM) but low enough that a
// corrupt count cannot make the reader allocate gigabytes before it notices the file is short.
constexpr uint32_t kMaxEntries = 1u << 20;     // instructions, blocks, tasks or symbols
constexpr uint32_t kMaxDataBytes = 16u << 20;  // all data blocks together
constexpr uint32_t kMaxNameBytes = 4096;

constexpr uint8_t kTaskActive = 1, kTaskBlocked = 2;
constexpr uint8_t kSymCode = 1, kSymInt = 2;

bool same(const DataBlock& a, const DataBlock& b) { return a.addr == b.addr && a.bytes == b.bytes; }

bool same(const TaskDecl& a, const TaskDecl& b) {
  return a.id == b.id && a.entry == b.entry && a.color == b.color && a.active == b.active &&
         a.blocked == b.blocked && a.name == b.name;
}

bool same(const Symbol& a, const Symbol& b) {
  return a.name == b.name && a.addr == b.addr && a.code == b.code && a.fmt == b.fmt &&
         a.is_int == b.is_int && a.elem_bytes == b.elem_bytes && a.count == b.count;
}

template <typename T>
bool same_vectors(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(),
                                            [](const T& x, const T& y) { return same(x, y); });
}

class Writer {
 public:
  explicit Writer(std::ostream& os) : m_os(os) {}
  void u8(uint8_t v) { m_os.put(static_cast<char>(v)); }
  void u32(uint32_t v) { uint(v, 4); }
  void u64(uint64_t v) { uint(v, 8); }
  void bytes(const void* p, size_t n) { m_os.write(static_cast<const char*>(p), n); }
  void str(const std::string& s) {
    u32(static_cast<uint32_t>(s.size()));
    bytes(s.data(), s.size());
  }

 private:
  void uint(uint64_t v, int n) {
    for (int i = 0; i < n; ++i) u8(static_cast<uint8_t>(v >> (8 * i)));
  }
  std::ostream& m_os;
};

class Reader {
 public:
  Reader(std::istream& is, const std::string& name) : m_is(is), m_name(name) {}

  [[noreturn]] void fail(const std::string& what) const {
    throw std::runtime_error(m_name + ": " + what);
  }
  void bytes(void* p, size_t n, const char* what) {
    m_is.read(static_cast<char*>(p), static_cast<std::streamsize>(n));
    if (static_cast<size_t>(m_is.gcount()) != n) {
      fail(std::string("truncated image (in ") + what + ")");
    }
  }
  uint64_t uint(int n, const char* what) {
    uint8_t b[8];
    bytes(b, n, what);
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; --i) v = (v << 8) | b[i];
    return v;
  }
  uint8_t u8(const char* what) { return static_cast<uint8_t>(uint(1, what)); }
  uint32_t u32(const char* what) { return static_cast<uint32_t>(uint(4, what)); }
  uint64_t u64(const char* what) { return uint(8, what); }
  uint32_t count(const char* what) {
    const uint32_t n = u32(what);
    if (n > kMaxEntries) {
      fail("corrupt image: " + std::to_string(n) + " " + what + " (limit " +
           std::to_string(kMaxEntries) + ")");
    }
    return n;
  }
  std::string str(const char* what) {
    const uint32_t n = u32(what);
    if (n > kMaxNameBytes) {
      fail("corrupt image: name of " + std::to_string(n) + " bytes in " + what);
    }
    std::string s(n, '\0');
    bytes(&s[0], n, what);
    return s;
  }
  bool at_end() { return m_is.peek() == std::char_traits<char>::eof(); }

 private:
  std::istream& m_is;
  const std::string& m_name;
};

// Colors are -1 (none) or one of the fabric's colors; the core indexes tables with them.
int check_color(Reader& r, int c, const char* what) {
  if (c < -1 || c >= kMaxColors)
    r.fail("corrupt image: color " + std::to_string(c) + " in " + what);
  return c;
}

}  // namespace

PeImage::PeImage() {
  std::fill(std::begin(inq_color), std::end(inq_color), int8_t{-1});
  std::fill(std::begin(outq_color), std::end(outq_color), int8_t{-1});
}

uint32_t PeImage::end_address() const {
  uint32_t end = code_bytes();
  for (const DataBlock& b : data) {
    end = std::max(end, b.addr + static_cast<uint32_t>(b.bytes.size()));
  }
  return end;
}

const Symbol* PeImage::find(const std::string& name) const {
  for (const Symbol& s : symbols) {
    if (s.name == name) return &s;
  }
  return nullptr;
}

bool PeImage::operator==(const PeImage& o) const {
  return code == o.code && same_vectors(data, o.data) &&
         std::equal(std::begin(inq_color), std::end(inq_color), std::begin(o.inq_color)) &&
         std::equal(std::begin(outq_color), std::end(outq_color), std::begin(o.outq_color)) &&
         same_vectors(tasks, o.tasks) && same_vectors(symbols, o.symbols);
}

// Layout (all integers little-endian; str = u32 length + bytes):
//   magic[8] u32 version
//   u32 n, u64 code[n]
//   u32 n, n x {u32 addr, u32 size, u8 bytes[size]}
//   i8 inq_color[8], i8 outq_color[6]
//   u32 n, n x {u8 id, u32 entry, i32 color, u8 flags (1 active, 2 blocked), str name}
//   u32 n, n x {str name, u32 addr, u8 flags (1 code, 2 int), u8 fmt, u32 elem_bytes, u32 count}
// and nothing after.
void write_image(const PeImage& img, std::ostream& os) {
  Writer w(os);
  w.bytes(kMagic, sizeof kMagic);
  w.u32(kVersion);
  w.u32(static_cast<uint32_t>(img.code.size()));
  for (uint64_t word : img.code) w.u64(word);
  w.u32(static_cast<uint32_t>(img.data.size()));
  for (const DataBlock& b : img.data) {
    w.u32(b.addr);
    w.u32(static_cast<uint32_t>(b.bytes.size()));
    w.bytes(b.bytes.data(), b.bytes.size());
  }
  for (int8_t c : img.inq_color) w.u8(static_cast<uint8_t>(c));
  for (int8_t c : img.outq_color) w.u8(static_cast<uint8_t>(c));
  w.u32(static_cast<uint32_t>(img.tasks.size()));
  for (const TaskDecl& t : img.tasks) {
    w.u8(t.id);
    w.u32(t.entry);
    w.u32(static_cast<uint32_t>(t.color));
    w.u8(static_cast<uint8_t>((t.active ? kTaskActive : 0) | (t.blocked ? kTaskBlocked : 0)));
    w.str(t.name);
  }
  w.u32(static_cast<uint32_t>(img.symbols.size()));
  for (const Symbol& s : img.symbols) {
    w.str(s.name);
    w.u32(s.addr);
    w.u8(static_cast<uint8_t>((s.code ? kSymCode : 0) | (s.is_int ? kSymInt : 0)));
    w.u8(static_cast<uint8_t>(s.fmt));
    w.u32(s.elem_bytes);
    w.u32(s.count);
  }
  if (!os) throw std::runtime_error("cannot write image: stream error");
}

PeImage read_image(std::istream& is, const std::string& name) {
  Reader r(is, name);
  char magic[sizeof kMagic];
  r.bytes(magic, sizeof magic, "header");
  if (std::memcmp(magic, kMagic, sizeof magic) != 0) r.fail("not a wafersim PE image (bad magic)");
  const uint32_t version = r.u32("header");
  if (version != kVersion) {
    r.fail("unsupported image version " + std::to_string(version) + " (expected " +
           std::to_string(kVersion) + ")");
  }
  PeImage img;
  img.code.resize(r.count("instructions"));
  for (size_t i = 0; i < img.code.size(); ++i) {
    img.code[i] = r.u64("code");
    try {
      decode(img.code[i]);  // the core decodes every word when it loads the image
    } catch (const std::invalid_argument& e) {
      r.fail("corrupt image: instruction " + std::to_string(i) + ": " + e.what());
    }
  }

  img.data.resize(r.count("data blocks"));
  uint64_t total = 0;
  for (DataBlock& b : img.data) {
    b.addr = r.u32("data blocks");
    const uint32_t size = r.u32("data blocks");
    if (uint64_t{b.addr} + size >= (uint64_t{1} << 32)) {  // end_address() is 32-bit
      r.fail("corrupt image: data block at " + std::to_string(b.addr) + " runs past the 32-bit address space");
    }
    total += size;
    if (total > kMaxDataBytes) {
      r.fail("corrupt image: more than " + std::to_string(kMaxDataBytes) + " bytes of data");
    }
    b.bytes.resize(size);
    r.bytes(b.bytes.data(), size, "data blocks");
  }
  for (int8_t& c : img.inq_color) {
    c = static_cast<int8_t>(check_color(r, static_cast<int8_t>(r.u8("queues")), "queues"));
  }
  for (int8_t& c : img.outq_color) {
    c = static_cast<int8_t>(check_color(r, static_cast<int8_t>(r.u8("queues")), "queues"));
  }

  img.tasks.resize(r.count("tasks"));
  for (TaskDecl& t : img.tasks) {
    t.id = r.u8("tasks");
    if (t.id >= kMaxTasks) r.fail("corrupt image: task id " + std::to_string(t.id));
    t.entry = r.u32("tasks");
    t.color = check_color(r, static_cast<int32_t>(r.u32("tasks")), "tasks");
    const uint8_t flags = r.u8("tasks");
    if (flags & ~(kTaskActive | kTaskBlocked)) r.fail("corrupt image: bad task flags");
    t.active = (flags & kTaskActive) != 0;
    t.blocked = (flags & kTaskBlocked) != 0;
    t.name = r.str("tasks");
  }

  img.symbols.resize(r.count("symbols"));
  for (Symbol& s : img.symbols) {
    s.name = r.str("symbols");
    s.addr = r.u32("symbols");
    const uint8_t flags = r.u8("symbols");
    if (flags & ~(kSymCode | kSymInt)) r.fail("corrupt image: bad symbol flags");
    s.code = (flags & kSymCode) != 0;
    s.is_int = (flags & kSymInt) != 0;
    const uint8_t fmt = r.u8("symbols");
    if (fmt > static_cast<uint8_t>(NumFormat::kBF16)) {
      r.fail("corrupt image: number format " + std::to_string(fmt) + " of symbol '" + s.name + "'");
    }
    s.fmt = static_cast<NumFormat>(fmt);
    s.elem_bytes = r.u32("symbols");
    s.count = r.u32("symbols");
    if (s.code) continue;
    // Data symbols as the assembler makes them: the loader converts values and reads outputs by
    // these sizes.
    const bool size_ok = s.is_int ? s.elem_bytes == 2 || s.elem_bytes == 4
                                  : s.elem_bytes == (s.fmt == NumFormat::kF32 ? 4u : 2u);
    const std::string sym = "corrupt image: data symbol '" + s.name + "'";
    if (!size_ok) r.fail(sym + " has " + std::to_string(s.elem_bytes) + "-byte elements");
    if (s.count == 0) r.fail(sym + " has no elements");
    if (uint64_t{s.addr} + uint64_t{s.count} * s.elem_bytes >= (uint64_t{1} << 32)) {
      r.fail(sym + " runs past the 32-bit address space");
    }
  }
  if (!r.at_end()) r.fail("corrupt image: trailing bytes after the symbol table");
  return img;
}

void save_image_file(const PeImage& img, const std::string& path) {
  std::ostringstream os;
  write_image(img, os);
  write_file_atomic(path, os.str());
}

PeImage load_image_file(const std::string& path) {
  // An image holds at most 48 KB-class SRAM contents and tables: far below this bound.
  constexpr uint64_t kMaxImageBytes = uint64_t{1} << 30;
  std::string bytes, why;
  if (!read_regular_file(path, kMaxImageBytes, &bytes, &why)) throw std::runtime_error(path + ": " + why);
  std::istringstream in(bytes);
  return read_image(in, path);
}

}  // namespace wafersim
