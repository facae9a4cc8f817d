// Dataset loaders (IDX plain and gzip, NumPy .npy, Fashion-MNIST) on small hand-built files,
// every rejected input with its message, the seeded shuffle, and the installed Fashion-MNIST.
#include <zlib.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <map>
#include <numeric>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "test_support.h"
#include "tlm/dataset.h"

namespace wafersim::tlm {
namespace {

using Bytes = std::vector<uint8_t>;
using test::contains;
using test::test_tmp_dir;

constexpr int kU8 = 0x08, kI8 = 0x09, kI16 = 0x0B, kI32 = 0x0C, kF32 = 0x0D, kF64 = 0x0E;

void put_be(Bytes& b, uint64_t v, int bytes) {
  for (int i = bytes - 1; i >= 0; --i) b.push_back(static_cast<uint8_t>(v >> (8 * i)));
}
void put_le(Bytes& b, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) b.push_back(static_cast<uint8_t>(v >> (8 * i)));
}
uint32_t f32_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
uint64_t f64_bits(double d) {
  uint64_t u;
  std::memcpy(&u, &d, 8);
  return u;
}

// An IDX file: magic 0x0000TTDD (type, number of dimensions), big-endian dimensions, `payload`.
Bytes idx(int type, const std::vector<uint32_t>& dims, const Bytes& payload) {
  Bytes b;
  put_be(b, static_cast<uint32_t>(type) << 8 | static_cast<uint32_t>(dims.size()), 4);
  for (uint32_t d : dims) put_be(b, d, 4);
  b.insert(b.end(), payload.begin(), payload.end());
  return b;
}

// `values` as big-endian IDX elements of `type`.
Bytes idx_values(int type, const std::vector<double>& values) {
  Bytes b;
  for (double v : values) {
    switch (type) {
      case kU8: case kI8: put_be(b, static_cast<uint64_t>(static_cast<int64_t>(v)), 1); break;
      case kI16: put_be(b, static_cast<uint64_t>(static_cast<int64_t>(v)), 2); break;
      case kI32: put_be(b, static_cast<uint64_t>(static_cast<int64_t>(v)), 4); break;
      case kF32: put_be(b, f32_bits(static_cast<float>(v)), 4); break;
      default: put_be(b, f64_bits(v), 8); break;
    }
  }
  return b;
}

// A .npy file with the header dict written out as numpy does: padded with spaces and a newline
// so that the data starts at a multiple of 64 bytes.
Bytes npy(const std::string& dict, const Bytes& payload, int major = 1) {
  const size_t prefix = major == 1 ? 10 : 12;
  std::string h = dict;
  while ((prefix + h.size() + 1) % 64) h += ' ';
  h += '\n';
  Bytes b = {0x93, 'N', 'U', 'M', 'P', 'Y', static_cast<uint8_t>(major), 0};
  put_le(b, h.size(), major == 1 ? 2 : 4);
  b.insert(b.end(), h.begin(), h.end());
  b.insert(b.end(), payload.begin(), payload.end());
  return b;
}

std::string npy_dict(const std::string& descr, const std::string& shape, const std::string& fortran = "False") {
  return "{'descr': '" + descr + "', 'fortran_order': " + fortran + ", 'shape': " + shape + ", }";
}

// `values` as little-endian .npy elements of `descr`.
Bytes npy_values(const std::string& descr, const std::vector<double>& values) {
  Bytes b;
  for (double v : values) {
    if (descr == "|u1") put_le(b, static_cast<uint64_t>(v), 1);
    else if (descr == "<i4") put_le(b, static_cast<uint64_t>(static_cast<int64_t>(v)), 4);
    else if (descr == "<i8") put_le(b, static_cast<uint64_t>(static_cast<int64_t>(v)), 8);
    else if (descr == "<f4") put_le(b, f32_bits(static_cast<float>(v)), 4);
    else put_le(b, f64_bits(v), 8);
  }
  return b;
}

std::string write_file(const std::string& name, const Bytes& b) {
  const std::string path = test_tmp_dir() + "/" + name;
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
  return path;
}

std::string write_gz(const std::string& name, const Bytes& b) {
  const std::string path = test_tmp_dir() + "/" + name;
  gzFile f = gzopen(path.c_str(), "wb");
  EXPECT_NE(f, nullptr) << path;
  EXPECT_EQ(gzwrite(f, b.data(), static_cast<unsigned>(b.size())), static_cast<int>(b.size()));
  EXPECT_EQ(gzclose(f), Z_OK);
  return path;
}

Bytes read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return Bytes(std::istreambuf_iterator<char>(in), {});
}

// The DatasetError message of `load`, or "" when it succeeds.
std::string error_of(const std::function<void()>& load) {
  try {
    load();
  } catch (const DatasetError& e) {
    return e.what();
  }
  return "";
}

// Three 2x2 uint8 images with labels 1, 0, 2.
const std::vector<double> kPixels = {0, 1, 2, 3, 10, 20, 30, 40, 255, 254, 128, 7};
Bytes small_images() { return idx(kU8, {3, 2, 2}, idx_values(kU8, kPixels)); }
Bytes small_labels() { return idx(kU8, {3}, {1, 0, 2}); }

void expect_small(const Dataset& d) {
  EXPECT_EQ(d.count, 3u);
  EXPECT_EQ(d.features, 4u);
  EXPECT_EQ(d.classes, 3);
  EXPECT_EQ(d.x, std::vector<float>(kPixels.begin(), kPixels.end()));
  EXPECT_EQ(d.labels, (std::vector<int32_t>{1, 0, 2}));
  EXPECT_EQ(d.sample(2)[0], 255.0f);
}

// --- IDX ---

TEST(Dataset, IdxUint8ImagesAndLabels) {
  expect_small(load_idx(write_file("im", small_images()), write_file("lb", small_labels())));
}

TEST(Dataset, IdxGzipIsDetectedByMagicNotByName) {
  // gzip under plain names, plain data under .gz names, and the mixtures.
  const std::string im_gz = write_gz("images", small_images()), lb_gz = write_gz("labels", small_labels());
  const std::string im = write_file("images.gz", small_images()), lb = write_file("labels.gz", small_labels());
  expect_small(load_idx(im_gz, lb_gz));
  expect_small(load_idx(im, lb));
  expect_small(load_idx(im_gz, lb));
  ASSERT_NE(read_file(im_gz), small_images());  // really compressed
  EXPECT_EQ(read_file(im_gz)[0], 0x1f);
}

TEST(Dataset, IdxOtherElementTypesAndDimensions) {
  const std::map<int, std::vector<double>> values = {
      {kI8, {-128, 127, -1, 0, 5, 6}},
      {kI16, {-300, 32767, -32768, 0, 1, 2}},
      {kI32, {-70000, 16777216, 2147483647, -2147483648.0, 3, 4}},
      {kF32, {0.5, -1.25, 3e6, 1e-20, -0.0, 7}},
      {kF64, {1e-3, -2.5e10, 0.1, 1e30, 2, 3}},
  };
  for (const auto& [type, v] : values) {
    SCOPED_TRACE(type);
    // Two samples of 1 x 3 x 1: features multiply over every dimension after the first. Labels
    // in the same type when it is an integer one.
    const int label_type = type == kF32 || type == kF64 ? kI32 : type;
    const Dataset d = load_idx(write_file("im", idx(type, {2, 1, 3, 1}, idx_values(type, v))),
                               write_file("lb", idx(label_type, {2}, idx_values(label_type, {4, 0}))));
    EXPECT_EQ(d.count, 2u);
    EXPECT_EQ(d.features, 3u);
    EXPECT_EQ(d.classes, 5);
    EXPECT_EQ(d.labels, (std::vector<int32_t>{4, 0}));
    ASSERT_EQ(d.x.size(), v.size());
    for (size_t i = 0; i < v.size(); ++i) EXPECT_EQ(d.x[i], static_cast<float>(v[i])) << i;
  }
}

TEST(Dataset, IdxMissingFile) {
  const std::string lb = write_file("lb", small_labels()), missing = test_tmp_dir() + "/no-such-file";
  const std::string e = error_of([&] { load_idx(missing, lb); });
  EXPECT_TRUE(contains(e, missing + ": cannot open")) << e;
  EXPECT_TRUE(contains(e, "No such file")) << e;
  const std::string e2 = error_of([&] { load_idx(test_tmp_dir(), lb); });
  EXPECT_TRUE(contains(e2, test_tmp_dir() + ": cannot open (it is a directory)")) << e2;
}

struct IdxErrorCase {
  const char* name;
  Bytes images, labels;
  bool labels_named;  // the message names the labels file, not the images file
  const char* message;
};

TEST(Dataset, IdxBadFilesAreRejectedNamingFileAndProblem) {
  Bytes pgm = {'P', '5', '\n', '2', ' ', '2', '\n', '2', '5', '5', '\n', 1, 2, 3, 4};
  Bytes short_header = idx(kU8, {3, 2, 2}, {});
  short_header.resize(6);
  const std::vector<IdxErrorCase> cases = {
      {"short data", idx(kU8, {3, 2, 2}, Bytes(11, 7)), small_labels(), false,
       "truncated (expected 12 bytes of data, found 11)"},
      {"long data", idx(kU8, {3, 2, 2}, Bytes(13, 7)), small_labels(), false,
       "trailing data (expected 12 bytes of data, found 13)"},
      {"short labels", small_images(), idx(kI32, {3}, Bytes(10, 0)), true,
       "truncated (expected 12 bytes of data, found 10)"},
      {"short header", short_header, small_labels(), false, "truncated header (expected 16 bytes, found 6)"},
      {"empty file", {}, small_labels(), false, "truncated header (expected 4 bytes, found 0)"},
      {"unknown type", idx(0x07, {3, 2, 2}, Bytes(12, 0)), small_labels(), false, "bad IDX magic 0x00000703"},
      {"no dimensions", idx(kU8, {}, {}), small_labels(), false, "bad IDX magic 0x00000800"},
      {"not IDX", pgm, small_labels(), false, "bad IDX magic 0x50350a32"},
      {"count mismatch", idx(kU8, {600, 1, 1}, Bytes(600, 1)), idx(kU8, {599}, Bytes(599, 1)), false,
       "600 images but 599 labels"},
      {"negative label", idx(kU8, {4, 1, 1}, Bytes(4, 1)), idx(kI8, {4}, {0, 1, 2, 0xff}), true,
       "label -1 at index 3"},
      {"huge label", idx(kU8, {2, 1, 1}, Bytes(2, 1)), idx(kI32, {2}, idx_values(kI32, {0, 2147483647})), true,
       "label 2147483647 at index 1 (too large)"},
      {"labels as images", small_labels(), small_labels(), false, "not an image file: 1 dimension"},
      {"images as labels", small_images(), small_images(), true, "not a label file: 3 dimensions"},
      {"float labels", small_images(), idx(kF32, {3}, idx_values(kF32, {1, 0, 2})), true,
       "labels of type float32 (expected an integer type)"},
      // No samples, but a sample of more than 2^64 bytes (found by fuzz_idx's assertions).
      {"no samples of a huge shape", idx(kU8, {0, 0xffffffff, 0xffffffff, 0xffffffff}, {}), idx(kU8, {0}, {}), false,
       "dimensions 0 x 4294967295 x 4294967295 x 4294967295 are too large"},
  };
  for (const IdxErrorCase& c : cases) {
    const std::string im = write_file("im", c.images), lb = write_file("lb", c.labels);
    const std::string e = error_of([&] { load_idx(im, lb); });
    EXPECT_TRUE(contains(e, (c.labels_named ? lb : im) + ": ")) << c.name << ": " << e;
    EXPECT_TRUE(contains(e, c.message)) << c.name << ": " << e;
  }
}

TEST(Dataset, IdxDamagedGzipIsRejected) {
  const std::string lb = write_file("lb", idx(kU8, {50}, Bytes(50, 1)));
  Bytes big(5000);
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<uint8_t>(i * 7 + i / 13);
  const Bytes gz = read_file(write_gz("full.gz", idx(kU8, {50, 10, 10}, big)));

  const std::string cut = write_file("cut.gz", Bytes(gz.begin(), gz.begin() + static_cast<long>(gz.size() / 2)));
  const std::string e = error_of([&] { load_idx(cut, lb); });
  EXPECT_TRUE(contains(e, cut + ": truncated gzip stream")) << e;

  Bytes flipped = gz;
  flipped[gz.size() / 2] ^= 0x5a;
  const std::string bad = write_file("bad.gz", flipped);
  const std::string e2 = error_of([&] { load_idx(bad, lb); });
  EXPECT_TRUE(contains(e2, bad + ": read error")) << e2;
}

// --- NPY ---

TEST(Dataset, NpyEveryAcceptedDtypePair) {
  const std::vector<double> pixels = {0, 1, 2, 3, 10, 20, 30, 40, 255, 254, 128, 7};
  const std::vector<double> fractions = {0.5, -1.25, 3e6, 1e-20, 0, 7, 0.1, -2, 1, 2, 3, 4};
  for (const std::string x_descr : {"|u1", "<f4", "<f8"}) {
    for (const std::string l_descr : {"|u1", "<i4", "<i8"}) {
      SCOPED_TRACE(x_descr + " " + l_descr);
      const std::vector<double>& v = x_descr == "|u1" ? pixels : fractions;
      const Dataset d = load_npy(write_file("x.npy", npy(npy_dict(x_descr, "(3, 2, 2)"), npy_values(x_descr, v))),
                                 write_file("y.npy", npy(npy_dict(l_descr, "(3,)"), npy_values(l_descr, {1, 0, 6}))));
      EXPECT_EQ(d.count, 3u);
      EXPECT_EQ(d.features, 4u);
      EXPECT_EQ(d.classes, 7);
      EXPECT_EQ(d.labels, (std::vector<int32_t>{1, 0, 6}));
      ASSERT_EQ(d.x.size(), v.size());
      for (size_t i = 0; i < v.size(); ++i) EXPECT_EQ(d.x[i], static_cast<float>(v[i])) << i;
    }
  }
}

TEST(Dataset, NpyHeaderVariants) {
  const Bytes x = npy_values("<f4", {1, 2, 3, 4});
  const std::string y = write_file("y.npy", npy(npy_dict("|u1", "(2,)"), {0, 1}));
  // Format 2.0 and 3.0 (4-byte header length), keys in another order with double quotes and no
  // trailing comma, Python 2 longs, and a gzip-compressed file.
  const std::vector<std::string> files = {
      write_file("v2.npy", npy(npy_dict("<f4", "(2, 2)"), x, 2)),
      write_file("v3.npy", npy(npy_dict("<f4", "(2, 2)"), x, 3)),
      write_file("keys.npy", npy("{\"shape\": (2,2), \"fortran_order\": False, \"descr\": \"<f4\"}", x)),
      write_file("py2.npy", npy("{'descr': '<f4', 'fortran_order': False, 'shape': (2L, 2L), }", x)),
      write_gz("gz.npy", npy(npy_dict("<f4", "(2, 2)"), x)),
  };
  for (const std::string& f : files) {
    const Dataset d = load_npy(f, y);
    EXPECT_EQ(d.features, 2u) << f;
    EXPECT_EQ(d.x, (std::vector<float>{1, 2, 3, 4})) << f;
  }
}

struct NpyErrorCase {
  const char* name;
  Bytes x, labels;
  bool labels_named;
  const char* message;
};

TEST(Dataset, NpyBadFilesAreRejectedNamingFileAndProblem) {
  const Bytes x = npy(npy_dict("<f4", "(3, 2)"), npy_values("<f4", {1, 2, 3, 4, 5, 6}));
  const Bytes y = npy(npy_dict("<i8", "(3,)"), npy_values("<i8", {0, 1, 2}));
  Bytes bad_magic = x;
  bad_magic[1] = 'X';
  Bytes v4 = x;
  v4[6] = 4;
  const std::vector<NpyErrorCase> cases = {
      {"fortran order", npy(npy_dict("<f4", "(3, 2)", "True"), npy_values("<f4", {1, 2, 3, 4, 5, 6})), y, false,
       "fortran_order True (column-major data) not supported"},
      {"big-endian x", npy(npy_dict(">f4", "(3, 2)"), Bytes(24, 0)), y, false,
       "big-endian dtype '>f4' not supported"},
      {"big-endian labels", x, npy(npy_dict(">i8", "(3,)"), Bytes(24, 0)), true,
       "big-endian dtype '>i8' not supported"},
      {"half x", npy(npy_dict("<f2", "(3, 2)"), Bytes(12, 0)), y, false,
       "dtype '<f2' not supported for x (expected '|u1', '<f4', '<f8')"},
      {"float labels", x, npy(npy_dict("<f4", "(3,)"), Bytes(12, 0)), true,
       "dtype '<f4' not supported for labels (expected '|u1', '<i4', '<i8')"},
      {"structured", npy("{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (3,), }", Bytes(12, 0)), y,
       false, "structured dtype"},
      {"x of one dimension", npy(npy_dict("<f4", "(3,)"), Bytes(12, 0)), y, false,
       "x has shape (3,) (expected (count, features...))"},
      {"labels of two dimensions", x, npy(npy_dict("<i8", "(3, 1)"), Bytes(24, 0)), true,
       "labels have shape (3, 1) (expected (count,))"},
      {"short data", npy(npy_dict("<f4", "(3, 2)"), Bytes(23, 0)), y, false,
       "truncated (expected 24 bytes of data, found 23)"},
      {"long labels", x, npy(npy_dict("<i8", "(3,)"), Bytes(25, 0)), true,
       "trailing data (expected 24 bytes of data, found 25)"},
      {"count mismatch", x, npy(npy_dict("<i8", "(2,)"), Bytes(16, 0)), false, "3 samples but 2 labels"},
      {"negative label", npy(npy_dict("|u1", "(4, 1)"), Bytes(4, 0)),
       npy(npy_dict("<i8", "(4,)"), npy_values("<i8", {0, 1, 2, -1})), true, "label -1 at index 3"},
      {"bad magic", bad_magic, y, false, "not a .npy file"},
      {"version 4", v4, y, false, "unsupported .npy format version 4.0"},
      {"missing key", npy("{'descr': '<f4', 'shape': (3, 2), }", Bytes(24, 0)), y, false,
       "lacks 'descr', 'fortran_order' or 'shape'"},
      {"extra key", npy("{'descr': '<f4', 'fortran_order': False, 'shape': (3, 2), 'x': (1,), }", Bytes(24, 0)), y,
       false, "unexpected key 'x'"},
      {"garbled shape", npy(npy_dict("<f4", "(3, two)"), Bytes(24, 0)), y, false, "expected a dimension"},
      {"short header", Bytes(x.begin(), x.begin() + 30), y, false, "truncated header (expected 128 bytes, found 30)"},
      {"no samples of a huge shape", npy(npy_dict("|u1", "(0, 4294967296, 4294967296)"), {}),
       npy(npy_dict("<i8", "(0,)"), {}), false, "shape 0 x 4294967296 x 4294967296 is too large"},
  };
  for (const NpyErrorCase& c : cases) {
    const std::string xp = write_file("x.npy", c.x), yp = write_file("y.npy", c.labels);
    const std::string e = error_of([&] { load_npy(xp, yp); });
    EXPECT_TRUE(contains(e, (c.labels_named ? yp : xp) + ": ")) << c.name << ": " << e;
    EXPECT_TRUE(contains(e, c.message)) << c.name << ": " << e;
  }
  const std::string missing = test_tmp_dir() + "/none.npy";
  const std::string e = error_of([&] { load_npy(missing, write_file("y.npy", y)); });
  EXPECT_TRUE(contains(e, missing + ": cannot open")) << e;
}

// --- Fashion-MNIST directory layout ---

TEST(Dataset, FashionMnistMissingDirectoryNamesThePackage) {
  const std::string dir = test_tmp_dir() + "/no-fashion";
  const std::string e = error_of([&] { load_fashion_mnist(dir, true); });
  EXPECT_TRUE(contains(e, dir + ": no such directory")) << e;
  EXPECT_TRUE(contains(e, "dataset-fashion-mnist")) << e;
}

TEST(Dataset, FashionMnistPrefersGzipNamesAndFallsBackToPlainOnes) {
  const std::string dir = test_tmp_dir();
  write_file("train-images-idx3-ubyte", idx(kU8, {1, 2, 2}, {1, 2, 3, 4}));
  write_file("train-labels-idx1-ubyte", idx(kU8, {1}, {3}));
  Dataset d = load_fashion_mnist(dir, true);
  EXPECT_EQ(d.x, (std::vector<float>{1, 2, 3, 4}));
  EXPECT_EQ(d.classes, 4);

  write_gz("train-images-idx3-ubyte.gz", idx(kU8, {1, 2, 2}, {5, 6, 7, 8}));
  d = load_fashion_mnist(dir, true);
  EXPECT_EQ(d.x, (std::vector<float>{5, 6, 7, 8}));
  EXPECT_EQ(d.labels, std::vector<int32_t>{3});

  const std::string e = error_of([&] { load_fashion_mnist(dir, false); });
  EXPECT_TRUE(contains(e, dir + ": neither t10k-images-idx3-ubyte.gz nor t10k-images-idx3-ubyte found")) << e;
}

// The installed Debian package. The expected figures were checked against the files with an
// independent reader (Python's gzip and struct modules), not taken from this loader.
TEST(Dataset, RealFashionMnist) {
  const std::string dir = "/usr/share/datasets/fashion-mnist";
  if (!std::filesystem::is_directory(dir)) GTEST_SKIP() << dir << " absent (apt install dataset-fashion-mnist)";

  const auto t0 = std::chrono::steady_clock::now();
  const Dataset train = load_fashion_mnist(dir, true);
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  std::printf("[   INFO   ] Fashion-MNIST train set (60000 x 784) loaded in %.1f ms\n", ms);
  RecordProperty("train_load_ms", static_cast<int>(ms));

  ASSERT_EQ(train.count, 60000u);
  ASSERT_EQ(train.features, 784u);
  ASSERT_EQ(train.x.size(), 60000u * 784u);
  EXPECT_EQ(train.classes, 10);
  EXPECT_EQ(std::vector<int32_t>(train.labels.begin(), train.labels.begin() + 10),
            (std::vector<int32_t>{9, 0, 0, 3, 0, 2, 7, 2, 5, 5}));  // 9: ankle boot
  std::vector<int> per_class(10);
  for (int32_t l : train.labels) ++per_class.at(static_cast<size_t>(l));
  EXPECT_EQ(per_class, std::vector<int>(10, 6000));
  uint64_t sum = 0, first = 0;
  for (size_t i = 0; i < train.x.size(); ++i) {
    const float v = train.x[i];
    ASSERT_TRUE(v >= 0 && v <= 255 && v == static_cast<float>(static_cast<int>(v))) << i;
    sum += static_cast<uint64_t>(v);
    if (i < 784) first += static_cast<uint64_t>(v);
  }
  EXPECT_EQ(sum, 3431114169u);
  EXPECT_EQ(first, 76247u);

  const Dataset test = load_fashion_mnist("", false);  // "" is the default directory
  ASSERT_EQ(test.count, 10000u);
  EXPECT_EQ(test.features, 784u);
  EXPECT_EQ(test.classes, 10);
  EXPECT_EQ(std::vector<int32_t>(test.labels.begin(), test.labels.begin() + 10),
            (std::vector<int32_t>{9, 2, 1, 1, 6, 1, 4, 6, 5, 7}));
  std::vector<int> test_per_class(10);
  for (int32_t l : test.labels) ++test_per_class.at(static_cast<size_t>(l));
  EXPECT_EQ(test_per_class, std::vector<int>(10, 1000));
  EXPECT_EQ(std::accumulate(test.x.begin(), test.x.end(), 0.0), 573469082.0);
}

// --- shuffled_order ---

TEST(Dataset, ShuffledOrderIsAPermutation) {
  for (size_t n : {0, 1, 2, 3, 10, 1000, 65537}) {
    std::vector<uint32_t> o = shuffled_order(n, 7, 3);
    ASSERT_EQ(o.size(), n);
    std::sort(o.begin(), o.end());
    for (size_t i = 0; i < n; ++i) ASSERT_EQ(o[i], i) << "n " << n;
  }
}

TEST(Dataset, ShuffledOrderIsDeterministicAndDependsOnSeedAndEpoch) {
  const std::vector<uint32_t> a = shuffled_order(1000, 42, 0);
  EXPECT_EQ(shuffled_order(1000, 42, 0), a);
  EXPECT_NE(shuffled_order(1000, 42, 1), a);
  EXPECT_NE(shuffled_order(1000, 43, 0), a);
  EXPECT_NE(shuffled_order(1000, 42, 1), shuffled_order(1000, 43, 1));
  std::vector<uint32_t> identity(1000);
  std::iota(identity.begin(), identity.end(), 0u);
  EXPECT_NE(a, identity);
}

// Pinned values, computed once by an independent Python implementation of splitmix64 (checked
// against Vigna's reference outputs for seed 1234567) and the same Fisher-Yates loop. A change
// here changes the data order of every run.
TEST(Dataset, ShuffledOrderGolden) {
  EXPECT_EQ(shuffled_order(10, 1, 0), (std::vector<uint32_t>{4, 2, 8, 1, 9, 3, 0, 6, 7, 5}));
  EXPECT_EQ(shuffled_order(10, 1, 1), (std::vector<uint32_t>{5, 7, 3, 8, 0, 6, 1, 2, 4, 9}));
  EXPECT_EQ(shuffled_order(10, 2, 0), (std::vector<uint32_t>{9, 8, 3, 2, 4, 6, 1, 7, 5, 0}));
}

// All 6 orders of 3 samples come up about equally often over 6000 epochs (fixed seeds, so this
// is deterministic; the bound is about 5 standard deviations).
TEST(Dataset, ShuffledOrderIsUnbiasedOverSmallPermutations) {
  std::map<std::vector<uint32_t>, int> seen;
  for (uint64_t epoch = 0; epoch < 6000; ++epoch) ++seen[shuffled_order(3, 99, epoch)];
  ASSERT_EQ(seen.size(), 6u);
  for (const auto& [order, n] : seen) EXPECT_NEAR(n, 1000, 150) << order[0] << order[1] << order[2];
}

}  // namespace
}  // namespace wafersim::tlm
