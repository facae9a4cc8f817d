// The consistency a loaded tlm::Dataset promises (tlm/dataset.h), checked by fuzz_idx and fuzz_npy.
#pragma once

#include <string>

#include "fuzz_support.h"
#include "tlm/dataset.h"

namespace wafersim::fuzz {

inline void check_dataset(const tlm::Dataset& d) {
  if (d.labels.size() != d.count) fail("dataset: " + std::to_string(d.labels.size()) + " labels for " + std::to_string(d.count) + " samples");
  if (d.features != 0 && d.x.size() / d.features != d.count) {
    fail("dataset: " + std::to_string(d.x.size()) + " values for " + std::to_string(d.count) + " samples of " +
         std::to_string(d.features) + " features");
  }
  if (d.x.size() != d.count * d.features) fail("dataset: x holds " + std::to_string(d.x.size()) + " values, not count x features");
  for (size_t i = 0; i < d.count; ++i) {
    if (d.labels[i] < 0 || d.labels[i] >= d.classes) {
      fail("dataset: label " + std::to_string(d.labels[i]) + " at " + std::to_string(i) + " outside 0.." +
           std::to_string(d.classes - 1));
    }
  }
}

}  // namespace wafersim::fuzz
