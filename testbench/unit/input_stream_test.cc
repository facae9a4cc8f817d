// InputStream (tlm/input_stream.h): a weight-streaming system's input worker as a transaction
// table (address, data, delay) against a recording target, for several workers sharing a shard,
// two minibatches and two systems; a refused WRITE is kept as the worker's error; bad configs.
//
// SystemC elaborates once per process: the simulating TEST builds its whole top and calls
// sc_start() once; ctest runs every TEST in a process of its own.
#include "tlm/input_stream.h"

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <tlm_utils/simple_target_socket.h>

#include "hw/config.h"

namespace wafersim::tlm {
namespace {

#define SKIP_UNLESS_SYSTEMC_FRESH()                        \
  if (sc_core::sc_get_status() != sc_core::SC_ELABORATION) \
  GTEST_SKIP() << "SystemC already ran in this process; run under ctest"

// A dataset whose values say where they come from: sample i, feature k = 10 * i + k.
Dataset numbered(size_t count, size_t features) {
  Dataset d;
  d.count = count;
  d.features = features;
  d.classes = 10;
  for (size_t i = 0; i < count; ++i) {
    for (size_t k = 0; k < features; ++k) d.x.push_back(static_cast<float>(10 * i + k));
    d.labels.push_back(static_cast<int32_t>(i % 10));
  }
  return d;
}

struct Record {
  sc_core::sc_time now, delay;
  uint64_t address;
  std::vector<unsigned char> data;
};

// Records every WRITE and answers OK, adding `add` to the delay; refuses address `refuse`.
struct Recorder : sc_core::sc_module {
  tlm_utils::simple_target_socket<Recorder> socket;
  std::vector<Record> log;
  sc_core::sc_time add = sc_core::SC_ZERO_TIME;
  uint64_t refuse = ~uint64_t(0);
  explicit Recorder(sc_core::sc_module_name n) : sc_module(n), socket("socket") {
    socket.register_b_transport(this, &Recorder::b_transport);
  }
  void b_transport(::tlm::tlm_generic_payload& t, sc_core::sc_time& d) {
    log.push_back({sc_core::sc_time_stamp(), d, t.get_address(),
                   std::vector<unsigned char>(t.get_data_ptr(), t.get_data_ptr() + t.get_data_length())});
    if (t.get_command() != ::tlm::TLM_WRITE_COMMAND || t.get_address() == refuse) {
      t.set_response_status(::tlm::TLM_ADDRESS_ERROR_RESPONSE);
      return;
    }
    d += add;
    t.set_response_status(::tlm::TLM_OK_RESPONSE);
  }
};

// Fires the owner's start event for `steps` minibatches, 1 us apart, counting them in `step`.
struct Starter : sc_core::sc_module {
  sc_core::sc_event start;
  long long step = 0;
  int steps;
  SC_HAS_PROCESS(Starter);
  Starter(sc_core::sc_module_name n, int s) : sc_module(n), steps(s) { SC_THREAD(run); }
  void run() {
    for (int k = 0; k < steps; ++k) {
      start.notify(sc_core::SC_ZERO_TIME);
      sc_core::wait(1, sc_core::SC_US);
      ++step;
    }
  }
};

// The documented expectation: sample bytes (normalised features, then the label's bits).
std::vector<unsigned char> expected_bytes(const Dataset& d, InputWorker& order, size_t idx) {
  std::vector<float> v;
  for (size_t k = 0; k < d.features; ++k) v.push_back(order.normalize().apply(d.sample(idx)[k], k));
  v.push_back(0.0f);
  std::memcpy(&v.back(), &d.labels[idx], 4);
  std::vector<unsigned char> b(v.size() * 4);
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}

TEST(InputStream, TransactionTable) {
  SKIP_UNLESS_SYSTEMC_FRESH();
  const Dataset data = numbered(40, 6);
  InputWorker order(data, {}, Normalize{}, 5);   // the streams' order
  InputWorker expect(data, {}, Normalize{}, 5);  // the same order, for the expectations
  Starter starter("starter", 2);
  // Two systems of a batch of 10 (shard 5); system 1 has three workers at 1, 1 and 0.5 Gb/s,
  // system 0 one worker at 2 Gb/s whose target adds 3 ns to every delay.
  struct Case {
    int system, index, workers;
    double gbps;
  };
  const std::vector<Case> cases = {{0, 0, 1, 2.0}, {1, 0, 3, 1.0}, {1, 1, 3, 1.0}, {1, 2, 3, 0.5}};
  std::vector<std::unique_ptr<InputStream>> streams;
  std::vector<std::unique_ptr<Recorder>> targets;
  for (size_t i = 0; i < cases.size(); ++i) {
    InputStreamConfig c;
    c.system = cases[i].system;
    c.index = cases[i].index;
    c.workers = cases[i].workers;
    c.shard = 5;
    c.batch = 10;
    c.gbps = cases[i].gbps;
    streams.push_back(std::make_unique<InputStream>(("w" + std::to_string(i)).c_str(), data, order, c, starter.start, starter.step));
    targets.push_back(std::make_unique<Recorder>(("t" + std::to_string(i)).c_str()));
    if (i == 0) targets.back()->add = sc_core::sc_time(3, sc_core::SC_NS);
    streams.back()->socket.bind(targets.back()->socket);
  }
  sc_core::sc_start(5, sc_core::SC_US);

  const double bits = 32.0 * (6 + 1);  // one sample: 6 features and the label
  for (size_t i = 0; i < cases.size(); ++i) {
    const Case& c = cases[i];
    const auto& log = targets[i]->log;
    std::vector<int> shard_positions;
    for (int s = c.index; s < 5; s += c.workers) shard_positions.push_back(s);
    ASSERT_EQ(log.size(), 2 * shard_positions.size()) << "worker " << i;
    size_t r = 0;
    for (long long k = 0; k < 2; ++k) {
      sc_core::sc_time added = sc_core::SC_ZERO_TIME;
      for (size_t j = 0; j < shard_positions.size(); ++j, ++r) {
        const int s = shard_positions[j];
        const Record& rec = log[r];
        EXPECT_EQ(rec.now, sc_core::sc_time(static_cast<double>(k), sc_core::SC_US)) << "worker " << i << " row " << r;
        EXPECT_EQ(rec.address, static_cast<uint64_t>(s)) << "worker " << i << " row " << r;
        const sc_core::sc_time want = sc_core::sc_time(static_cast<double>(j + 1) * bits / c.gbps, sc_core::SC_NS) + added;
        EXPECT_EQ(rec.delay, want) << "worker " << i << " row " << r;
        added += targets[i]->add;
        const size_t idx = expect.sample_at(k * 10 + c.system * 5 + s);
        EXPECT_EQ(rec.data, expected_bytes(data, expect, idx)) << "worker " << i << " row " << r;
      }
    }
    EXPECT_TRUE(streams[i]->error().empty()) << streams[i]->error();
    EXPECT_EQ(streams[i]->samples_sent(), static_cast<long long>(log.size()));
  }
  // The table itself, spelled out for worker 3 (system 1, index 2 of 3, 0.5 Gb/s): positions
  // 2 then none (5 is past the shard), so one WRITE per minibatch, 448 ns after its start.
  ASSERT_EQ(targets[3]->log.size(), 2u);
  EXPECT_EQ(targets[3]->log[0].address, 2u);
  EXPECT_EQ(targets[3]->log[0].delay, sc_core::sc_time(448, sc_core::SC_NS));
  EXPECT_EQ(targets[3]->log[0].data.size(), 28u);
}

TEST(InputStream, RefusedWriteIsKeptAsTheError) {
  SKIP_UNLESS_SYSTEMC_FRESH();
  const Dataset data = numbered(8, 3);
  InputWorker order(data, {}, Normalize{}, 1);
  Starter starter("starter", 1);
  InputStreamConfig c;
  c.shard = 4;
  c.batch = 4;
  InputStream stream("w", data, order, c, starter.start, starter.step);
  Recorder target("t");
  target.refuse = 2;
  stream.socket.bind(target.socket);
  sc_core::sc_start(2, sc_core::SC_US);
  EXPECT_EQ(target.log.size(), 4u);  // the stream goes on after the refusal
  EXPECT_NE(stream.error().find("refused sample 2"), std::string::npos) << stream.error();
}

TEST(InputStream, BadConfigIsRefusedWithItsReason) {
  struct Bad {
    InputStreamConfig c;
    std::string msg;
  };
  auto cfg = [](int system, int index, int workers, int shard, int batch, double gbps) {
    InputStreamConfig c;
    c.system = system;
    c.index = index;
    c.workers = workers;
    c.shard = shard;
    c.batch = batch;
    c.gbps = gbps;
    return c;
  };
  const std::vector<Bad> bad = {
      {cfg(0, 0, 0, 4, 4, 1), "workers must be >= 1"},
      {cfg(0, 2, 2, 4, 4, 1), "index must be in 0..1"},
      {cfg(0, 0, 1, 0, 4, 1), "need 1 <= shard <= batch"},
      {cfg(0, 0, 1, 8, 4, 1), "need 1 <= shard <= batch"},
      {cfg(2, 0, 1, 2, 4, 1), "system 2 has no shard"},
      {cfg(0, 0, 1, 4, 4, 0), "gbps must be > 0"},
  };
  for (const Bad& b : bad) {
    try {
      b.c.validate();
      ADD_FAILURE() << "accepted: " << b.msg;
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find(b.msg), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace wafersim::tlm
