// Fuzz target: a pair of .npy files (samples, labels; plain or gzip) through tlm::load_npy, as
// `wafersim train --data.source npy` reads them. The input carries both files
// (fuzz::split_two). DatasetError is the documented rejection; a dataset that loads must be
// consistent: count x features values, count labels, each in 0..classes-1.
#include "fuzz_support.h"
#include "dataset_check.h"
#include "tlm/dataset.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace wafersim;
  const auto [samples, labels] = fuzz::split_two(data, size);
  const std::string x = fuzz::write_scratch("x.npy", samples), y = fuzz::write_scratch("y.npy", labels);
  try {
    const tlm::Dataset d = tlm::load_npy(x, y);
    fuzz::check_dataset(d);
    fuzz::outcome("loaded " + std::to_string(d.count) + " samples of " + std::to_string(d.features) + " features");
  } catch (const tlm::DatasetError& e) {
    fuzz::outcome(e.what());
  }
  return 0;
}
