// The host side of weight-streaming training (docs/weight-streaming.md): N systems, each a
// wafer with the same weight-streaming program, train data-parallel on equal shards of every
// minibatch. Per minibatch, MemoryX's weights and biases stream into every wafer (the same
// bytes to each, as SwarmX broadcasts them), the input workers' samples and labels into each
// wafer's shard, and each wafer's weight gradients, bias gradients and loss sum come back out of
// its West channels. The sums over systems (SwarmX's fixed tree order) go into MemoryX, whose
// optimizer updates the weights.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "compiler/kernel_graph.h"
#include "compiler/ws_codegen.h"
#include "firmware/program.h"
#include "hw/fabric.h"
#include "tlm/input_worker.h"
#include "tlm/memoryx.h"

namespace wafersim::tlm {

// The host side as the wafer sees it, in wavelets per cycle and cycles (from the MemoryX, SwarmX,
// bridge and input worker parameters; docs/weight-streaming.md).
struct WsHostLinks {
  double weights_per_cycle = 1e9;  // MemoryX -> SwarmX -> bridge: the slowest of the three
  double inputs_per_cycle = 1e9;   // input workers -> bridge
  double grads_per_cycle = 1e9;    // bridge -> SwarmX (gradients, loss)
  uint64_t latency = 0;            // cycles from a weight request to its first word at the wafer
  bool prefetch = true;            // request the next pass while this one streams
};

// Cycles of one minibatch by what the wafer was doing (they add up to its cycles), for the
// whole step and per layer pass (forward 0..L-1, then backward L-1..0).
struct WsTime {
  uint64_t compute = 0, weight_stream = 0, grad_reduce = 0, input_stall = 0;
  uint64_t total() const { return compute + weight_stream + grad_reduce + input_stall; }
  WsTime& operator+=(const WsTime& o) {
    compute += o.compute;
    weight_stream += o.weight_stream;
    grad_reduce += o.grad_reduce;
    input_stall += o.input_stall;
    return *this;
  }
};

// One wafer and its host-side stream buffers.
class WsSystem {
 public:
  WsSystem(const HwConfig& hw, const compiler::WsCompiled& c, int index, const WsHostLinks& links = {});

  Fabric& fabric() { return *m_fabric; }
  const Fabric& fabric() const { return *m_fabric; }
  int index() const { return m_index; }

  // Queues one minibatch for this system: its shard of inputs (normalised) and labels, then the
  // weights and biases of every layer pass (forward 0..L-1, backward L-1..0).
  void queue_step(const std::vector<const float*>& xs, const std::vector<int>& labels,
                  const std::vector<std::vector<float>>& w, const std::vector<std::vector<float>>& b);
  // One cycle: offer queued wavelets to the West channels, step the wafer, collect what the West
  // channels. Returns true once every output of the minibatch is in.
  bool cycle();
  bool done() const;
  // The minibatch's results, valid once done(): per layer dW (out x in) and db, and the loss sum.
  void results(std::vector<std::vector<float>>* dw, std::vector<std::vector<float>>* db, float* loss_sum) const;

  uint64_t refused() const { return m_refused; }  // offers a full West channel refused
  const LoadedProgram& loaded() const { return m_loaded; }
  const WsTime& step_time() const { return m_time; }               // this minibatch
  const std::vector<WsTime>& pass_time() const { return m_pass_time; }  // this minibatch, per pass

 private:
  enum Kind : uint8_t { kInput, kWeight };
  struct Item {
    Wavelet w;
    Kind kind;
    int pass;  // weight pass, -1 for inputs
  };
  void release_pass(int pass);

  const compiler::WsCompiled& m_c;
  int m_index;
  std::unique_ptr<Fabric> m_fabric;
  LoadedProgram m_loaded;
  std::vector<EdgeChannel*> m_west;  // by channel index (rows, then the root): streams in, results out
  WsHostLinks m_links;
  std::vector<std::deque<Item>> m_pending;
  std::vector<std::vector<uint32_t>> m_got;   // payloads back from the wafer this minibatch, per channel
  std::vector<size_t> m_expect;               // payloads a minibatch yields, per channel
  std::vector<uint64_t> m_pass_left;          // weights of each pass not yet in the wafer
  int m_released = 0;                         // passes the host has requested so far
  uint64_t m_now = 0, m_avail_at = 0;         // cycle; when released weights start arriving
  double m_wbudget = 0, m_ibudget = 0, m_gbudget = 0;
  size_t m_rr = 0;
  uint64_t m_refused = 0;
  WsTime m_time;
  std::vector<WsTime> m_pass_time;
};

struct WsStepResult {
  long long step = 0;
  double mean_loss = 0;
  uint64_t cycles = 0;  // this minibatch, on the wafers (they run in lockstep)
  WsTime time;          // system 0's split of those cycles
  std::vector<WsTime> pass_time;
};

class WsTrainer {
 public:
  // Registers the model's weights and biases in `memx` (which must be empty).
  WsTrainer(const HwConfig& hw, const compiler::KernelGraph& g, const compiler::WsCompiled& c, const Dataset& data,
            const Normalize& norm, uint64_t seed, long long first_step, MemoryX& memx, int swarmx_fanout = 4,
            const WsHostLinks& links = {});

  WsStepResult step();
  uint64_t cycles() const { return m_cycles; }
  long long steps_done() const { return m_step; }
  void set_steps_done(long long n) { m_step = n; }  // resume: the data order continues from there
  int systems() const { return static_cast<int>(m_sys.size()); }
  WsSystem& system(int i) { return *m_sys[static_cast<size_t>(i)]; }
  // Weights and biases per layer, from MemoryX.
  std::vector<std::vector<float>> weights() const;
  std::vector<std::vector<float>> biases() const;
  // Host seconds spent in the host models (MemoryX reads, writes and optimizer, SwarmX's sums).
  double host_model_seconds() const { return m_model_secs; }
  int weight_tensor(int layer) const { return m_wid[static_cast<size_t>(layer)]; }
  int bias_tensor(int layer) const { return m_bid[static_cast<size_t>(layer)]; }

 private:
  uint64_t settle();
  std::vector<float> read_tensor(int id);  // a READ transaction on MemoryX
  void write_grad(int id, const std::vector<float>& g);

  const compiler::WsCompiled& m_c;
  const Dataset& m_data;
  MemoryX& m_memx;
  std::unique_ptr<InputWorker> m_order;  // the run's data order and normalisation
  std::vector<std::unique_ptr<WsSystem>> m_sys;
  std::vector<int> m_wid, m_bid;
  long long m_step = 0;
  uint64_t m_cycles = 0;
  uint64_t m_limit = 0;
  int m_fanout = 4;
  double m_model_secs = 0;
};

}  // namespace wafersim::tlm
