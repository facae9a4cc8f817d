#include "tlm/dataset.h"

#include <zlib.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <optional>

#include "hw/file_read.h"

namespace wafersim::tlm {
namespace fs = std::filesystem;

namespace {

constexpr const char* kFashionMnistDir = "/usr/share/datasets/fashion-mnist";
// 1 + the largest label must fit Dataset::classes.
constexpr int64_t kMaxLabel = std::numeric_limits<int32_t>::max() - 1;

[[noreturn]] void fail(const std::string& path, const std::string& problem) {
  throw DatasetError(path + ": " + problem);
}

std::string hex32(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%08x", v);
  return buf;
}

uint64_t be(const uint8_t* p, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v = v << 8 | p[i];
  return v;
}

uint64_t le(const uint8_t* p, int bytes) {
  uint64_t v = 0;
  for (int i = bytes - 1; i >= 0; --i) v = v << 8 | p[i];
  return v;
}

template <typename To, typename From>
To bits_as(From v) {
  static_assert(sizeof(To) == sizeof(From));
  To t;
  std::memcpy(&t, &v, sizeof t);
  return t;
}

// How one stored element is encoded.
struct ElemType {
  char kind;  // 'u' unsigned, 'i' signed, 'f' IEEE float
  int bytes;
  bool big_endian;

  std::string name() const {
    return (kind == 'u' ? "uint" : kind == 'i' ? "int" : "float") + std::to_string(8 * bytes);
  }
};

// Decodes `n` elements of type `t` into `out`.
template <typename Out>
void decode(const ElemType& t, const uint8_t* p, size_t n, Out* out) {
  if (t.bytes == 1) {  // uint8 images and labels: kept plain loops the compiler vectorizes
    if (t.kind == 'u') {
      for (size_t i = 0; i < n; ++i) out[i] = static_cast<Out>(p[i]);
    } else {
      for (size_t i = 0; i < n; ++i) out[i] = static_cast<Out>(static_cast<int8_t>(p[i]));
    }
    return;
  }
  const int unused_bits = 64 - 8 * t.bytes;
  for (size_t i = 0; i < n; ++i, p += t.bytes) {
    const uint64_t w = t.big_endian ? be(p, t.bytes) : le(p, t.bytes);
    if (t.kind == 'u') {
      out[i] = static_cast<Out>(w);
    } else if (t.kind == 'i') {
      out[i] = static_cast<Out>(static_cast<int64_t>(w << unused_bits) >> unused_bits);
    } else if (t.bytes == 4) {
      out[i] = static_cast<Out>(bits_as<float>(static_cast<uint32_t>(w)));
    } else {
      out[i] = static_cast<Out>(bits_as<double>(w));
    }
  }
}

// The product of `dims` times `elem_bytes`, or nullopt when it does not fit 64 bits.
std::optional<uint64_t> checked_product(const std::vector<uint64_t>& dims, uint64_t elem_bytes) {
  uint64_t n = elem_bytes;
  for (uint64_t d : dims) {
    if (__builtin_mul_overflow(n, d, &n)) return std::nullopt;
  }
  return n;
}

// Whether the data and one sample (the dimensions after the first) both fit 64 bits: a file of
// no samples may still announce huge ones.
bool shape_fits(const std::vector<uint64_t>& dims, uint64_t elem_bytes) {
  return checked_product(dims, elem_bytes) &&
         (dims.empty() || checked_product({dims.begin() + 1, dims.end()}, elem_bytes));
}

std::string shape_text(const std::vector<uint64_t>& dims) {
  std::string s;
  for (uint64_t d : dims) s += (s.empty() ? "" : " x ") + std::to_string(d);
  return s;
}

// Data is decoded in pieces of this many bytes (a multiple of every element size), so no copy of
// the raw file is ever held.
constexpr size_t kChunk = size_t{1} << 18;

std::string expected_found(uint64_t n, uint64_t found) {
  return "(expected " + std::to_string(n) + " bytes of data, found " + std::to_string(found) + ")";
}

// A file read through zlib: gzip data (found by its magic bytes) is inflated, anything else
// passes through unchanged.
class GzReader {
 public:
  explicit GzReader(const std::string& path) : m_path(path) {
    std::error_code ec;
    if (fs::is_directory(path, ec)) fail(path, "cannot open (it is a directory)");
    // /dev/zero or a pipe would be read without end (or block): only regular files are data.
    if (const std::string why = regular_file_problem(path); !why.empty()) fail(path, why);
    errno = 0;
    m_file = gzopen(path.c_str(), "rb");
    if (!m_file) fail(path, std::string("cannot open (") + (errno ? std::strerror(errno) : "out of memory") + ")");
    gzbuffer(m_file, 1 << 18);  // 10 % faster than the default 8 KiB on Fashion-MNIST
  }
  ~GzReader() { gzclose_r(m_file); }
  GzReader(const GzReader&) = delete;
  GzReader& operator=(const GzReader&) = delete;

  // Reads up to n bytes; fewer only at the end of the data.
  size_t read(void* buf, size_t n) {
    size_t done = 0;
    while (done < n) {
      const unsigned chunk = static_cast<unsigned>(std::min<size_t>(n - done, 1u << 30));
      const int got = gzread(m_file, static_cast<uint8_t*>(buf) + done, chunk);
      if (got < 0) fail(m_path, "read error (" + error_text() + ")");
      done += static_cast<size_t>(got);
      if (static_cast<unsigned>(got) < chunk) break;
    }
    if (done < n) {
      // A gzip stream cut short returns what it has and leaves Z_BUF_ERROR behind.
      int err = Z_OK;
      gzerror(m_file, &err);
      if (err == Z_BUF_ERROR) fail(m_path, "truncated gzip stream (the file ends inside compressed data)");
      if (err != Z_OK) fail(m_path, "read error (" + error_text() + ")");
    }
    return done;
  }

  // Reads the rest of the file, which must be exactly `n` bytes, handing it to
  // sink(const uint8_t* bytes, size_t count) in pieces of at most kChunk bytes.
  template <typename Sink>
  void read_rest(uint64_t n, Sink&& sink) {
    std::vector<uint8_t> buf(kChunk);
    uint64_t found = 0;
    while (found < n) {
      const size_t step = static_cast<size_t>(std::min<uint64_t>(n - found, kChunk));
      const size_t got = read(buf.data(), step);
      found += got;
      if (got < step) fail(m_path, "truncated " + expected_found(n, found));
      sink(buf.data(), step);
    }
    while (const size_t got = read(buf.data(), buf.size())) found += got;
    if (found != n) fail(m_path, "trailing data " + expected_found(n, found));
  }

  // Reads `n` header bytes that start at byte `offset` of the file.
  void read_header(void* buf, size_t n, size_t offset) {
    const size_t got = read(buf, n);
    if (got < n) {
      fail(m_path, "truncated header (expected " + std::to_string(offset + n) + " bytes, found " +
                       std::to_string(offset + got) + ")");
    }
  }

 private:
  std::string error_text() {
    int err = Z_OK;
    const char* msg = gzerror(m_file, &err);
    return err == Z_ERRNO ? std::strerror(errno) : msg;
  }

  std::string m_path;
  gzFile m_file = nullptr;
};

// The rest of `in`: `count` elements of type `t`.
template <typename Out>
std::vector<Out> read_values(GzReader& in, uint64_t count, const ElemType& t) {
  std::vector<Out> v;
  // Appending decoded pieces writes each page of the result once; a raw copy of the file decoded
  // into a zero-filled vector took Fashion-MNIST's train set from 245 to 320 ms. The reservation
  // is capped so that a corrupt header announcing terabytes fails as truncated, not in the allocator.
  v.reserve(static_cast<size_t>(std::min<uint64_t>(count, uint64_t{1} << 27)));
  std::vector<Out> piece(kChunk);
  in.read_rest(count * static_cast<uint64_t>(t.bytes), [&](const uint8_t* p, size_t bytes) {
    const size_t k = bytes / static_cast<size_t>(t.bytes);
    decode(t, p, k, piece.data());
    v.insert(v.end(), piece.begin(), piece.begin() + static_cast<std::ptrdiff_t>(k));
  });
  return v;
}

// Label values, checked (0..kMaxLabel) and narrowed; `classes` gets 1 + the largest.
std::vector<int32_t> checked_labels(const std::string& path, const std::vector<int64_t>& raw, int& classes) {
  std::vector<int32_t> labels(raw.size());
  int64_t top = -1;
  for (size_t i = 0; i < raw.size(); ++i) {
    if (raw[i] < 0 || raw[i] > kMaxLabel) {
      fail(path, "label " + std::to_string(raw[i]) + " at index " + std::to_string(i) +
                     (raw[i] < 0 ? "" : " (too large)"));
    }
    labels[i] = static_cast<int32_t>(raw[i]);
    top = std::max(top, raw[i]);
  }
  classes = static_cast<int>(top + 1);
  return labels;
}

void check_counts(const std::string& x_path, const std::string& labels_path, uint64_t samples, uint64_t labels,
                  const char* what) {
  if (samples != labels) {
    fail(x_path, std::to_string(samples) + " " + what + " but " + std::to_string(labels) + " labels in " + labels_path);
  }
}

// `shape` is the samples' (count, then one sample's dimensions), already checked to fit. A
// NaN or infinity among the samples is refused here: it would make every loss after it NaN.
Dataset assemble(const std::string& x_path, const std::string& labels_path, const std::vector<uint64_t>& shape,
                 std::vector<float> x, const std::vector<int64_t>& raw_labels) {
  const auto bad = std::find_if(x.begin(), x.end(), [](float v) { return !std::isfinite(v); });
  if (bad != x.end()) {
    const size_t at = static_cast<size_t>(bad - x.begin()), per = x.size() / std::max<uint64_t>(shape[0], 1);
    fail(x_path, std::string(std::isnan(*bad) ? "NaN" : "an infinity") + " in sample " + std::to_string(at / std::max<size_t>(per, 1)) +
                     ", value " + std::to_string(at % std::max<size_t>(per, 1)) + ": inputs must be finite numbers");
  }
  Dataset d;
  d.count = static_cast<size_t>(shape[0]);
  d.features = static_cast<size_t>(*checked_product({shape.begin() + 1, shape.end()}, 1));
  d.x = std::move(x);
  d.labels = checked_labels(labels_path, raw_labels, d.classes);
  return d;
}

// --- IDX ---

// The element type of an IDX type code, or nullopt for an unknown code.
std::optional<ElemType> idx_elem_type(int code) {
  switch (code) {
    case 0x08: return ElemType{'u', 1, true};
    case 0x09: return ElemType{'i', 1, true};
    case 0x0B: return ElemType{'i', 2, true};
    case 0x0C: return ElemType{'i', 4, true};
    case 0x0D: return ElemType{'f', 4, true};
    case 0x0E: return ElemType{'f', 8, true};
    default: return std::nullopt;
  }
}

struct IdxHeader {
  ElemType type;
  std::vector<uint64_t> dims;
  uint64_t elements = 0;
};

IdxHeader read_idx_header(GzReader& in, const std::string& path) {
  uint8_t head[4];
  in.read_header(head, 4, 0);
  const std::optional<ElemType> type = idx_elem_type(head[2]);
  const int ndims = head[3];
  if (head[0] != 0 || head[1] != 0 || !type || ndims == 0) {
    fail(path, "bad IDX magic " + hex32(static_cast<uint32_t>(be(head, 4))) +
                   " (expected 0x00000TDD: type T 08, 09, 0B, 0C, 0D or 0E, DD dimensions)");
  }
  IdxHeader a{*type, {}, 0};
  std::vector<uint8_t> dims(4 * static_cast<size_t>(ndims));
  in.read_header(dims.data(), dims.size(), 4);
  for (int i = 0; i < ndims; ++i) a.dims.push_back(be(&dims[4 * static_cast<size_t>(i)], 4));
  if (!shape_fits(a.dims, static_cast<uint64_t>(a.type.bytes))) {
    fail(path, "dimensions " + shape_text(a.dims) + " are too large");
  }
  a.elements = *checked_product(a.dims, 1);
  return a;
}

// --- NPY ---

struct NpyHeader {
  std::string descr;
  ElemType type{'u', 1, false};
  std::vector<uint64_t> shape;
  uint64_t elements = 0;
};

// The header of a .npy file, a Python dict literal such as
// {'descr': '<f4', 'fortran_order': False, 'shape': (60000, 784), }
class NpyHeaderParser {
 public:
  NpyHeaderParser(const std::string& path, const std::string& text) : m_path(path), m_text(text) {}

  void parse(NpyHeader& a) {
    bool have_descr = false, have_order = false, have_shape = false;
    expect('{');
    while (!peek('}')) {
      const std::string key = string();
      expect(':');
      if (key == "descr") {
        if (peek('[')) fail(m_path, "structured dtype " + rest() + " not supported");
        a.descr = string();
        have_descr = true;
      } else if (key == "fortran_order") {
        if (word() == "True") fail(m_path, "fortran_order True (column-major data) not supported");
        have_order = true;
      } else if (key == "shape") {
        a.shape = tuple();
        have_shape = true;
      } else {
        fail(m_path, "unexpected key '" + key + "' in the .npy header");
      }
      if (!peek('}')) expect(',');
    }
    if (!have_descr || !have_order || !have_shape) {
      fail(m_path, "the .npy header lacks 'descr', 'fortran_order' or 'shape': " + m_text);
    }
  }

 private:
  void skip_space() {
    while (m_pos < m_text.size() && std::isspace(static_cast<unsigned char>(m_text[m_pos]))) ++m_pos;
  }
  bool peek(char c) {
    skip_space();
    return m_pos < m_text.size() && m_text[m_pos] == c;
  }
  void expect(char c) {
    if (!peek(c)) fail(m_path, std::string("bad .npy header: expected '") + c + "' at " + rest());
    ++m_pos;
  }
  std::string rest() const { return "'" + m_text.substr(m_pos, 40) + "'"; }

  std::string string() {
    skip_space();
    const char quote = m_pos < m_text.size() ? m_text[m_pos] : '\0';
    if (quote != '\'' && quote != '"') fail(m_path, "bad .npy header: expected a string at " + rest());
    const size_t end = m_text.find(quote, m_pos + 1);
    if (end == std::string::npos) fail(m_path, "bad .npy header: unterminated string at " + rest());
    std::string s = m_text.substr(m_pos + 1, end - m_pos - 1);
    m_pos = end + 1;
    return s;
  }

  std::string word() {
    skip_space();
    const size_t start = m_pos;
    while (m_pos < m_text.size() && std::isalpha(static_cast<unsigned char>(m_text[m_pos]))) ++m_pos;
    const std::string w = m_text.substr(start, m_pos - start);
    if (w != "True" && w != "False") fail(m_path, "bad .npy header: expected True or False at " + rest());
    return w;
  }

  // (3, 4), (3,) or (); Python 2 wrote longs as 3L.
  std::vector<uint64_t> tuple() {
    std::vector<uint64_t> v;
    expect('(');
    while (!peek(')')) {
      const size_t start = m_pos;
      uint64_t n = 0;
      while (m_pos < m_text.size() && std::isdigit(static_cast<unsigned char>(m_text[m_pos]))) {
        if (__builtin_mul_overflow(n, 10, &n) || __builtin_add_overflow(n, m_text[m_pos] - '0', &n)) {
          fail(m_path, "bad .npy header: dimension too large at " + rest());
        }
        ++m_pos;
      }
      if (m_pos == start) fail(m_path, "bad .npy header: expected a dimension at " + rest());
      if (m_pos < m_text.size() && m_text[m_pos] == 'L') ++m_pos;
      v.push_back(n);
      if (!peek(')')) expect(',');
    }
    ++m_pos;
    return v;
  }

  const std::string& m_path;
  const std::string& m_text;
  size_t m_pos = 0;
};

// Reads the header of a .npy file whose dtype must be one of `accepted` ("|u1", "<f4", ...);
// `role` names the array in errors ("x", "labels").
NpyHeader read_npy_header(GzReader& in, const std::string& path, const std::vector<std::string>& accepted,
                          const char* role) {
  uint8_t pre[8];
  in.read_header(pre, 8, 0);
  if (std::memcmp(pre, "\x93NUMPY", 6) != 0) fail(path, "not a .npy file (no \\x93NUMPY magic)");
  const int major = pre[6];
  if (major < 1 || major > 3) {
    fail(path, "unsupported .npy format version " + std::to_string(major) + "." + std::to_string(pre[7]));
  }
  uint8_t len_bytes[4];
  const int len_size = major == 1 ? 2 : 4;
  in.read_header(len_bytes, static_cast<size_t>(len_size), 8);
  const uint64_t header_len = le(len_bytes, len_size);
  if (header_len > (1u << 20)) fail(path, "unreasonable .npy header length " + std::to_string(header_len));
  std::string header(static_cast<size_t>(header_len), '\0');
  in.read_header(header.data(), header.size(), 8 + static_cast<size_t>(len_size));

  NpyHeader a;
  NpyHeaderParser(path, header).parse(a);
  if (std::find(accepted.begin(), accepted.end(), a.descr) == accepted.end()) {
    if (a.descr.size() > 1 && a.descr[0] == '>') {
      fail(path, "big-endian dtype '" + a.descr + "' not supported (save little-endian data)");
    }
    std::string list;
    for (const std::string& s : accepted) list += (list.empty() ? "'" : ", '") + s + "'";
    fail(path, std::string("dtype '") + a.descr + "' not supported for " + role + " (expected " + list + ")");
  }
  a.type = ElemType{a.descr[1], a.descr[2] - '0', false};  // one of the accepted: little-endian
  if (!shape_fits(a.shape, static_cast<uint64_t>(a.type.bytes))) {
    fail(path, "shape " + shape_text(a.shape) + " is too large");
  }
  a.elements = *checked_product(a.shape, 1);
  return a;
}

std::string npy_shape_text(const std::vector<uint64_t>& shape) {
  std::string s = "(";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + (shape.size() == 1 ? ",)" : ")");
}

fs::path pick_file(const fs::path& dir, const std::string& name) {
  std::error_code ec;
  for (const std::string& n : {name + ".gz", name}) {
    if (fs::is_regular_file(dir / n, ec)) return dir / n;
  }
  fail(dir.string(), "neither " + name + ".gz nor " + name + " found");
}

}  // namespace

Dataset load_idx(const std::string& images_path, const std::string& labels_path) {
  // Both headers first: a mismatch is reported before megabytes are decoded.
  GzReader im_in(images_path), lb_in(labels_path);
  const IdxHeader im = read_idx_header(im_in, images_path);
  if (im.dims.size() < 2) {
    fail(images_path, "not an image file: " + std::to_string(im.dims.size()) +
                          " dimension (images have 2 or more: count, then the sample's dimensions)");
  }
  const IdxHeader lb = read_idx_header(lb_in, labels_path);
  if (lb.dims.size() != 1) {
    fail(labels_path, "not a label file: " + std::to_string(lb.dims.size()) + " dimensions (labels have 1)");
  }
  if (lb.type.kind == 'f') {
    fail(labels_path, "labels of type " + lb.type.name() + " (expected an integer type)");
  }
  check_counts(images_path, labels_path, im.dims[0], lb.dims[0], "images");
  std::vector<float> x = read_values<float>(im_in, im.elements, im.type);
  const std::vector<int64_t> labels = read_values<int64_t>(lb_in, lb.elements, lb.type);
  return assemble(images_path, labels_path, im.dims, std::move(x), labels);
}

Dataset load_npy(const std::string& x_path, const std::string& labels_path) {
  GzReader x_in(x_path), lb_in(labels_path);
  const NpyHeader xh = read_npy_header(x_in, x_path, {"|u1", "<f4", "<f8"}, "x");
  if (xh.shape.size() < 2) {
    fail(x_path, "x has shape " + npy_shape_text(xh.shape) + " (expected (count, features...))");
  }
  const NpyHeader lh = read_npy_header(lb_in, labels_path, {"|u1", "<i4", "<i8"}, "labels");
  if (lh.shape.size() != 1) {
    fail(labels_path, "labels have shape " + npy_shape_text(lh.shape) + " (expected (count,))");
  }
  check_counts(x_path, labels_path, xh.shape[0], lh.shape[0], "samples");
  std::vector<float> x = read_values<float>(x_in, xh.elements, xh.type);
  const std::vector<int64_t> labels = read_values<int64_t>(lb_in, lh.elements, lh.type);
  return assemble(x_path, labels_path, xh.shape, std::move(x), labels);
}

Dataset load_fashion_mnist(const std::string& dir, bool train) {
  const fs::path d = dir.empty() ? kFashionMnistDir : dir;
  std::error_code ec;
  if (!fs::is_directory(d, ec)) {
    fail(d.string(), std::string(fs::exists(d, ec) ? "not a directory" : "no such directory") +
                         " (Fashion-MNIST comes with Debian's dataset-fashion-mnist package, which installs it in " +
                         kFashionMnistDir + ")");
  }
  const std::string set = train ? "train" : "t10k";
  const fs::path images = pick_file(d, set + "-images-idx3-ubyte");  // named first when both are missing
  return load_idx(images.string(), pick_file(d, set + "-labels-idx1-ubyte").string());
}

std::vector<uint32_t> shuffled_order(size_t n, uint64_t seed, uint64_t epoch) {
  if (n > (uint64_t{1} << 32)) throw DatasetError("shuffled_order: " + std::to_string(n) + " samples exceed 2^32");
  constexpr uint64_t kGolden = 0x9E3779B97F4A7C15;
  uint64_t state = seed ^ (epoch * kGolden);
  auto next = [&state] {  // splitmix64 (Steele, Lea, Flood 2014; Vigna's reference code)
    uint64_t z = (state += kGolden);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EB;
    return z ^ (z >> 31);
  };
  std::vector<uint32_t> order(n);
  for (size_t i = 0; i < n; ++i) order[i] = static_cast<uint32_t>(i);
  // Fisher-Yates from the end. `% (i + 1)` is biased by at most (i + 1) / 2^64 < 2^-32 per draw,
  // far below anything a data order could show; it is kept because it is simple to reproduce
  // exactly elsewhere (no rejection loop, one draw per position).
  for (size_t i = n; i-- > 1;) {
    const size_t j = static_cast<size_t>(next() % (i + 1));
    std::swap(order[i], order[j]);
  }
  return order;
}

}  // namespace wafersim::tlm
