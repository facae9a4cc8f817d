// One PE's compute engine: SRAM, task picker, scalar pipeline, descriptor-driven vector ops on
// the main thread and on microthreads, and the ramp-side input and output queues. It sits at
// its router's ramp as a PeAgent. Timing rules are in docs/core.md.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "firmware/image.h"
#include "hw/config.h"
#include "hw/pe_agent.h"
#include "hw/sram_arena.h"

namespace wafersim {

// Cycle accounting of one core, for the run report.
struct CoreStats {
  uint64_t busy = 0;      // cycles some thread made progress (an instruction or a vector step)
  uint64_t stall = 0;     // cycles a thread had work but waited (queue, port, datapath)
  uint64_t idle = 0;      // cycles with nothing to run
  uint64_t instructions = 0;
  uint64_t vector_elems = 0;
  uint64_t tasks_started = 0;
  uint64_t filtered = 0;  // wavelets a ramp filter dropped (filt)
  uint64_t control = 0;   // control wavelets the ramp took (they reach no queue)
};

//   auto core = std::make_unique<PeCore>(cfg.core, image, /*pe_id=*/7, "wafer.pe_7_0");
//   fabric.attach_agent(7, 0, std::move(core));   // runs from cycle 0
class PeCore : public PeAgent {
 public:
  std::string debug_state() const override;
  // Throws ConfigError when the image does not fit this core (SRAM, DSD registers, queues).
  PeCore(const CoreConfig& cfg, const PeImage& image, uint32_t pe_id, std::string name);
  ~PeCore() override;

  // PeAgent.
  uint32_t full_colors() const override;
  uint32_t evaluate(uint64_t now, uint32_t ramp_full, Wavelet* out) override;
  uint64_t deliver(const Wavelet& w, uint64_t ready) override;
  uint32_t send_colors() const override { return m_send_colors; }
  uint32_t receive_colors() const override { return m_receive_colors; }
  bool has_work() const override;
  uint64_t busy_until() const override;
  uint64_t wake_cycle(uint64_t next) const override;
  uint64_t consumed() const override { return m_consumed; }
  void settle(uint64_t end) final;

  // Host access to SRAM (loading inputs, reading results) between cycles.
  uint32_t sram_bytes() const { return m_sram_bytes; }
  void write_bytes(uint32_t addr, const void* src, uint32_t n);
  void read_bytes(uint32_t addr, void* dst, uint32_t n) const;
  uint32_t reg(int r) const { return m_gpr[r]; }

  // Introspection for tests, traces and the run report.
  const CoreStats& stats() const { return m_stats; }
  int running_task() const { return m_task; }  // -1 when the main thread is idle
  bool halted() const { return m_halted; }
  int input_queue_count(int q) const;
  int output_queue_count(int q) const;
  const std::string& name() const { return m_name; }
  uint64_t replayed_cycles() const { return m_replayed; }  // cycles skipped, then replayed (m_lazy)
  uint64_t evaluations() const { return m_evaluations; }   // evaluate() calls (host-side cost; tests)

 private:
  struct Dsd {
    uint8_t kind = 0;       // kNoDsd, kMemDsd, kFinDsd, kFoutDsd
    uint8_t queue = 0;      // fabric DSDs: the bound queue
    int32_t stride = 1;     // memory: elements
    uint32_t base = 0;      // memory: byte address
    uint32_t len = 0;
    uint32_t rowlen = 0;     // memory, two-dimensional (drows): elements per row (0: one row)
    int32_t rowstride = 0;   // memory, two-dimensional: elements from a row's start to the next's
  };
  // The bytes [lo, hi) that elements from .. from + n - 1 of memory descriptor d cover (n > 0).
  static void dsd_span(const Dsd& d, uint32_t from, uint32_t n, int bytes, int64_t* lo, int64_t* hi);
  // The byte address of element i of memory descriptor d (elements of `bytes`).
  static uint32_t dsd_addr(const Dsd& d, uint32_t i, int bytes) {
    if (d.rowlen == 0) return d.base + static_cast<uint32_t>(static_cast<int64_t>(i) * d.stride * bytes);
    const int64_t e = static_cast<int64_t>(i / d.rowlen) * d.rowstride + static_cast<int64_t>(i % d.rowlen) * d.stride;
    return d.base + static_cast<uint32_t>(e * bytes);
  }
  // A queue slot: the payload and (input queues) the cycle it becomes readable. The slots of all
  // of a core's queues are one block (m_qmem), a queue's consecutive.
  struct QSlot {
    uint64_t ready;
    uint32_t payload;
    bool ctrl;                   // output queues: a control wavelet (ctl)
    bool local;                  // output queues: a switch advance for this PE's router (swadv)
  };
  struct Queue {
    QSlot* slot = nullptr;       // depth slots in m_qmem
    uint32_t head = 0, count = 0, depth = 0;
    int color = -1;
    // Input queues: the ramp filter (filt, fcnt). Wavelet n of the color since the last fcnt
    // enters the queue only if flo <= n < fhi; the others are dropped at the ramp.
    uint32_t fcount = 0, flo = 0, fhi = ~0u;
    bool filter = false;         // a window other than everything
  };
  // A vector op in flight on the main thread or a microthread. Everything that does not change
  // between steps is worked out once, at start_vector.
  struct VecOp {
    bool active = false;
    Instr in;
    Dsd dst, src[3];
    int nsrc = 0;
    uint32_t total = 0, done = 0;
    int rate = 1;               // datapath elements per cycle for this op and its formats
    bool alu = false;           // needs the arithmetic datapath
    bool sum = false;           // vsum: no destination
    bool one_per_step = false;  // a fabric operand or a stride other than 1: one element per step
    bool mem_only = false;      // every operand in SRAM
    bool f32 = false;           // every operand fp32
    bool conflict_known = false, conflict_full = false;  // a full step's bank self-conflict
    uint8_t reads = 0;          // memory sources (one SRAM read each per step)
    uint8_t writes = 0;         // 1 for a memory destination
    uint8_t port_cycles = 1;    // ceil(reads / read ports)
    uint8_t sbytes[3] = {4, 4, 4}, dbytes = 4;
    NumFormat sfmt[3] = {NumFormat::kF32, NumFormat::kF32, NumFormat::kF32};
    float scalar = 0;
    float acc = 0;              // vsum
    uint64_t next_step = 0;     // earliest cycle of the next step (multi-cycle steps)
  };
  struct Resources {
    int reads, writes;
    bool alu;
    uint64_t banks;             // banks read this cycle
  };

  void fault(uint64_t now, const std::string& msg);
  bool exec_scalar(uint64_t now, Resources& res);
  int next_outq(uint32_t ramp_full) const;
  bool start_vector(uint64_t now, const Instr& in, VecOp& op);
  // One step of a vector op: returns 1 progress, 0 stalled; finishes it when complete.
  int step_vector(uint64_t now, VecOp& op, Resources& res);
  // Every remaining step of a solo op (all operands in SRAM, no microthread), at once.
  void run_solo(uint64_t now, VecOp& op);
  // The cycles a solo op's remaining steps take (run_solo's timing, without the data).
  uint64_t solo_cycles(const VecOp& op) const;
  // Lazy main op: see m_lazy. Replays the skipped cycles [from, to) of the main thread.
  void catch_up(uint64_t from, uint64_t to);
  void update_lazy(uint64_t now);
  uint64_t pure_run_end(uint64_t t) const;
  template <bool kTrack>
  uint64_t pure_run(uint64_t t, uint32_t unknown, uint64_t dlo, uint64_t dhi) const;
  bool solo_conflict(const VecOp& op, uint32_t i, uint32_t k) const;
  bool solo_banks_periodic(const VecOp& op) const;
  template <bool kMemOnly>
  void finish_step(uint64_t now, VecOp& op, uint32_t k, bool self_conflict);
  static float apply(VecOp& op, const float* v, bool* raw_copy);
  // finish_step's one element of an op whose operands are all fp32 (one with a fabric operand
  // steps one element at a time).
  void element_f32(VecOp& op);
  // Takes the head of an input queue (its slot frees for the router: m_full).
  uint32_t take_input(Queue& q) {
    const uint32_t v = q.slot[q.head].payload;
    if (++q.head == q.depth) q.head = 0;
    if (q.count-- == q.depth) m_full &= ~(1u << q.color);
    ++m_consumed;
    return v;
  }
  // Appends to output queue q (the caller checked it has room).
  void put_output(int q, uint32_t v, bool ctrl = false, bool local = false) {
    Queue& Q = m_outq[q];
    uint32_t tail = Q.head + Q.count;
    if (tail >= Q.depth) tail -= Q.depth;
    Q.slot[tail].payload = v;
    Q.slot[tail].ctrl = ctrl;
    Q.slot[tail].local = local;
    ++Q.count;
    m_outq_nonempty |= 1u << q;
  }
  // finish_step's element loop for the common all-fp32, all-SRAM ops; false when it does not apply.
  bool elements_f32(VecOp& op, uint32_t k);
  void complete_main();
  // 0 when the op can step at m_last_eval + 1 (or is not waiting on its fabric sources); else
  // the cycle from which every fabric source is readable: kNever when one is empty (only an
  // arrival can change that), or the ready cycle of a queued wavelet whose ramp latency has not
  // elapsed; kNever too when its fabric destination's output queue is full and waiting
  // (m_outq_wait). A core whose every thread waits sleeps until then (next_work).
  static constexpr uint64_t kNever = ~uint64_t(0);
  uint64_t wavelet_wait(const VecOp& op) const;
  uint64_t next_work() const;
  bool pick_task(uint64_t now);
  uint32_t mem_load(uint64_t now, uint32_t addr, int bytes, bool* ok);
  bool mem_store(uint64_t now, uint32_t addr, int bytes, uint32_t v);
  bool mem_range_ok(const Dsd& d, uint32_t from, uint32_t n, int bytes) const;

  const CoreConfig m_cfg;
  const uint32_t m_pe;
  const std::string m_name;
  uint32_t m_sram_bytes;
  // From sram_alloc: the pages a program never touches cost no host memory.
  struct FreeSram {
    uint32_t bytes;
    void operator()(uint8_t* p) const { sram_free(p, bytes); }
  };
  std::unique_ptr<uint8_t[], FreeSram> m_sram{nullptr, FreeSram{0}};
  std::vector<Instr> m_code;          // decoded once at load
  uint32_t m_code_bytes = 0;

  // Tasks.
  int8_t m_task_of_color[32];         // data task bound to a color, or -1
  int8_t m_queue_of_color[32];        // input queue bound to a color, or -1
  int8_t m_outq_of_color[32];
  uint32_t m_entry[kMaxTasks] = {};
  uint64_t m_declared = 0, m_activated = 0, m_blocked = 0, m_data_task = 0;
  int8_t m_color_of_task[kMaxTasks];
  int m_task = -1;                    // running task
  uint32_t m_pc = 0;
  uint64_t m_next_exec = 0;           // earliest cycle the main thread executes its next instruction
  uint64_t m_last_eval = 0;           // the last cycle evaluate() ran (a sleeping core is not evaluated)
  bool m_evaluated = false;
  bool m_halted = false;
  // After a cycle in which nothing but the main thread can move until a wavelet arrives (every
  // busy microthread waits for one, no output queue holds anything), the core is not evaluated
  // again until m_lazy_until, or until its router is visited for an arrival; then the skipped
  // cycles are replayed (catch_up) before that cycle. The window covers an SRAM-only vector op
  // on the main thread, pipeline refills and the scalar instructions after them up to the first
  // one that others can observe or that depends on them (pure_run_end). The main thread's steps
  // do not depend on the microthreads (it takes the ports and banks first each cycle), so the
  // replay is exact.
  enum : uint8_t { kLazyNone, kLazyOn };
  uint8_t m_lazy = kLazyNone;
  uint64_t m_lazy_until = 0;
  // While every busy microthread needs a resource the main op takes in each cycle to its end,
  // the window ends no earlier than that (an arrival cannot move them): update_lazy.
  uint64_t m_lazy_floor = 0;
  uint64_t m_main_end = 0;            // cached end of the SRAM-only main op (0 = not computed)
  uint64_t m_replayed = 0;
  uint64_t m_evaluations = 0;

  // Registers.
  uint32_t m_gpr[kNumGprs] = {};
  std::vector<Dsd> m_dsd;

  // Vector ops.
  VecOp m_main_op;
  VecOp m_ut[kMaxMicrothreads];
  uint32_t m_ut_busy = 0;             // microthreads with an op in flight

  // Queues.
  std::unique_ptr<QSlot[]> m_qmem;
  Queue m_inq[kNumInputQueues];
  Queue m_outq[kNumOutputQueues];
  uint32_t m_full = ~0u;              // colors the core cannot take now (start of cycle)
  int m_rr_outq = 0;
  uint32_t m_outq_nonempty = 0;       // output queues holding a wavelet
  // After an evaluate() that offered nothing because the router's ramp buffer of every nonempty
  // output queue's color was full (ramp_full), with a thread still in an op or a task: those
  // buffers free only when the router forwards their heads, and it then evaluates the core in
  // the next cycle (Router::agent_and_channels), so until then the queues count as waiting.
  bool m_outq_wait = false;
  uint32_t m_send_colors = 0, m_receive_colors = 0;
  uint64_t m_consumed = 0;

  CoreStats m_stats;
};

}  // namespace wafersim
