// Training and test data for the host-side input workers: IDX files (gzip-compressed or plain,
// as Debian's dataset-fashion-mnist installs them) and NumPy .npy files, plus the seeded shuffle
// that fixes the data order of a run.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace wafersim::tlm {

class DatasetError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// count samples of `features` values each (the raw stored values as float: 0..255 for uint8
// images), and one integer label per sample in 0..classes-1.
struct Dataset {
  size_t count = 0;
  size_t features = 0;
  int classes = 0;  // 1 + the largest label
  std::vector<float> x;          // count * features, row-major
  std::vector<int32_t> labels;   // count

  const float* sample(size_t i) const { return x.data() + i * features; }
};

// IDX (magic 0x00000803 images of uint8, 0x00000801 labels of uint8; other IDX element types
// float32/int32 accepted too), each file optionally gzip-compressed (detected by its magic
// bytes, not the name). Throws DatasetError naming the file: missing, truncated, bad magic,
// counts of images and labels that differ, a label below 0.
Dataset load_idx(const std::string& images_path, const std::string& labels_path);

// NumPy .npy (format version 1.0/2.0/3.0, little-endian, C order): x of shape [N, ...] in
// uint8, float32 or float64 (flattened per sample); labels of shape [N] in uint8, int32 or int64.
// Throws DatasetError for anything else, naming the file and what was found.
Dataset load_npy(const std::string& x_path, const std::string& labels_path);

// Fashion-MNIST from a directory holding train-images-idx3-ubyte(.gz), train-labels-idx1-ubyte(.gz),
// t10k-images-idx3-ubyte(.gz), t10k-labels-idx1-ubyte(.gz) (the .gz names first).
// Default directory: /usr/share/datasets/fashion-mnist.
Dataset load_fashion_mnist(const std::string& dir, bool train);

// The order of samples 0..n-1 in epoch `epoch` of a run seeded with `seed`: a Fisher-Yates
// shuffle driven by a self-contained 64-bit generator (splitmix64 seeded from seed and epoch),
// so the order is the same on every platform and standard library.
std::vector<uint32_t> shuffled_order(size_t n, uint64_t seed, uint64_t epoch);

}  // namespace wafersim::tlm
