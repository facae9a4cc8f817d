// InputStream: one input worker of a weight-streaming system, as a loosely timed TLM-2.0
// initiator. Each time `start` fires (a minibatch begins) it reads its share of the system's
// shard in the run's data order, normalises each sample and WRITEs it to the system's bridge
// port, one sample after the other at its stream's rate.
//
// Transactions, per minibatch k (the value of `step` when `start` fires), for worker `index` of
// `workers`: the shard's samples s = index, index + workers, ... < shard, in that order.
//   command  WRITE
//   address  s (the sample's position in the system's shard)
//   data     the features of dataset sample order.sample_at(k * batch + system * shard + s),
//            each normalised (order.normalize()), as fp32, then the label's int32 bits:
//            4 * (features + 1) bytes
//   delay    accumulates over the minibatch: the i-th WRITE (from 1) is called with
//            i * 32 * (features + 1) / gbps ns plus whatever the target added to earlier
//            ones (loosely timed: the worker never waits; the target syncs when it must)
// A target's error response is kept in error() (the first one) and the stream goes on.
// The multiplexing of several workers into one input stream, and its starvation by a slow
// worker, is the port's (WsTrainer's bridge port takes samples in shard order).
#pragma once

#include <string>
#include <vector>

#include <systemc>
#include <tlm>
#include <tlm_utils/simple_initiator_socket.h>

#include "tlm/dataset.h"
#include "tlm/input_worker.h"

namespace wafersim::tlm {

struct InputStreamConfig {
  int system = 0;      // which system's shard
  int index = 0;       // this worker, 0 .. workers-1
  int workers = 1;     // workers sharing the system's shard
  int shard = 1;       // samples per system per minibatch
  int batch = 1;       // global minibatch (systems x shard)
  double gbps = 100;   // this worker's stream
  void validate() const;  // throws ConfigError
};

class InputStream : public sc_core::sc_module {
 public:
  tlm_utils::simple_initiator_socket<InputStream> socket;

  // `order` gives the data order and normalisation; `start` and `step` belong to the owner (a
  // minibatch starts when `start` fires; `step` is then the number of minibatches done).
  InputStream(sc_core::sc_module_name name, const Dataset& data, InputWorker& order, const InputStreamConfig& cfg,
              const sc_core::sc_event& start, const long long& step);

  const std::string& error() const { return m_error; }
  long long samples_sent() const { return m_sent; }

 private:
  void run();

  const Dataset& m_data;
  InputWorker& m_order;
  const InputStreamConfig m_cfg;
  const sc_core::sc_event& m_start;
  const long long& m_step;
  std::string m_error;
  long long m_sent = 0;
  // run()'s sample buffer. A member, not a local of run(): run() never returns, and SystemC
  // frees a thread's stack without unwinding it, so a local's heap memory would leak.
  std::vector<float> m_buf;
};

}  // namespace wafersim::tlm
