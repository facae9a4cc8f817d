// The host's input worker for layer-pipelined training: reads samples in the run's shuffled
// order, normalises them, and streams them into the wafer's West I/O channels as wavelets (each
// input row's slice on its own color, the label to the loss root). It only ever offers what a
// channel takes: backpressure from the wafer throttles it.
#pragma once

#include <cstdint>
#include <deque>
#include <vector>

#include "compiler/input_prep.h"
#include "hw/wavelet.h"
#include "tlm/dataset.h"

namespace wafersim {
class Fabric;
}

namespace wafersim::tlm {

// Where each part of a sample goes: input features [off, off + len) on `color` through West
// channel `channel`; the label (an integer payload) on label_color through label_channel.
// With replicas, `copies` holds the other copies' routes: sample i of a minibatch of `batch`
// goes to copy i % (copies.size() + 1), copy 0 being this route.
struct InputRoute {
  struct Slice {
    int channel = 0, color = 0, off = 0, len = 0;
  };
  std::vector<Slice> slices;
  int label_channel = 0, label_color = 0;
  std::vector<InputRoute> copies;
  int batch = 1;
};

// What the input workers do to each feature k of a sample: x' = (x * scale - mean) / std, then
// the model's own preprocessing of its input (`graph`: compiler/input_prep.h), in its order.
struct Normalize {
  float scale = 1.0f / 255.0f, mean = 0.2860f, std = 0.3530f;
  std::vector<compiler::InputPrep> graph;
  float apply(float x, size_t k) const { return compiler::apply_input_prep(graph, (x * scale - mean) / std, k); }
};

class InputWorker {
 public:
  InputWorker(const Dataset& data, const InputRoute& route, const Normalize& norm, uint64_t seed);

  // Queues the samples of global positions [first, first + count) of the run's order.
  void enqueue(long long first, long long count);
  // Offers queued wavelets to the channels until each refuses; returns wavelets injected.
  uint64_t pump(Fabric& fabric);
  bool idle() const;
  uint64_t refused() const { return m_refused; }  // offers the wafer refused (backpressure)

  // The dataset index at global position `pos` (epoch = pos / count, shuffled per epoch).
  size_t sample_at(long long pos);
  const Dataset& data() const { return m_data; }
  const Normalize& normalize() const { return m_norm; }

 private:
  const Dataset& m_data;
  InputRoute m_route;
  Normalize m_norm;
  uint64_t m_seed;
  long long m_epoch = -1;
  std::vector<uint32_t> m_order;
  std::vector<std::deque<Wavelet>> m_pending;  // per West channel
  std::vector<size_t> m_used;                  // the channels the route uses, in order
  uint64_t m_refused = 0;
};

}  // namespace wafersim::tlm
