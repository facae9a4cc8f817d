// SwarmX (tlm/swarmx.h): tree shape, broadcast and reduce transactions and their timing, the
// fixed summation order, error responses and bad configurations.
//
// SystemC elaborates once per process and no module can be created after sc_start (E529). So
// each TEST that simulates builds its whole top (one bench per configuration it covers) and calls
// sc_start() once; ctest runs every TEST in a process of its own. In a run of the whole binary,
// a simulating TEST that finds the kernel already started skips (as the CLI tests do).
#include "tlm/swarmx.h"
#include "tlm/streamed.h"

#include <algorithm>
#include <cstring>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "hw/config.h"

namespace wafersim::tlm {
namespace {

using sc_core::SC_NS;
using sc_core::sc_time;
using sc_core::SC_US;
using sc_core::SC_ZERO_TIME;

#define SKIP_UNLESS_SYSTEMC_FRESH()                        \
  if (sc_core::sc_get_status() != sc_core::SC_ELABORATION) \
  GTEST_SKIP() << "SystemC already ran in this process; run under ctest"

// Hand-computed tree shapes: {systems, fanout, depth, nodes}.
struct Shape {
  int n, f, depth, nodes;
};
constexpr Shape kShapes[] = {
    {1, 2, 1, 1}, {2, 2, 1, 1}, {3, 2, 2, 3}, {4, 2, 2, 3}, {5, 2, 3, 6}, {6, 2, 3, 6}, {7, 2, 3, 7}, {8, 2, 3, 7},
    {1, 4, 1, 1}, {2, 4, 1, 1}, {3, 4, 1, 1}, {4, 4, 1, 1}, {5, 4, 2, 3}, {6, 4, 2, 3}, {7, 4, 2, 3}, {8, 4, 2, 3},
};

SwarmXConfig config(int n, int f, double node_latency_ns = 1000.0) {
  SwarmXConfig c;
  c.systems = n;
  c.fanout = f;
  c.node_latency_ns = node_latency_ns;
  return c;
}

// The documented formula, written out here: depth * node_latency + bytes * 8 / link_gbps.
sc_time tree_time(int depth, const SwarmXConfig& c, uint64_t bytes) {
  return sc_time(depth * c.node_latency_ns + static_cast<double>(bytes) * 8.0 / c.link_gbps, SC_NS);
}

std::vector<unsigned char> bytes_of(const std::vector<float>& v) {
  std::vector<unsigned char> b(v.size() * sizeof(float));
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}

std::vector<uint32_t> bits_of(const std::vector<unsigned char>& b) {
  std::vector<uint32_t> v(b.size() / 4);
  std::memcpy(v.data(), b.data(), v.size() * 4);
  return v;
}

std::vector<uint32_t> bits_of(const std::vector<float>& f) { return bits_of(bytes_of(f)); }

struct Received {
  uint64_t addr;
  ::tlm::tlm_command cmd;
  std::vector<unsigned char> data;
  sc_time at;  // kernel time + the delay it came with
  bool streamed = false;  // it carried the Streamed extension
};

void fill(::tlm::tlm_generic_payload& p, ::tlm::tlm_command cmd, uint64_t addr, std::vector<unsigned char>& data) {
  p.set_command(cmd);
  p.set_address(addr);
  p.set_data_ptr(data.data());
  p.set_data_length(static_cast<unsigned>(data.size()));
  p.set_streaming_width(static_cast<unsigned>(data.size()));
  p.set_byte_enable_ptr(nullptr);
  p.set_response_status(::tlm::TLM_INCOMPLETE_RESPONSE);
}

// One transaction an initiator stub sends: it waits `wait_before`, then calls b_transport with
// `annotate` as the delay, then waits out the returned delay.
struct Send {
  ::tlm::tlm_command cmd;
  uint64_t addr;
  std::vector<unsigned char> data;
  sc_time wait_before = SC_ZERO_TIME;
  sc_time annotate = SC_ZERO_TIME;
  bool streamed = false;  // with the Streamed extension (tlm/streamed.h)
};

struct Result {
  sc_time called;  // kernel time at the call
  sc_time start;   // called + annotate
  sc_time delay;   // as returned
  sc_time resume;  // kernel time at return + returned delay
  ::tlm::tlm_response_status status;
};

// Shared by both stubs: an initiator thread playing a script, a target recording what it gets.
class Stub : public sc_core::sc_module {
 public:
  tlm_utils::simple_initiator_socket<Stub> out;
  tlm_utils::simple_target_socket<Stub> in;
  sc_time target_delay = SC_ZERO_TIME;  // annotated on everything received
  std::vector<Send> script;
  std::vector<Result> results;
  std::vector<Received> received;

  SC_HAS_PROCESS(Stub);
  explicit Stub(sc_core::sc_module_name name) : sc_module(name), out("out"), in("in") {
    in.register_b_transport(this, &Stub::b_transport);
    SC_THREAD(run);
  }

 private:
  void run() {
    for (Send& s : script) {
      sc_core::wait(s.wait_before);
      ::tlm::tlm_generic_payload p;
      fill(p, s.cmd, s.addr, s.data);
      if (s.streamed) p.set_extension(new Streamed);  // freed with p
      Result r;
      r.called = sc_core::sc_time_stamp();
      r.start = r.called + s.annotate;
      sc_time d = s.annotate;
      out->b_transport(p, d);
      r.delay = d;
      r.resume = sc_core::sc_time_stamp() + d;
      r.status = p.get_response_status();
      results.push_back(r);
      sc_core::wait(d);
    }
  }
  void b_transport(::tlm::tlm_generic_payload& p, sc_time& delay) {
    const unsigned char* d = p.get_data_ptr();
    received.push_back({p.get_address(), p.get_command(), std::vector<unsigned char>(d, d + p.get_data_length()),
                        sc_core::sc_time_stamp() + delay, streamed(p)});
    delay += target_delay;
    p.set_response_status(::tlm::TLM_OK_RESPONSE);
  }
};

// A SwarmX between a MemoryX stub and N system stubs, system i bound i-th on both sides.
class Bench : public sc_core::sc_module {
 public:
  SwarmX swarmx;
  Stub memx;
  sc_core::sc_vector<Stub> systems;

  Bench(sc_core::sc_module_name name, const SwarmXConfig& cfg)
      : sc_module(name), swarmx("swarmx", cfg), memx("memx"), systems("system", cfg.systems) {
    memx.out.bind(swarmx.from_memory);
    swarmx.to_memory.bind(memx.in);
    for (Stub& s : systems) {
      swarmx.to_systems.bind(s.in);
      s.out.bind(swarmx.from_systems);
    }
  }
};

std::string bench_name(const char* what, int n, int f) {
  return std::string(what) + "_n" + std::to_string(n) + "_f" + std::to_string(f);
}

// ---------------------------------------------------------------------------------------------
// Reference for the reduce: the documented order, as a recursion over the tree (independent of
// the model's level-by-level loop). Level 0 holds the leaves; node j of level k adds nodes
// j*f .. j*f+f-1 of level k-1 in index order.
float tree_sum(const std::vector<float>& leaves, int f, int level, int j) {
  if (level == 0) return leaves[j];
  long long below = static_cast<long long>(leaves.size());  // width of level - 1
  for (int k = 1; k < level; ++k) below = (below + f - 1) / f;
  float acc = tree_sum(leaves, f, level - 1, j * f);
  for (int c = 1; c < f && j * f + c < below; ++c) acc += tree_sum(leaves, f, level - 1, j * f + c);
  return acc;
}

std::vector<float> reference_sum(const std::vector<std::vector<float>>& grads, int f, int depth) {
  std::vector<float> out(grads[0].size());
  for (size_t e = 0; e < out.size(); ++e) {
    std::vector<float> leaves;
    for (const auto& g : grads) leaves.push_back(g[e]);
    out[e] = tree_sum(leaves, f, depth, 0);
  }
  return out;
}

// Another order: systems N-1 .. 0 one after the other.
std::vector<float> reverse_sum(const std::vector<std::vector<float>>& grads) {
  std::vector<float> out(grads[0].size());
  for (size_t e = 0; e < out.size(); ++e) {
    float acc = grads.back()[e];
    for (size_t i = grads.size() - 1; i-- > 0;) acc += grads[i][e];
    out[e] = acc;
  }
  return out;
}

// Gradients where fp32 order matters: big values of both signs next to small ones. Element 0
// is 1e8, -1e8, then 0.5 from every other system: the tree adds the two big ones first (they
// share a level-1 node) and keeps the halves; adding from the last system down loses them
// (0.5 * (N - 2) < 4, half an ulp of 1e8) and gives 0.
std::vector<float> gradient(int system, int elements) {
  static const float kPool[] = {1e8f, 1.0f, -1e8f, 3.0f, -3e7f, 0.5f, 7e7f, -1.0f, 2.0f, -4e7f, 1e-3f};
  constexpr int kSize = sizeof(kPool) / sizeof(kPool[0]);
  std::vector<float> g(elements);
  g[0] = system == 0 ? 1e8f : system == 1 ? -1e8f : 0.5f;
  for (int e = 1; e < elements; ++e) g[e] = kPool[(system * 7 + e * 3) % kSize];
  return g;
}

// Arrival ranks of the systems in round r: in order, reversed, shuffled, all at once.
std::vector<int> arrival_ranks(int n, int round) {
  std::vector<int> rank(n);
  for (int i = 0; i < n; ++i) rank[i] = round == 0 ? i : round == 1 ? n - 1 - i : round == 3 ? 0 : i;
  if (round == 2) {
    uint32_t s = 12345u + static_cast<uint32_t>(n);
    for (int i = n - 1; i > 0; --i) {
      s = s * 1664525u + 1013904223u;
      std::swap(rank[i], rank[(s >> 8) % static_cast<uint32_t>(i + 1)]);
    }
  }
  return rank;
}

// ---------------------------------------------------------------------------------------------

TEST(SwarmX, TreeShape) {
  for (const Shape& s : kShapes) {
    EXPECT_EQ(SwarmX::tree_depth(s.n, s.f), s.depth) << "N=" << s.n << " f=" << s.f;
    EXPECT_EQ(SwarmX::tree_nodes(s.n, s.f), s.nodes) << "N=" << s.n << " f=" << s.f;
  }
  EXPECT_EQ(SwarmX::tree_depth(16, 2), 4);
  EXPECT_EQ(SwarmX::tree_depth(16, 4), 2);
  EXPECT_EQ(SwarmX::tree_nodes(16, 4), 5);
  EXPECT_EQ(SwarmX::tree_depth(192, 4), 4);  // largest CS-2 cluster: 48 + 12 + 3 + 1 nodes
  EXPECT_EQ(SwarmX::tree_nodes(192, 4), 64);
}

// Transaction table: every row MemoryX writes reaches every system unchanged, at the row's start
// plus the tree time; the caller's delay is its own + tree time + the slowest system's delay.
TEST(SwarmX, BroadcastTable) {
  SKIP_UNLESS_SYSTEMC_FRESH();
  struct Row {
    uint64_t addr;
    unsigned bytes;
    double annotate_ns;
  };
  const Row kRows[] = {{0x0, 4, 0}, {0x1000, 64, 20}, {0xdead0000, 1000, 0}, {0x40, 12, 3}};

  std::vector<std::unique_ptr<Bench>> benches;
  for (const Shape& s : kShapes) {
    auto b = std::make_unique<Bench>(bench_name("bcast", s.n, s.f).c_str(), config(s.n, s.f));
    for (const Row& r : kRows) {
      Send send{::tlm::TLM_WRITE_COMMAND, r.addr, std::vector<unsigned char>(r.bytes)};
      for (unsigned k = 0; k < r.bytes; ++k) send.data[k] = static_cast<unsigned char>(r.addr * 7 + k * 31 + s.n);
      send.wait_before = sc_time(5, SC_NS);
      send.annotate = sc_time(r.annotate_ns, SC_NS);
      b->memx.script.push_back(send);
    }
    for (int i = 0; i < s.n; ++i) b->systems[i].target_delay = sc_time(10 + 7 * i, SC_NS);
    benches.push_back(std::move(b));
  }
  sc_core::sc_start();

  for (size_t k = 0; k < benches.size(); ++k) {
    const Shape& s = kShapes[k];
    Bench& b = *benches[k];
    SCOPED_TRACE("N=" + std::to_string(s.n) + " f=" + std::to_string(s.f));
    EXPECT_EQ(b.swarmx.depth(), s.depth);
    EXPECT_EQ(b.swarmx.nodes(), s.nodes);
    const SwarmXConfig& c = b.swarmx.config();
    const sc_time slowest(10 + 7 * (s.n - 1), SC_NS);
    ASSERT_EQ(b.memx.results.size(), std::size(kRows));
    sc_time busy = SC_ZERO_TIME;
    uint64_t bytes = 0;
    for (size_t r = 0; r < std::size(kRows); ++r) {
      const Result& res = b.memx.results[r];
      const sc_time tt = tree_time(s.depth, c, kRows[r].bytes);
      EXPECT_EQ(res.status, ::tlm::TLM_OK_RESPONSE) << "row " << r;
      EXPECT_EQ(res.delay, sc_time(kRows[r].annotate_ns, SC_NS) + tt + slowest) << "row " << r;
      for (int i = 0; i < s.n; ++i) {
        ASSERT_EQ(b.systems[i].received.size(), std::size(kRows)) << "system " << i;
        const Received& got = b.systems[i].received[r];
        EXPECT_EQ(got.cmd, ::tlm::TLM_WRITE_COMMAND);
        EXPECT_EQ(got.addr, kRows[r].addr) << "system " << i << " row " << r;
        EXPECT_EQ(got.data, b.memx.script[r].data) << "system " << i << " row " << r;
        EXPECT_EQ(got.at, res.start + tt) << "system " << i << " row " << r;
      }
      busy += tt;
      bytes += kRows[r].bytes;
    }
    EXPECT_TRUE(b.memx.received.empty());
    const SwarmXStats& st = b.swarmx.stats();
    EXPECT_EQ(st.bytes_broadcast, bytes);
    EXPECT_EQ(st.bytes_reduced, 0u);
    EXPECT_EQ(st.transactions, std::size(kRows));
    EXPECT_EQ(st.errors, 0u);
    EXPECT_EQ(st.busy, busy);  // the rows never overlap: each waits out the previous one
  }
}

// Every system writes its gradient at 0x10000 * (r + 1) in four rounds with different arrival
// orders (some by waiting, some by an annotated delay, so call order differs from arrival
// order). MemoryX gets one WRITE per address, the documented tree sum, bit for bit the same in
// every round; all contributors resume together at last arrival + tree time + MemoryX's delay.
TEST(SwarmX, ReduceFixedOrder) {
  SKIP_UNLESS_SYSTEMC_FRESH();
  constexpr int kRounds = 4, kElements = 16;
  constexpr unsigned kBytes = kElements * sizeof(float);
  const sc_time kMemDelay(250, SC_NS);

  std::vector<std::unique_ptr<Bench>> benches;
  for (const Shape& s : kShapes) {
    auto b = std::make_unique<Bench>(bench_name("reduce", s.n, s.f).c_str(), config(s.n, s.f));
    b->memx.target_delay = kMemDelay;
    for (int r = 0; r < kRounds; ++r) {
      const std::vector<int> rank = arrival_ranks(s.n, r);
      for (int i = 0; i < s.n; ++i) {
        Send send{::tlm::TLM_WRITE_COMMAND, 0x10000u * (r + 1), bytes_of(gradient(i, kElements))};
        const sc_time offset(100 + 37 * rank[i], SC_NS);
        (i % 2 == 0 ? send.wait_before : send.annotate) = offset;
        b->systems[i].script.push_back(send);
      }
    }
    benches.push_back(std::move(b));
  }
  sc_core::sc_start();

  bool order_matters = false;
  for (size_t k = 0; k < benches.size(); ++k) {
    const Shape& s = kShapes[k];
    Bench& b = *benches[k];
    SCOPED_TRACE("N=" + std::to_string(s.n) + " f=" + std::to_string(s.f));
    const SwarmXConfig& c = b.swarmx.config();
    const sc_time tt = tree_time(s.depth, c, kBytes);
    std::vector<std::vector<float>> grads;
    for (int i = 0; i < s.n; ++i) grads.push_back(gradient(i, kElements));
    const std::vector<uint32_t> expected = bits_of(reference_sum(grads, s.f, s.depth));
    if (s.n >= 3) {
      // fp32 addition is commutative, so with two systems every order agrees.
      EXPECT_NE(expected, bits_of(reverse_sum(grads))) << "the gradients do not show the order";
      order_matters = order_matters || expected != bits_of(reverse_sum(grads));
    }

    ASSERT_EQ(b.memx.received.size(), static_cast<size_t>(kRounds));
    for (int r = 0; r < kRounds; ++r) {
      const Received& sum = b.memx.received[r];
      EXPECT_EQ(sum.cmd, ::tlm::TLM_WRITE_COMMAND);
      EXPECT_EQ(sum.addr, 0x10000u * (r + 1));  // one WRITE per address, in round order
      EXPECT_EQ(bits_of(sum.data), expected) << "round " << r;

      sc_time last = SC_ZERO_TIME;
      for (int i = 0; i < s.n; ++i) {
        ASSERT_EQ(b.systems[i].results.size(), static_cast<size_t>(kRounds)) << "system " << i;
        last = std::max(last, b.systems[i].results[r].start);
      }
      EXPECT_EQ(sum.at, last + tt) << "round " << r;
      for (int i = 0; i < s.n; ++i) {
        const Result& res = b.systems[i].results[r];
        EXPECT_EQ(res.status, ::tlm::TLM_OK_RESPONSE) << "system " << i << " round " << r;
        EXPECT_EQ(res.resume, last + tt + kMemDelay) << "system " << i << " round " << r;
      }
    }
    for (int i = 0; i < s.n; ++i) EXPECT_TRUE(b.systems[i].received.empty());
    const SwarmXStats& st = b.swarmx.stats();
    EXPECT_EQ(st.reductions, static_cast<uint64_t>(kRounds));
    EXPECT_EQ(st.bytes_reduced, uint64_t{kRounds} * kBytes);
    EXPECT_EQ(st.bytes_broadcast, 0u);
    EXPECT_EQ(st.transactions, static_cast<uint64_t>(kRounds * s.n));
    EXPECT_EQ(st.errors, 0u);
    EXPECT_EQ(st.busy, kRounds * tt);
  }
  EXPECT_TRUE(order_matters);
}

// N=16: the 1:2 tree has 4 levels, the 1:4 tree 2; both directions take 2 node latencies more.
TEST(SwarmX, LatencyGrowsWithDepth) {
  SKIP_UNLESS_SYSTEMC_FRESH();
  constexpr double kNodeNs = 750;
  constexpr unsigned kBytes = 256;
  std::unique_ptr<Bench> benches[2];
  for (int k = 0; k < 2; ++k) {
    const int f = k == 0 ? 2 : 4;
    benches[k] = std::make_unique<Bench>(bench_name("latency", 16, f).c_str(), config(16, f, kNodeNs));
    benches[k]->memx.script.push_back({::tlm::TLM_WRITE_COMMAND, 0x0, std::vector<unsigned char>(kBytes, 0x5a)});
    for (Stub& s : benches[k]->systems) {
      s.script.push_back({::tlm::TLM_WRITE_COMMAND, 0x8000, bytes_of(std::vector<float>(kBytes / 4, 0.25f))});
      s.script.back().wait_before = sc_time(10, SC_US);  // after the broadcast has gone by
    }
  }
  sc_core::sc_start();

  Bench& deep = *benches[0];
  Bench& flat = *benches[1];
  EXPECT_EQ(deep.swarmx.depth(), 4);
  EXPECT_EQ(flat.swarmx.depth(), 2);
  const sc_time diff = sc_time(2 * kNodeNs, SC_NS);
  ASSERT_EQ(deep.memx.results.size(), 1u);
  ASSERT_EQ(flat.memx.results.size(), 1u);
  EXPECT_EQ(deep.memx.results[0].delay, flat.memx.results[0].delay + diff);
  EXPECT_EQ(flat.memx.results[0].delay, tree_time(2, flat.swarmx.config(), kBytes));

  ASSERT_EQ(deep.systems[0].results.size(), 1u);
  ASSERT_EQ(flat.systems[0].results.size(), 1u);
  const sc_time deep_wait = deep.systems[0].results[0].resume - deep.systems[0].results[0].start;
  const sc_time flat_wait = flat.systems[0].results[0].resume - flat.systems[0].results[0].start;
  EXPECT_EQ(deep_wait, flat_wait + diff);
  EXPECT_EQ(flat_wait, tree_time(2, flat.swarmx.config(), kBytes));
  ASSERT_EQ(deep.memx.received.size(), 1u);
  EXPECT_EQ(bits_of(deep.memx.received[0].data), bits_of(std::vector<float>(kBytes / 4, 4.0f)));
}

// Gradients that crossed the links as they were produced (tlm/streamed.h): their sum leaves the
// root the tree's latency after the last one's time, without the bytes' time over the links
// again, and goes to MemoryX streamed too; a round where one system's contribution is not
// streamed takes the bytes' time, as before.
TEST(SwarmX, StreamedGradientsAddOnlyTheTreesLatency) {
  SKIP_UNLESS_SYSTEMC_FRESH();
  constexpr double kNodeNs = 500;
  constexpr unsigned kBytes = 40000;  // 3.2 us at 100 Gb/s: it would show
  Bench b("streamed", config(8, 2, kNodeNs));
  for (int i = 0; i < 8; ++i) {
    Stub& s = b.systems[static_cast<size_t>(i)];
    s.script.push_back({::tlm::TLM_WRITE_COMMAND, 0x100000, bytes_of(std::vector<float>(kBytes / 4, 1.0f))});
    s.script.back().wait_before = sc_time(10 + i, SC_NS);
    s.script.back().streamed = true;
    s.script.push_back({::tlm::TLM_WRITE_COMMAND, 0x200000, bytes_of(std::vector<float>(kBytes / 4, 2.0f))});
    s.script.back().streamed = i != 5;  // one plain contribution: the round is not streamed
  }
  sc_core::sc_start();
  ASSERT_EQ(b.memx.received.size(), 2u);
  EXPECT_EQ(b.swarmx.depth(), 3);
  const sc_time last = sc_time(17, SC_NS);
  EXPECT_TRUE(b.memx.received[0].streamed);
  EXPECT_EQ(b.memx.received[0].at, last + sc_time(3 * kNodeNs, SC_NS));
  EXPECT_EQ(bits_of(b.memx.received[0].data), bits_of(std::vector<float>(kBytes / 4, 8.0f)));
  for (const Stub& s : b.systems) EXPECT_EQ(s.results[0].resume, last + sc_time(3 * kNodeNs, SC_NS));
  EXPECT_FALSE(b.memx.received[1].streamed);
  EXPECT_EQ(b.memx.received[1].at - b.systems[0].results[0].resume, tree_time(3, b.swarmx.config(), kBytes));
}

// Bad transactions get an error response and a warning; the round they interrupt still completes
// once the system sends a good contribution.
TEST(SwarmX, ErrorResponses) {
  SKIP_UNLESS_SYSTEMC_FRESH();
  sc_core::sc_report_handler::set_actions("wafersim/swarmx", sc_core::SC_WARNING, sc_core::SC_DO_NOTHING);
  const sc_time kMemDelay(40, SC_NS);
  Bench b("errors", config(3, 2));
  b.memx.target_delay = kMemDelay;
  auto grad = [](float v) { return bytes_of(std::vector<float>(4, v)); };
  auto send = [](::tlm::tlm_command cmd, uint64_t addr, std::vector<unsigned char> data, double wait_ns) {
    Send s{cmd, addr, std::move(data)};
    s.wait_before = sc_time(wait_ns, SC_NS);
    return s;
  };
  b.memx.script = {send(::tlm::TLM_READ_COMMAND, 0x0, std::vector<unsigned char>(8), 0)};
  b.systems[0].script = {send(::tlm::TLM_READ_COMMAND, 0x100, grad(0), 0),                          // 0 ns: a READ
                         send(::tlm::TLM_WRITE_COMMAND, 0x200, grad(1), 10)};                       // 10 ns
  b.systems[1].script = {send(::tlm::TLM_WRITE_COMMAND, 0x200, std::vector<unsigned char>(8), 20),  // too short
                         send(::tlm::TLM_WRITE_COMMAND, 0x200, grad(2), 10)};                       // 30 ns
  b.systems[2].script = {send(::tlm::TLM_WRITE_COMMAND, 0x300, std::vector<unsigned char>(6), 40),  // not fp32
                         send(::tlm::TLM_WRITE_COMMAND, 0x200, grad(4), 10)};                       // 50 ns
  sc_core::sc_start();

  ASSERT_EQ(b.memx.results.size(), 1u);
  EXPECT_EQ(b.memx.results[0].status, ::tlm::TLM_COMMAND_ERROR_RESPONSE);
  for (Stub& s : b.systems) EXPECT_TRUE(s.received.empty());
  for (Stub& s : b.systems) ASSERT_EQ(s.results.size(), 2u);
  EXPECT_EQ(b.systems[0].results[0].status, ::tlm::TLM_COMMAND_ERROR_RESPONSE);
  EXPECT_EQ(b.systems[1].results[0].status, ::tlm::TLM_GENERIC_ERROR_RESPONSE);
  EXPECT_EQ(b.systems[2].results[0].status, ::tlm::TLM_GENERIC_ERROR_RESPONSE);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(b.systems[i].results[0].resume, b.systems[i].results[0].called);

  const sc_time release = sc_time(50, SC_NS) + tree_time(2, b.swarmx.config(), 16) + kMemDelay;
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(b.systems[i].results[1].status, ::tlm::TLM_OK_RESPONSE) << "system " << i;
    EXPECT_EQ(b.systems[i].results[1].resume, release) << "system " << i;
  }
  ASSERT_EQ(b.memx.received.size(), 1u);
  EXPECT_EQ(b.memx.received[0].addr, 0x200u);
  EXPECT_EQ(b.memx.received[0].data, grad(7));
  EXPECT_EQ(b.swarmx.stats().errors, 4u);
  EXPECT_EQ(b.swarmx.stats().transactions, 7u);
  EXPECT_EQ(sc_core::sc_report_handler::get_count("wafersim/swarmx"), 4);
}

std::string config_error(const SwarmXConfig& c) {
  try {
    c.validate();
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

TEST(SwarmX, BadConfig) {
  SwarmXConfig c;
  EXPECT_EQ(config_error(c), "");
  c.systems = 0;
  EXPECT_EQ(config_error(c), "swarmx.systems must be at least 1, got 0");
  c = SwarmXConfig();
  c.fanout = 1;
  EXPECT_EQ(config_error(c), "swarmx.fanout must be 2 or 4, got 1");
  c.fanout = 3;
  EXPECT_EQ(config_error(c), "swarmx.fanout must be 2 or 4, got 3");
  c = SwarmXConfig();
  c.link_gbps = 0;
  EXPECT_EQ(config_error(c), "swarmx.link_gbps must be a positive number, got 0");
  c = SwarmXConfig();
  c.node_latency_ns = -1;
  EXPECT_EQ(config_error(c), "swarmx.node_latency_ns must be at least 0, got -1");
  c.node_latency_ns = 0;
  EXPECT_EQ(config_error(c), "");
  EXPECT_THROW(SwarmX::tree_depth(0, 4), ConfigError);
  EXPECT_THROW(SwarmX::tree_nodes(4, 3), ConfigError);
}

}  // namespace
}  // namespace wafersim::tlm
