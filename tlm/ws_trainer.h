// The host side of weight-streaming training (docs/weight-streaming.md): N systems, each a
// wafer with the same weight-streaming program, train data-parallel on equal shards of every
// minibatch. It is a SystemC model with loosely timed TLM-2.0 transactions and temporal
// decoupling:
//   chief (SC_THREAD): on a clock edge, starts the input streams (tlm/input_stream.h: each
//     system's samples and labels), then per layer pass READs the layer from MemoryX and WRITEs
//     its weights (and, forward, biases) into SwarmX, which broadcasts them to every system's
//     bridge port; a pass's READ overlaps the previous pass's broadcast;
//   runner i (SC_THREAD per system, with a quantum keeper): steps its wafer cycle by cycle, one
//     clock period of local time each, the port turning each pass's payload into wavelets on the
//     row channels from the time it arrives; when the minibatch's results are back it WRITEs
//     dW, db and the loss sum into SwarmX, which sums the N contributions in its fixed tree order
//     into MemoryX's accumulators;
//   the chief then runs MemoryX's optimizer;
//   dispatcher (SC_THREAD, with WsHostLinks::threads > 1): runs the runners' cycles between two
//     synchronisations side by side on a pool of host threads.
// The global quantum is set once, by the trainer (ws.quantum_cycles clock periods).
#pragma once

#include <atomic>
#include <chrono>
#include <exception>

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <systemc>
#include <tlm>
#include <tlm_utils/multi_passthrough_target_socket.h>
#include <tlm_utils/simple_initiator_socket.h>
#include <tlm_utils/simple_target_socket.h>

#include "compiler/kernel_graph.h"
#include "compiler/ws_codegen.h"
#include "firmware/program.h"
#include "hw/fabric.h"
#include "hw/wafer.h"
#include "hw/worker_pool.h"
#include "tlm/input_stream.h"
#include "tlm/input_worker.h"
#include "tlm/memoryx.h"
#include "tlm/swarmx.h"

namespace wafersim::tlm {

// The host side as the wafer sees it, in wavelets per cycle and cycles (from the MemoryX, SwarmX,
// bridge and input worker parameters; docs/weight-streaming.md).
struct WsHostLinks {
  double weights_per_cycle = 1e9;  // a pass's words into the wafer: the slowest of MemoryX, SwarmX, bridge
  double inputs_per_cycle = 1e9;   // samples and labels through the bridge
  int workers = 1;                 // input workers per system, each streaming every workers-th sample
  double worker_gbps = 1e9;        // each worker's stream
  double slow_worker_gbps = 0;     // worker 0 this slow instead (0: no slow worker)
  double grads_per_cycle = 1e9;    // bridge -> SwarmX (gradients, loss)
  double bridge_latency_ns = 0;    // host link, added to every pass's arrival
  bool prefetch = true;            // request the next pass while this one streams
  uint64_t quantum_cycles = 1000;  // the global quantum, in clock periods
  // Host threads that step the systems' wafers side by side between synchronisations (at most one
  // per system; 1: each runner steps its own wafer). No effect on results: each wafer's cycles
  // between two synchronisations read only what the host posted before them.
  int threads = 1;
  // How WsSystem::cycle() walks its West channels: by bitmasks of the channels that can move
  // (up to 64 channels), or one by one. The same results; set in the struct only, for tests.
  bool channel_masks = true;
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

  // Starts a minibatch: its inputs and labels follow sample by sample with sample_arrived, the
  // weight passes (forward 0..L-1, backward L-1..1: WsPlan::streamed_passes) with queue_pass, as
  // they arrive.
  void start_step();
  // Sample s of this system's shard (normalised) and its label may enter the wafer from cycle
  // `from` on (the input workers' WRITEs).
  void sample_arrived(int s, const float* x, int label, uint64_t from);
  // Pass p's weights (out x in) and, for forward passes, biases arrive: their words may enter
  // the wafer from cycle `from` on, at the host links' rate. Throws std::logic_error for a pass
  // that streams nothing (the first layer's backward pass).
  void queue_pass(int p, const float* w, const float* b, uint64_t from);
  // Passes whose every word has entered the wafer, in order (for the no-prefetch chief).
  int passes_entered() const { return m_entered; }
  uint64_t now() const { return m_now; }
  void set_now(uint64_t c) { m_now = c; }
  // After the last result: steps until nothing is in flight and 256 cycles more (the cores'
  // bookkeeping), so that every minibatch starts from the same state. Returns the cycles.
  uint64_t settle();
  // Called after every cycle the wafer steps (cycle() and settle()), with that cycle: a traced
  // run samples its probes there and waits one clock period.
  void set_on_step(std::function<void(uint64_t)> f) { m_on_step = std::move(f); }
  void add_grad_reduce(uint64_t cycles) {
    m_time.grad_reduce += cycles;
    if (!m_pass_time.empty()) m_pass_time.back().grad_reduce += cycles;
  }
  // One cycle: offer queued wavelets to the West channels, step the wafer, collect what the West
  // channels. Returns true once every output of the minibatch is in.
  bool cycle();
  bool done() const;
  // The minibatch's results, valid once done(): per layer dW (out x in) and db, and the loss sum.
  void results(std::vector<std::vector<float>>* dw, std::vector<std::vector<float>>* db, float* loss_sum) const;
  // The gradients leave layer by layer, the last layer's first (its backward pass runs first):
  // layers_ready() of them are whole so far, the k-th (layer L-1-k) since cycle ready_at(k) (the
  // end of the cycle its last value came out). layer_results gives one whole layer's dW and db
  // (and, with the last layer's, the loss sum, which the roots send first).
  int layers_ready() const { return m_ready; }
  uint64_t ready_at(int k) const { return m_ready_at[static_cast<size_t>(k)]; }
  void layer_results(int l, std::vector<float>* dw, std::vector<float>* db, float* loss_sum) const;

  uint64_t refused() const { return m_refused; }  // offers a full West channel refused
  const LoadedProgram& loaded() const { return m_loaded; }
  const WsTime& step_time() const { return m_time; }               // this minibatch
  const std::vector<WsTime>& pass_time() const { return m_pass_time; }  // this minibatch, per pass

 private:
  enum Kind : uint8_t { kInput, kWeight };

 public:
  static constexpr int kMaxShard = 1 << 26;  // samples per system an input item can name

 private:
  // 8 bytes: a large model's passes queue tens of millions of these (data wavelets only).
  struct Item {
    uint32_t payload;       // a weight; for inputs, the feature index (or ~0u: the label)
    uint32_t pass : 26;     // weight pass; for inputs, the sample of the shard (< kMaxShard)
    uint32_t color : 5;
    uint32_t kind : 1;      // Kind
  };
  static_assert(sizeof(Item) == 8, "Item stays packed");
  void step_fabric();  // one cycle of the wafer, then m_on_step
  std::function<void(uint64_t)> m_on_step;
  std::vector<std::vector<float>> m_x;  // this minibatch's samples, as they arrive
  std::vector<int> m_label;
  std::vector<uint64_t> m_sample_from;  // cycle each sample may enter (max: not yet arrived)

  const compiler::WsCompiled& m_c;
  int m_index;
  std::unique_ptr<Fabric> m_fabric;
  LoadedProgram m_loaded;
  std::vector<EdgeChannel*> m_west;  // by channel index (rows, then the root): streams in, results out
  WsHostLinks m_links;
  std::vector<std::deque<Item>> m_pending;
  std::vector<std::vector<uint32_t>> m_got;   // payloads back from the wafer this minibatch, per channel
  std::vector<size_t> m_expect;               // payloads a minibatch yields, per channel
  // Per channel, the payloads it has yielded once the k-th layer back (layer L-1-k) is whole (the
  // root's: the loss sum, then each layer's db), the next mark a channel has not reached, per
  // layer back the channels short of their mark, and the cycle the last of them reached it.
  std::vector<std::vector<size_t>> m_mark;
  std::vector<int> m_next_mark, m_marks_left;
  std::vector<uint64_t> m_ready_at;
  int m_ready = 0;
  void pass_marks(size_t ch, uint64_t cycle);  // channel ch has yielded more: the marks it passes
  std::vector<uint64_t> m_pass_left;          // weights of each pass not yet in the wafer
  int m_entered = 0;                          // passes_entered(): the first with m_pass_left > 0
  std::vector<uint64_t> m_pass_from;          // cycle each pass's words start arriving (max: not yet sent)
  uint64_t m_now = 0;
  double m_wbudget = 0, m_ibudget = 0, m_gbudget = 0;
  size_t m_rr = 0;
  uint64_t m_recv_seen = 0;     // Fabric::channel_deliveries() at the last receive pass
  bool m_recv_pending = false;  // a channel held something after it
  int m_queued = 0;  // passes queued this minibatch
  size_t m_missing = 0;  // results of this minibatch still to come
  uint64_t m_refused = 0;
  // Per channel, the passes after which nothing more comes through it (the root's: the forward
  // ones; a grid band's: up to its last layer with a slice in it): while fewer are queued and
  // it has nothing to send, the host is late with weights.
  std::vector<int> m_until;
  uint64_t late_mask() const;  // the channels with m_queued < m_until (at most 64 channels)
  uint64_t m_late = 0;         // late_mask() since m_queued last changed
  // Per channel, its injected() when cycle() last found its inject queue full with the first
  // item due (UINT64_MAX: not so), and that item's kind: until the fabric takes a wavelet from
  // it, the queue stays full and the same item waits, so each cycle only counts a refusal if
  // that kind's budget allows.
  std::vector<uint64_t> m_full_at;
  std::vector<Kind> m_full_kind;
  // With at most 64 channels, the same as bitmasks: channels with items pending, channels
  // stamped full by the kind of their first item, and the channels the fabric took a wavelet
  // from since the last cycle (their stamps are stale). cycle() then visits only the channels
  // that can move and counts the refusals of the rest by ranges.
  bool m_masks = false;
  uint64_t m_nonempty = 0, m_full_w = 0, m_full_i = 0;
  std::atomic<uint64_t> m_took{0};
  // Channels the fabric delivered a wavelet to since the last cycle, and the channels that still
  // held something after the last receive pass: the receive pass visits only those.
  std::atomic<uint64_t> m_delivered{0};
  uint64_t m_recv = 0;
  void offer(size_t i, bool* wstall, bool* istall);  // cycle()'s work for a channel that can move
  void mark_pending();
  void count_entered();
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

class WsTrainer : public sc_core::sc_module {
 public:
  using sc_core::sc_module::trace;  // sc_object's trace(tf) stays visible beside ours
  tlm_utils::simple_initiator_socket<WsTrainer> to_swarmx;  // the chief's broadcasts

  // A system's bridge as SwarmX and the input streams see it: SwarmX's broadcast of a pass's
  // weights and the samples come in (the payload becomes the row channels' wavelets from the time
  // it arrives), the gradients go out. The cluster (tlm/cluster.h) binds its sockets.
  struct Port : sc_core::sc_module {
    tlm_utils::simple_target_socket<Port> weights_in;
    tlm_utils::multi_passthrough_target_socket<Port> inputs_in;
    tlm_utils::simple_initiator_socket<Port> grads_out;
    WsTrainer* owner;
    WsSystem* sys;
    Port(sc_core::sc_module_name n, WsTrainer* o, WsSystem* s);
    // Address: the sample's index in the shard; data: its features (fp32, normalised), then its
    // label (int32). Usable from its arrival through the bridge.
    void input(int, ::tlm::tlm_generic_payload& t, sc_core::sc_time& delay);
    // Address: the pass; data: its weights (out x in), then for forward passes the biases.
    void b_transport(::tlm::tlm_generic_payload& t, sc_core::sc_time& delay);
  };

  // The chief, the systems and their ports. Registers the model's weights and biases in `memx`.
  // The cluster binds the ports, `to_swarmx` and the input streams. Build before the first sc_start.
  WsTrainer(sc_core::sc_module_name name, const HwConfig& hw, const compiler::KernelGraph& g,
            const compiler::WsCompiled& c, const Dataset& data, const Normalize& norm, uint64_t seed, long long first_step,
            MemoryX& memx, const WsHostLinks& links);
  ~WsTrainer() override;

  // One minibatch: runs the simulation until the chief has finished it.
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
  // Host seconds the wafers' own simulation took (cycle loops between synchronisations); the rest
  // of a run's host time is the host models, the SystemC kernel and the TLM transactions.
  double wafer_seconds() const { return m_wafer_secs; }
  int weight_tensor(int layer) const { return m_wid[static_cast<size_t>(layer)]; }
  int bias_tensor(int layer) const { return m_bid[static_cast<size_t>(layer)]; }
  Port& port(int i) { return *m_ports[static_cast<size_t>(i)]; }
  // What an input stream of the cluster needs: the run's data order, the event that starts each
  // minibatch and the count of minibatches done; the chief reports the errors of those added.
  const Dataset& data() const { return m_data; }
  InputWorker& data_order() { return *m_order; }
  const sc_core::sc_event& minibatch_start() const { return m_start; }
  const long long& steps_ref() const { return m_step; }
  void add_input_stream(const InputStream& w) { m_workers.push_back(&w); }
  // Long minibatches: `report` gets a line when system 0's wafer has taken in all of a layer
  // pass, once the minibatch has run `every_seconds` of host time (0: never). Printing only;
  // results do not depend on it.
  void set_progress(std::function<void(const std::string&)> report, double every_seconds) {
    m_progress = std::move(report);
    m_progress_secs = every_seconds;
  }
  // VCD trace of `region` on every system's wafer (wafer_K.pe_X_Y): the runners then sync with
  // the kernel every cycle (results do not change: with prefetch they do not depend on the
  // quantum). Call before the first step().
  void trace(sc_core::sc_trace_file* tf, const Region& region);

 private:
  void chief();
  void runner(int i);
  // Systems stepped side by side (WsHostLinks::threads > 1): a runner posts the stretch of cycles
  // up to its next synchronisation and waits; the dispatcher runs every stretch posted in the
  // same delta cycle at once on the pool, then wakes their runners.
  struct Stretch {
    int system = 0;
    uint64_t max = 0;       // cycles at most (the last one reaches the runner's next sync point)
    uint64_t start = 0;     // the minibatch's first cycle (for the limit)
    int entered = 0;        // passes in at the start (without prefetch a new one ends the stretch)
    uint64_t stepped = 0;   // out: cycles run
    std::exception_ptr error;
  };
  void dispatcher();
  void run_stretch(Stretch& st);
  bool stretch_ends(const WsSystem& s, int entered, uint64_t start) const;
  void report_progress(const WsSystem& s, uint64_t start);  // system 0 only (m_reported)
  std::unique_ptr<WorkerPool> m_pool;
  std::vector<Stretch*> m_posted;
  sc_core::sc_event m_posted_ev;
  std::vector<std::unique_ptr<sc_core::sc_event>> m_stretch_done;  // per system
  std::chrono::steady_clock::time_point m_step0;  // host time at the minibatch's start (progress lines)
  int m_reported = 0;                             // passes reported (system 0)
  uint64_t cycle_of(const sc_core::sc_time& t) const;  // the first clock edge at or after t
  std::vector<float> read_tensor(int id, sc_core::sc_time& delay);  // a READ transaction on MemoryX

  const compiler::WsCompiled& m_c;
  const Dataset& m_data;
  MemoryX& m_memx;
  WsHostLinks m_links;
  sc_core::sc_time m_period;
  std::unique_ptr<InputWorker> m_order;  // the run's data order and normalisation
  std::vector<std::unique_ptr<WsSystem>> m_sys;
  std::vector<std::unique_ptr<Port>> m_ports;
  std::vector<std::unique_ptr<FabricProbes>> m_probes;  // per system, when traced
  std::vector<const InputStream*> m_workers;            // the cluster's, W per system
  std::vector<int> m_wid, m_bid;
  int m_loss_id = -1;
  long long m_step = 0;
  uint64_t m_cycles = 0;
  uint64_t m_limit = 0;
  double m_model_secs = 0, m_wafer_secs = 0;
  std::vector<std::string> m_pass_names;  // "/fc1/Gemm forward", ..., "/fc1/Gemm backward"
  std::function<void(const std::string&)> m_progress;
  double m_progress_secs = 0;
  // Chief <-> runners.
  bool m_requested = false, m_finished = false;
  std::string m_error;
  sc_core::sc_event m_start, m_all_done, m_pass_in;
  int m_done = 0;
  WsStepResult m_result;
};

}  // namespace wafersim::tlm
