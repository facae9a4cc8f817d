// The host side of a layer-pipelined training run (the chief worker): loads the compiled
// program onto a fabric, feeds minibatches through the input worker, collects the loss values
// the wafer streams back, and reads the weights back from the PEs' SRAM for checkpoints.
//
// Update semantics (docs/training.md): samples of one minibatch pipeline through the layers,
// up to compile.ring_depth in flight per tile; every tile and root updates its weights when the
// minibatch's last gradient has passed, and the host starts the next minibatch when all have.
// The result is plain minibatch SGD with momentum, no staleness. With two minibatches in flight
// (train.in_flight 2, Plan::lookahead() > 0) the host sends the next minibatch's first
// lookahead samples before this one's update, unless the step drains (docs/training.md).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "compiler/codegen.h"
#include "firmware/program.h"
#include "hw/fabric.h"
#include "tlm/input_worker.h"

namespace wafersim::tlm {

struct StepResult {
  long long step = 0;             // minibatches done after this one
  std::vector<float> losses;      // per sample, in data order
  double mean_loss = 0;
  uint64_t cycles = 0;            // this minibatch, on the wafer
};

class Trainer {
 public:
  // `first_step`: minibatches already done (resume); the data order continues from there.
  Trainer(const HwConfig& hw, const compiler::Compiled& c, const Dataset& data, const Normalize& norm, uint64_t seed,
          long long first_step);

  // `drain`: with minibatches in flight, no sample of the next minibatch enters before this
  // one's update, so the wafer is left idle with plain SGD's state (before a checkpoint, at the
  // end of a run, at an interrupt). Without minibatches in flight every step drains.
  StepResult step(bool drain = true);
  // The previous step did not drain: part of the next minibatch is already on the wafer.
  bool pending() const { return m_pending; }
  // Advances the wafer by one cycle instead of Fabric::step (e.g. through the SystemC Wafer
  // module, so that its probes trace the run).
  void set_stepper(std::function<void()> fn) { m_stepper = std::move(fn); }
  compiler::ModelState read_state() const;  // weights and momentum, read from SRAM
  uint64_t cycles() const { return m_fabric->cycle(); }
  uint64_t input_refused() const { return m_worker->refused(); }  // cycles a channel was full
  long long steps_done() const { return m_step; }
  Fabric& fabric() { return *m_fabric; }
  const LoadedProgram& loaded() const { return m_loaded; }
  // Busy cycles of each layer's tiles and roots so far, every copy's (per-kernel utilisation).
  std::vector<uint64_t> layer_busy() const;

 private:
  bool all_updated(long long n);

  const compiler::Compiled& m_c;
  std::unique_ptr<Fabric> m_fabric;
  LoadedProgram m_loaded;
  std::unique_ptr<InputWorker> m_worker;
  std::vector<EdgeChannel*> m_loss_out;                        // each copy's loss channel
  std::vector<std::pair<const PeCore*, uint32_t>> m_counters;  // each PE's minibatch counter
  std::vector<std::pair<PeCore*, uint32_t>> m_drain_flags;     // each PE's drain word (lookahead)
  int m_drain_written = 0;
  long long m_enqueued = 0;                                    // global position of the next sample to send
  std::vector<float> m_carry;                                  // losses of the next minibatch already back
  bool m_pending = false;
  size_t m_poll = 0;                                           // first counter not yet seen up to date
  long long m_step = 0, m_first_step = 0;
  std::function<void()> m_stepper;
  uint64_t m_limit = 0;  // cycles a minibatch may take before the run is declared stuck
};

}  // namespace wafersim::tlm
