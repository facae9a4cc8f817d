// MemoryX (tlm/memoryx.h): transaction tables through its target socket, gradient accumulation,
// SGD and Adam against a hand computation and pinned PyTorch numbers, checkpoints and resume,
// capacity, configuration errors, error responses and the delay formula.
//
// SystemC: every test builds its own MemoryX under a fresh name and calls b_transport through the
// socket's forward interface from the test thread. No sc_start: MemoryX's b_transport never
// waits, it only annotates the delay, so the models need no running kernel, and several tests in
// one process (the binary run without ctest) can each elaborate their own. A kernel another test
// already started refuses new modules, so then these tests skip instead of failing.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <systemc>
#include <tlm>

#include "hw/config.h"
#include "tlm/memoryx.h"
#include "tlm/streamed.h"

// GTEST_SKIP returns from the test body, so this must be a macro.
#define SKIP_IF_KERNEL_STARTED()                                                          \
  if (sc_core::sc_get_status() != sc_core::SC_ELABORATION)                                \
  GTEST_SKIP() << "a SystemC kernel already ran in this process (new modules are refused); " \
                  "ctest runs each test alone"

namespace wafersim::tlm {
namespace {

using ::tlm::TLM_ADDRESS_ERROR_RESPONSE;
using ::tlm::TLM_BURST_ERROR_RESPONSE;
using ::tlm::TLM_COMMAND_ERROR_RESPONSE;
using ::tlm::TLM_IGNORE_COMMAND;
using ::tlm::TLM_OK_RESPONSE;
using ::tlm::TLM_READ_COMMAND;
using ::tlm::TLM_WRITE_COMMAND;
using Vec = std::vector<float>;

std::string fresh_name() {
  static int n = 0;
  return "memoryx_" + std::to_string(n++);
}

// The target's forward interface, as an initiator socket bound to mx.socket would reach it.
// (The socket's own operator-> is the backward path, for the target's use.)
::tlm::tlm_fw_transport_if<>& fw(MemoryX& mx) { return *mx.socket.get_base_export().operator->(); }

// Distance in units in the last place (0: same bits).
int64_t ulps(float a, float b) {
  auto ordered = [](float x) {
    int32_t i;
    std::memcpy(&i, &x, 4);
    return i < 0 ? static_cast<int64_t>(INT32_MIN) - i : static_cast<int64_t>(i);
  };
  return std::llabs(ordered(a) - ordered(b));
}

void expect_bits(const Vec& got, const Vec& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(ulps(got[i], want[i]), 0) << what << " [" << i << "]: " << std::hexfloat << got[i] << " vs "
                                         << want[i];
  }
}

// One row of a transaction table: what the initiator sends and what must come back.
struct Row {
  ::tlm::tlm_command cmd;
  uint64_t addr;
  unsigned len;
  Vec data;                          // WRITE payload (the buffer is at least len bytes)
  uint64_t delay_ps;                 // the annotation MemoryX adds to the caller's delay
  ::tlm::tlm_response_status resp;
  Vec expect;                        // READ: the data that must come back
};

// Runs rows through a target's forward interface as an LT initiator would; every call starts from
// a non-zero local time so that the check covers "added to", not "set".
class TableInitiator {
 public:
  explicit TableInitiator(MemoryX& mx) : m_target(fw(mx)) {}

  void run(const std::vector<Row>& rows) {
    for (size_t r = 0; r < rows.size(); ++r) {
      const Row& row = rows[r];
      std::vector<unsigned char> buf(std::max<size_t>(row.len, 4 * row.data.size()), 0xAB);
      if (!row.data.empty()) std::memcpy(buf.data(), row.data.data(), 4 * row.data.size());
      ::tlm::tlm_generic_payload t;
      t.set_command(row.cmd);
      t.set_address(row.addr);
      t.set_data_ptr(buf.data());
      t.set_data_length(row.len);
      t.set_streaming_width(row.len);
      t.set_byte_enable_ptr(nullptr);
      t.set_response_status(::tlm::TLM_INCOMPLETE_RESPONSE);
      const sc_core::sc_time offset(1, sc_core::SC_US);
      sc_core::sc_time delay = offset;
      m_target.b_transport(t, delay);
      SCOPED_TRACE("row " + std::to_string(r));
      EXPECT_EQ(t.get_response_status(), row.resp) << t.get_response_string();
      EXPECT_EQ(delay, offset + sc_core::sc_time(static_cast<double>(row.delay_ps), sc_core::SC_PS));
      if (!row.expect.empty()) {
        Vec got(row.expect.size());
        std::memcpy(got.data(), buf.data(), 4 * got.size());
        expect_bits(got, row.expect, "READ data");
      }
    }
  }

 private:
  ::tlm::tlm_fw_transport_if<>& m_target;
};

// The whole tensor, READ through the socket.
Vec read(MemoryX& mx, int id) {
  const unsigned len = static_cast<unsigned>(4 * mx.size(id));
  Vec out(mx.size(id));
  ::tlm::tlm_generic_payload t;
  t.set_command(TLM_READ_COMMAND);
  t.set_address(mx.base(id));
  t.set_data_ptr(reinterpret_cast<unsigned char*>(out.data()));
  t.set_data_length(len);
  t.set_streaming_width(len);
  sc_core::sc_time d = sc_core::SC_ZERO_TIME;
  fw(mx).b_transport(t, d);
  EXPECT_EQ(t.get_response_status(), TLM_OK_RESPONSE) << mx.last_error();
  EXPECT_EQ(d, mx.transfer_delay(len));
  return out;
}

// Writes g as two WRITEs, first half then second half (SwarmX would deliver partial ranges).
void write_gradient(MemoryX& mx, int id, const Vec& g) {
  const size_t half = g.size() / 2;
  const Vec lo(g.begin(), g.begin() + static_cast<long>(half)), hi(g.begin() + static_cast<long>(half), g.end());
  TableInitiator(mx).run(
      {{TLM_WRITE_COMMAND, mx.base(id), static_cast<unsigned>(4 * lo.size()), lo,
        mx.transfer_delay(4 * lo.size()).value(), TLM_OK_RESPONSE, {}},
       {TLM_WRITE_COMMAND, mx.base(id) + 4 * half, static_cast<unsigned>(4 * hi.size()), hi,
        mx.transfer_delay(4 * hi.size()).value(), TLM_OK_RESPONSE, {}}});
}

TEST(MemoryX, TransactionTable) {
  SKIP_IF_KERNEL_STARTED();
  MemoryX mx(fresh_name().c_str(), MemoryXConfig{});  // 1200 Gb/s: 12 bytes take 80 ps
  const Vec w0 = {1.0f, -2.0f, 0.5f, 3.0f, 0.125f, -0.25f}, b0 = {0.75f, -1.5f, 2.5f};
  ASSERT_EQ(mx.add_tensor("fc.weight", w0), 0);
  ASSERT_EQ(mx.add_tensor("fc.bias", b0), 1);
  ASSERT_EQ(mx.base(0), 0u);
  ASSERT_EQ(mx.base(1), 24u);
  ASSERT_EQ(mx.size(1), 3u);
  ASSERT_EQ(mx.address_end(), 36u);
  const Vec g1 = {0.5f, 1.0f, -1.0f, 0.1f, 1e8f, 2.0f}, g2 = {0.25f, -3.0f, 1.0f, 0.2f, 3.0f, 0.5f};
  const Vec g3 = {1.0f, 3.0f, 1.0f}, gb = {-1.0f, 0.0f, 4.0f};
  // clang-format off
  const std::vector<Row> rows = {
      // cmd               addr  len data  delay (ps)  response                     expected data
      {TLM_READ_COMMAND,      0, 24, {},   2000160, TLM_OK_RESPONSE,             w0},
      {TLM_READ_COMMAND,     24, 12, {},   2000080, TLM_OK_RESPONSE,             b0},
      {TLM_READ_COMMAND,     12, 12, {},   2000080, TLM_OK_RESPONSE,             {3.0f, 0.125f, -0.25f}},
      {TLM_WRITE_COMMAND,     0, 24, g1,   2000160, TLM_OK_RESPONSE,             {}},
      {TLM_WRITE_COMMAND,     0, 24, g2,   2000160, TLM_OK_RESPONSE,             {}},
      {TLM_WRITE_COMMAND,    12, 12, g3,   2000080, TLM_OK_RESPONSE,             {}},
      {TLM_WRITE_COMMAND,    24, 12, gb,   2000080, TLM_OK_RESPONSE,             {}},
      {TLM_READ_COMMAND,      0, 24, {},   2000160, TLM_OK_RESPONSE,             w0},  // WRITEs leave weights alone
      {TLM_READ_COMMAND,     36,  4, {},   2000000, TLM_ADDRESS_ERROR_RESPONSE,  {}},  // past the end
      {TLM_READ_COMMAND,     32,  8, {},   2000000, TLM_ADDRESS_ERROR_RESPONSE,  {}},  // runs past the end
      {TLM_WRITE_COMMAND,    20,  8, {1, 1}, 2000000, TLM_ADDRESS_ERROR_RESPONSE, {}},  // weight into bias
      {TLM_READ_COMMAND,      2,  4, {},   2000000, TLM_ADDRESS_ERROR_RESPONSE,  {}},  // misaligned address
      {TLM_READ_COMMAND, ~3ull,   8, {},   2000000, TLM_ADDRESS_ERROR_RESPONSE,  {}},  // wraps around
      {TLM_READ_COMMAND,      0,  6, {},   2000000, TLM_BURST_ERROR_RESPONSE,    {}},  // half a word
      {TLM_WRITE_COMMAND,     0,  0, {},   2000000, TLM_BURST_ERROR_RESPONSE,    {}},  // empty
      {TLM_IGNORE_COMMAND,    0,  4, {},   2000000, TLM_COMMAND_ERROR_RESPONSE,  {}},
  };
  // clang-format on
  TableInitiator(mx).run(rows);

  // Accumulators: fp32 adds in WRITE order; failed WRITEs add nothing.
  Vec want(6);
  for (size_t i = 0; i < 6; ++i) want[i] = g1[i] + g2[i];
  for (size_t i = 0; i < 3; ++i) want[3 + i] = want[3 + i] + g3[i];
  expect_bits(mx.gradient(0), want, "fc.weight gradient");
  expect_bits(mx.gradient(1), gb, "fc.bias gradient");
  EXPECT_EQ(mx.gradient(0)[4], 1e8f);  // fp32 adds, one per WRITE: 1e8 + 3 + 3 stays 1e8 (in fp64: 1e8 + 8)

  const MemoryXStats& s = mx.stats();
  EXPECT_EQ(s.bytes_read, 24u + 12 + 12 + 24);
  EXPECT_EQ(s.bytes_written, 24u + 24 + 12 + 12);
  EXPECT_EQ(s.transactions, 8u);
  EXPECT_EQ(s.errors, 8u);
  EXPECT_EQ(s.optimizer_steps, 0u);
  EXPECT_EQ(mx.stats_json()["bytes_written"], 72);
  EXPECT_NE(mx.last_error().find("READ and WRITE"), std::string::npos) << mx.last_error();
}

TEST(MemoryX, ErrorResponsesSayWhyAndChangeNothing) {
  SKIP_IF_KERNEL_STARTED();
  MemoryX mx(fresh_name().c_str(), MemoryXConfig{});
  mx.add_tensor("a", {1, 2, 3, 4});
  mx.add_tensor("b", {5, 6});
  struct Case {
    std::function<void(::tlm::tlm_generic_payload&)> spoil;
    ::tlm::tlm_response_status resp;
    const char* why;
  };
  unsigned char be[8] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
  const std::vector<Case> cases = {
      {[](auto& t) { t.set_address(12); }, TLM_ADDRESS_ERROR_RESPONSE, "runs from tensor 'a' into 'b'"},
      {[](auto& t) { t.set_address(6); }, TLM_ADDRESS_ERROR_RESPONSE, "not word aligned"},
      {[](auto& t) { t.set_address(24); }, TLM_ADDRESS_ERROR_RESPONSE, "beyond the last tensor"},
      {[](auto& t) { t.set_data_length(7); }, TLM_BURST_ERROR_RESPONSE, "positive multiple of 4"},
      {[](auto& t) { t.set_streaming_width(4); }, TLM_BURST_ERROR_RESPONSE, "streaming"},
      {[&](auto& t) {
         t.set_byte_enable_ptr(be);
         t.set_byte_enable_length(8);
       },
       ::tlm::TLM_BYTE_ENABLE_ERROR_RESPONSE, "byte enables"},
      {[](auto& t) { t.set_data_ptr(nullptr); }, ::tlm::TLM_GENERIC_ERROR_RESPONSE, "no data pointer"},
      {[](auto& t) { t.set_command(TLM_IGNORE_COMMAND); }, TLM_COMMAND_ERROR_RESPONSE, "only READ and WRITE"},
  };
  for (const auto& c : cases) {
    float data[2] = {100, 100};
    ::tlm::tlm_generic_payload t;
    t.set_command(TLM_WRITE_COMMAND);
    t.set_address(8);
    t.set_data_ptr(reinterpret_cast<unsigned char*>(data));
    t.set_data_length(8);
    t.set_streaming_width(8);
    c.spoil(t);
    sc_core::sc_time d = sc_core::SC_ZERO_TIME;
    fw(mx).b_transport(t, d);
    EXPECT_EQ(t.get_response_status(), c.resp) << c.why;
    EXPECT_EQ(d, sc_core::sc_time(2000, sc_core::SC_NS)) << c.why;  // the round trip, no data
    EXPECT_NE(mx.last_error().find(c.why), std::string::npos) << mx.last_error();
    EXPECT_EQ(mx.last_error().rfind(mx.name(), 0), 0u) << mx.last_error();  // names the module
  }
  expect_bits(mx.gradient(0), {0, 0, 0, 0}, "a gradient");
  expect_bits(mx.gradient(1), {0, 0}, "b gradient");
  EXPECT_EQ(mx.stats().errors, cases.size());
  EXPECT_EQ(mx.stats().transactions, 0u);
  EXPECT_EQ(mx.stats().bytes_written, 0u);
}

TEST(MemoryX, DelayIsLatencyPlusBytesOverBandwidth) {
  SKIP_IF_KERNEL_STARTED();
  MemoryX mx(fresh_name().c_str(), MemoryXConfig{});
  // 2000 ns + len * 8 / 1200 ns, rounded to SystemC's 1 ps resolution.
  const std::vector<std::pair<uint64_t, uint64_t>> table = {
      {0, 2000000},       {4, 2000027},         {12, 2000080},           {1200, 2008000},
      {4096, 2027307},    {1 << 20, 8990507},   {64ull << 20, 449392427},  // one 4096 x 4096 fp32 layer
  };
  for (const auto& [bytes, ps] : table) {
    EXPECT_EQ(mx.transfer_delay(bytes), sc_core::sc_time(static_cast<double>(ps), sc_core::SC_PS)) << bytes;
  }
  // Each term alone, and the same figures through b_transport.
  MemoryXConfig c;
  c.latency_ns = 0;
  c.bandwidth_gbps = 100;
  MemoryX fast(fresh_name().c_str(), c);
  EXPECT_EQ(fast.transfer_delay(100), sc_core::sc_time(8, sc_core::SC_NS));
  fast.add_tensor("t", Vec(300, 1.0f));
  TableInitiator(fast).run({{TLM_READ_COMMAND, 0, 100, {}, 8000, TLM_OK_RESPONSE, Vec(25, 1.0f)},
                            {TLM_WRITE_COMMAND, 0, 1200, Vec(300, 0.5f), 96000, TLM_OK_RESPONSE, {}}});
  mx.add_tensor("t", Vec(1024, 0.0f));
  TableInitiator(mx).run({{TLM_READ_COMMAND, 0, 4096, {}, 2027307, TLM_OK_RESPONSE, {}},
                          {TLM_READ_COMMAND, 4, 4, {}, 2000027, TLM_OK_RESPONSE, {}}});
}

// A streamed WRITE (tlm/streamed.h) came in at line rate as it was produced: MemoryX adds only
// its latency, and takes the values the same.
TEST(MemoryX, AStreamedWriteTakesOnlyTheLatency) {
  SKIP_IF_KERNEL_STARTED();
  MemoryX mx(fresh_name().c_str(), MemoryXConfig{});
  mx.add_tensor("t", Vec(1024, 0.0f));
  Vec g(1024, 0.25f);
  for (const bool s : {false, true}) {
    ::tlm::tlm_generic_payload t;
    t.set_command(TLM_WRITE_COMMAND);
    t.set_address(0);
    t.set_data_ptr(reinterpret_cast<unsigned char*>(g.data()));
    t.set_data_length(4096);
    t.set_streaming_width(4096);
    if (s) t.set_extension(new Streamed);
    sc_core::sc_time d = sc_core::SC_ZERO_TIME;
    mx.b_transport(t, d);
    EXPECT_EQ(t.get_response_status(), TLM_OK_RESPONSE);
    EXPECT_EQ(d, s ? mx.transfer_delay(0) : mx.transfer_delay(4096)) << s;
  }
  EXPECT_EQ(mx.gradient(0), Vec(1024, 0.5f));
}

// ---- Optimizers ----------------------------------------------------------------------------
//
// The PyTorch reference: Debian's /usr/bin/python3 with python3-torch 1.13.1 (CPU, AVX2), run
// once offline and pinned here as exact fp32 hex values:
//
//   import torch
//   w0 = [0.5, -1.25, 2.0, 0.1, -0.3, 3.0, -0.05, 1.33, -0.8]
//   grads = [[0.25, -1.5, 1e-3, 0.0, 4.0, 1e-6, 2.5, 7.5, 250.0],
//            [-0.5, -1.0, 2e-3, 3e-9, -4.0, 1e-6, 190.0, 9.0, -1e-3],
//            [0.75, 0.125, -1e-3, 0.0, 3.5, -2e-6, -17.0, 7.5e-3, 75.0]]
//   p = torch.nn.Parameter(torch.tensor(w0, dtype=torch.float32))
//   opt = torch.optim.SGD([p], lr=0.01, momentum=0.9)   # or Adam([p], lr=.., betas=.., eps=..)
//   for g in grads:
//       p.grad = torch.tensor(g, dtype=torch.float32); opt.step(); print([x.hex() for x in p.tolist()])
//   print(opt.state[p])   # momentum_buffer, or exp_avg / exp_avg_sq / step
//
// MemoryX matches these bit for bit (0 ulp), so the checks are exact.

// Columns 0-5 are plain values; 6-8 are the ones where another rounding order (SGD: w + fl(-lr v)
// or an fma in v; Adam: no fma in m or v, g*g first, the textbook mhat/vhat form, m/d first,
// multiplying by 1/s2, or fp32 betas in the scalars) gives different weights, so that the pins
// fix the order and not only the formula.
const Vec kW0 = {0.5f, -1.25f, 2.0f, 0.1f, -0.3f, 3.0f, -0.05f, 1.33f, -0.8f};
const std::vector<Vec> kGrads = {{0.25f, -1.5f, 1e-3f, 0.0f, 4.0f, 1e-6f, 2.5f, 7.5f, 250.0f},
                                 {-0.5f, -1.0f, 2e-3f, 3e-9f, -4.0f, 1e-6f, 190.0f, 9.0f, -1e-3f},
                                 {0.75f, 0.125f, -1e-3f, 0.0f, 3.5f, -2e-6f, -17.0f, 7.5e-3f, 75.0f}};

// torch.optim.SGD(lr=0.01, momentum=0.9): weights after steps 1, 2, 3, then momentum_buffer.
const std::vector<Vec> kTorchSgd = {
    {0x1.fd70a4p-2f, -0x1.3c28f6p+0f, 0x1.ffff58p+0f, 0x1.99999ap-4f, -0x1.5c28f6p-2f,
     0x1.800000p+1f, -0x1.333334p-4f, 0x1.4147aep+0f, -0x1.a66666p+1f},
    {0x1.0020c4p-1f, -0x1.3624dep+0f, 0x1.fffd72p+0f, 0x1.99999ap-4f, -0x1.581062p-2f,
     0x1.800000p+1f, -0x1.ff5c28p+0f, 0x1.18f5c2p+0f, -0x1.633308p+2f},
    {0x1.fb1c42p-2f, -0x1.310cb4p+0f, 0x1.fffc64p+0f, 0x1.99999ap-4f, -0x1.7837b4p-2f,
     0x1.800000p+1f, -0x1.c76458p+1f, 0x1.e94e3cp-1f, -0x1.0a663ep+3f}};
const Vec kTorchSgdBuf = {0x1.0147aep-1f, -0x1.fd70a0p+0f, 0x1.a60d46p-10f, 0x1.7315cep-29f, 0x1.91eb84p+1f,
                          -0x1.3762a0p-22f, 0x1.380cccp+7f, 0x1.c5d708p+3f, 0x1.157fc4p+8f};

// torch.optim.Adam(lr=0.01, betas=(0.9, 0.999), eps=1e-8): weights, then exp_avg, exp_avg_sq.
const std::vector<Vec> kTorchAdam = {
    {0x1.f5c290p-2f, -0x1.3d70a4p+0f, 0x1.fd70a6p+0f, 0x1.99999ap-4f, -0x1.3d70a4p-2f,
     0x1.7ebb90p+1f, -0x1.eb851ep-5f, 0x1.51eb86p+0f, -0x1.9eb852p-1f},
    {0x1.f98248p-2f, -0x1.3af4b6p+0f, 0x1.faf81cp+0f, 0x1.9443c4p-4f, -0x1.3ce6acp-2f,
     0x1.7d7720p+1f, -0x1.14991ep-4f, 0x1.4f5bc4p+0f, -0x1.a22694p-1f},
    {0x1.f5fe7ep-2f, -0x1.39274cp+0f, 0x1.f9e4cep+0f, 0x1.90c94cp-4f, -0x1.3ffd92p-2f,
     0x1.7d8fbep+1f, -0x1.2a0224p-4f, 0x1.4d6098p+0f, -0x1.a5a19ap-1f}};
const Vec kTorchAdamM = {0x1.9ba5e4p-5f, -0x1.978d50p-3f, 0x1.51a438p-13f, 0x1.28de3ep-32f, 0x1.418936p-2f,
                         -0x1.f23760p-26f, 0x1.f347aep+3f, 0x1.6b126cp+0f, 0x1.bbffa2p+4f};
const Vec kTorchAdamV = {0x1.ca8e30p-11f, 0x1.ab4fb8p-9f, 0x1.9be798p-28f, 0x1.53aba0p-67f, 0x1.6a1a58p-5f,
                         0x1.b02126p-48f, 0x1.22df86p+5f, 0x1.18b124p-3f, 0x1.100012p+6f};

// torch.optim.Adam(lr=0.05, betas=(0.8, 0.99), eps=1e-6): weights after steps 1, 2, 3.
const std::vector<Vec> kTorchAdam2 = {
    {0x1.ccccdap-2f, -0x1.333334p+0f, 0x1.f3367ap+0f, 0x1.99999ap-4f, -0x1.666666p-2f,
     0x1.7cccccp+1f, -0x1.999996p-4f, 0x1.47ae16p+0f, -0x1.b33334p-1f},
    {0x1.e25b02p-2f, -0x1.26ea66p+0f, 0x1.e6a594p+0f, 0x1.994268p-4f, -0x1.60b60cp-2f,
     0x1.799998p+1f, -0x1.1de3b4p-3f, 0x1.3acf46p+0f, -0x1.c354c4p-1f},
    {0x1.ce98bcp-2f, -0x1.1eaa98p+0f, 0x1.e20ce2p+0f, 0x1.990eeep-4f, -0x1.705808p-2f,
     0x1.7a351ep+1f, -0x1.51ef8ap-3f, 0x1.317a46p+0f, -0x1.d3c2f8p-1f}};

// The hand computations: memoryx.cc's documented fp32 order, written again from the formulas.
// The volatile keeps momentum * v its own rounding even if this file is built with fp contraction.
std::vector<Vec> sgd_by_hand(float lr, float momentum) {
  Vec w = kW0, v(w.size());
  std::vector<Vec> out;
  for (size_t s = 0; s < kGrads.size(); ++s) {
    for (size_t i = 0; i < w.size(); ++i) {
      if (s == 0) {
        v[i] = kGrads[s][i];
      } else {
        const volatile float mv = momentum * v[i];
        v[i] = mv + kGrads[s][i];
      }
      w[i] = std::fma(-lr, v[i], w[i]);
    }
    out.push_back(w);
  }
  return out;
}

// lr, b1, b2 as the decimal doubles a PyTorch script passes; the per-step scalars in double.
std::vector<Vec> adam_by_hand(double lr, double b1, double b2, float eps) {
  Vec w = kW0, m(w.size(), 0.0f), v(w.size(), 0.0f);
  std::vector<Vec> out;
  for (size_t s = 0; s < kGrads.size(); ++s) {
    const double t = static_cast<double>(s + 1);
    const float a1 = static_cast<float>(1 - b1), a2 = static_cast<float>(1 - b2);
    const float neg_step = static_cast<float>(-(lr / (1 - std::pow(b1, t))));
    const float s2 = static_cast<float>(std::sqrt(1 - std::pow(b2, t)));
    for (size_t i = 0; i < w.size(); ++i) {
      const float g = kGrads[s][i];
      const float md = m[i] * static_cast<float>(b1);
      m[i] = std::fma(a1, g, md);
      const float vd = v[i] * static_cast<float>(b2);
      const float a2g = a2 * g;
      v[i] = std::fma(a2g, g, vd);
      const float r = std::sqrt(v[i]);
      const float q = r / s2;
      const float d = q + eps;
      const float n = neg_step * m[i];
      const float delta = n / d;
      w[i] = w[i] + delta;
    }
    out.push_back(w);
  }
  return out;
}

// Three steps through the socket: gradients WRITTEN (in two halves), step(), weights READ back.
std::vector<Vec> train_three_steps(MemoryX& mx, int id) {
  std::vector<Vec> out;
  for (const Vec& g : kGrads) {
    write_gradient(mx, id, g);
    expect_bits(mx.gradient(id), g, "accumulated gradient");
    mx.step();
    expect_bits(mx.gradient(id), Vec(g.size(), 0.0f), "gradient after step");
    out.push_back(read(mx, id));
  }
  return out;
}

// Trains kW0 for three steps and checks each step's weights against both references.
TensorState expect_three_steps(const MemoryXConfig& c, const std::vector<Vec>& hand, const std::vector<Vec>& torch) {
  MemoryX mx(fresh_name().c_str(), c);
  const int id = mx.add_tensor("p", kW0);
  expect_bits(read(mx, id), kW0, "initial weights");
  const std::vector<Vec> got = train_three_steps(mx, id);
  for (size_t s = 0; s < 3; ++s) {
    expect_bits(got[s], hand[s], "step " + std::to_string(s + 1) + " vs hand");
    expect_bits(got[s], torch[s], "step " + std::to_string(s + 1) + " vs torch");
  }
  EXPECT_EQ(mx.stats().optimizer_steps, 3u);
  EXPECT_EQ(mx.stats().elements_updated, 3 * kW0.size());
  return mx.state(id);
}

TEST(MemoryX, SgdEqualsHandComputationAndPyTorch) {
  SKIP_IF_KERNEL_STARTED();
  const TensorState st = expect_three_steps(MemoryXConfig{}, sgd_by_hand(0.01f, 0.9f), kTorchSgd);
  expect_bits(st.momentum_buffer, kTorchSgdBuf, "momentum_buffer vs torch");
  EXPECT_EQ(st.step, 3u);
  EXPECT_TRUE(st.exp_avg.empty() && st.exp_avg_sq.empty());
}

TEST(MemoryX, AdamEqualsHandComputationAndPyTorch) {
  SKIP_IF_KERNEL_STARTED();
  MemoryXConfig c;
  c.optimizer = "adam";  // lr 0.01, betas (0.9, 0.999), eps 1e-8
  const TensorState st = expect_three_steps(c, adam_by_hand(0.01, 0.9, 0.999, 1e-8f), kTorchAdam);
  expect_bits(st.exp_avg, kTorchAdamM, "exp_avg vs torch");
  expect_bits(st.exp_avg_sq, kTorchAdamV, "exp_avg_sq vs torch");
  EXPECT_EQ(st.step, 3u);
  EXPECT_TRUE(st.momentum_buffer.empty());

  c.lr = 0.05f;
  c.beta1 = 0.8f;
  c.beta2 = 0.99f;
  c.eps = 1e-6f;
  expect_three_steps(c, adam_by_hand(0.05, 0.8, 0.99, 1e-6f), kTorchAdam2);
}

// A run checkpointed after step 1 and resumed in a fresh MemoryX ends bit-identical to one that
// never stopped; the checkpoint holds weights, optimizer state and the step count.
TEST(MemoryX, ResumeFromCheckpointIsBitExact) {
  SKIP_IF_KERNEL_STARTED();
  for (const char* opt : {"sgd", "adam"}) {
    SCOPED_TRACE(opt);
    MemoryXConfig c;
    c.optimizer = opt;
    MemoryX whole(fresh_name().c_str(), c);
    const int a = whole.add_tensor("a", kW0);
    whole.add_tensor("b", {1.0f, 2.0f});
    const std::vector<Vec> straight = train_three_steps(whole, a);

    MemoryX first(fresh_name().c_str(), c);
    first.add_tensor("a", kW0);
    first.add_tensor("b", {1.0f, 2.0f});
    write_gradient(first, 0, kGrads[0]);
    first.step();
    write_gradient(first, 0, Vec(kW0.size(), 9.0f));  // pending at checkpoint time: not part of it
    const TensorState ckpt_a = first.state(0), ckpt_b = first.state(1);

    MemoryX resumed(fresh_name().c_str(), c);
    resumed.add_tensor("a", Vec(kW0.size(), 0.0f));
    resumed.add_tensor("b", Vec(2, 0.0f));
    resumed.set_state(0, ckpt_a);
    resumed.set_state(1, ckpt_b);
    EXPECT_EQ(resumed.state(0).step, 1u);
    expect_bits(resumed.gradient(0), Vec(kW0.size(), 0.0f), "accumulator after set_state");
    for (size_t s = 1; s < 3; ++s) {
      write_gradient(resumed, 0, kGrads[s]);
      resumed.step();
    }
    expect_bits(read(resumed, 0), straight[2], "resumed vs straight");
    expect_bits(resumed.weights(1), whole.weights(1), "untouched tensor b");
  }
}

TEST(MemoryX, SetStateRejectsMismatchedShapes) {
  SKIP_IF_KERNEL_STARTED();
  MemoryX sgd(fresh_name().c_str(), MemoryXConfig{});
  MemoryXConfig c;
  c.optimizer = "adam";
  MemoryX adam(fresh_name().c_str(), c);
  sgd.add_tensor("w", {1, 2, 3});
  adam.add_tensor("w", {1, 2, 3});
  auto message = [](MemoryX& mx, const TensorState& s) -> std::string {
    try {
      mx.set_state(0, s);
    } catch (const ConfigError& e) {
      return e.what();
    }
    return "";
  };
  EXPECT_NE(message(adam, sgd.state(0)).find("momentum_buffer has 3 elements, adam needs 0"), std::string::npos);
  EXPECT_NE(message(sgd, adam.state(0)).find("momentum_buffer has 0 elements, sgd needs 3"), std::string::npos);
  TensorState shorter = sgd.state(0);
  shorter.weights.pop_back();
  EXPECT_NE(message(sgd, shorter).find("tensor 'w': weights has 2 elements"), std::string::npos);
  EXPECT_THROW(sgd.state(1), std::out_of_range);
  EXPECT_THROW(sgd.weights(-1), std::out_of_range);
  expect_bits(sgd.weights(0), {1, 2, 3}, "weights after refused set_state");
}

// ---- Capacity and configuration -------------------------------------------------------------

std::string add_error(MemoryX& mx, const std::string& name, size_t n) {
  try {
    mx.add_tensor(name, Vec(n, 1.0f));
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

TEST(MemoryX, CapacityCountsWeightsAndOptimizerState) {
  SKIP_IF_KERNEL_STARTED();
  MemoryXConfig c;
  c.capacity_gb = 100e-9;  // 100 bytes
  MemoryX sgd(fresh_name().c_str(), c);  // 8 bytes per parameter
  EXPECT_EQ(sgd.capacity_bytes(), 100u);
  EXPECT_EQ(add_error(sgd, "fc1.weight", 8), "");
  EXPECT_EQ(sgd.bytes_used(), 64u);
  const std::string e = add_error(sgd, "fc1.bias", 5);
  EXPECT_NE(e.find("model too large for MemoryX"), std::string::npos) << e;
  EXPECT_NE(e.find("'fc1.bias'"), std::string::npos) << e;
  EXPECT_NE(e.find("needs 40 bytes"), std::string::npos) << e;
  EXPECT_NE(e.find("36 of 100 bytes left"), std::string::npos) << e;
  EXPECT_EQ(sgd.tensor_count(), 1);  // the refused tensor left nothing behind
  EXPECT_EQ(add_error(sgd, "fc1.bias", 4), "");  // exactly full
  EXPECT_EQ(sgd.bytes_used(), 96u);
  EXPECT_EQ(sgd.find_tensor("fc1.bias"), 1);
  EXPECT_EQ(sgd.find_tensor("fc2.bias"), -1);

  c.optimizer = "adam";
  MemoryX adam(fresh_name().c_str(), c);  // 12 bytes per parameter
  EXPECT_NE(add_error(adam, "w", 9).find("needs 108 bytes"), std::string::npos);
  EXPECT_EQ(add_error(adam, "w", 8), "");
  EXPECT_NE(add_error(adam, "w", 1).find("already registered"), std::string::npos);
  EXPECT_NE(add_error(adam, "x", 0).find("'x' is empty"), std::string::npos);

  MemoryX big(fresh_name().c_str(), MemoryXConfig{});  // the default: 4 TB
  EXPECT_EQ(big.capacity_bytes(), 4096ull * 1000 * 1000 * 1000);
}

TEST(MemoryX, EveryBadConfigIsRefusedWithItsReason) {
  struct Bad {
    std::function<void(MemoryXConfig&)> spoil;
    const char* message;
  };
  const std::vector<Bad> bad = {
      {[](auto& c) { c.capacity_gb = 0; }, "memoryx.capacity_gb must be a finite number > 0, got 0"},
      {[](auto& c) { c.capacity_gb = -4; }, "memoryx.capacity_gb must be a finite number > 0, got -4"},
      {[](auto& c) { c.capacity_gb = NAN; }, "memoryx.capacity_gb must be a finite number > 0"},
      {[](auto& c) { c.bandwidth_gbps = 0; }, "memoryx.bandwidth_gbps must be a finite number > 0, got 0"},
      {[](auto& c) { c.latency_ns = -1; }, "memoryx.latency_ns must be a finite number >= 0, got -1"},
      {[](auto& c) { c.optimizer = "rmsprop"; }, "optimizer 'rmsprop' is unknown (sgd or adam)"},
      {[](auto& c) { c.optimizer = "SGD"; }, "optimizer 'SGD' is unknown (sgd or adam)"},
      {[](auto& c) { c.lr = 0; }, "memoryx.lr must be a finite number > 0, got 0"},
      {[](auto& c) { c.lr = -0.01f; }, "memoryx.lr must be a finite number > 0, got -0.01"},
      {[](auto& c) { c.momentum = 1; }, "memoryx.momentum must be in [0, 1), got 1"},
      {[](auto& c) { c.momentum = -0.5f; }, "memoryx.momentum must be in [0, 1), got -0.5"},
      {[](auto& c) { c.beta1 = 1; }, "memoryx.beta1 must be in [0, 1), got 1"},
      {[](auto& c) { c.beta2 = 1.5f; }, "memoryx.beta2 must be in [0, 1), got 1.5"},
      {[](auto& c) { c.beta2 = -0.1f; }, "memoryx.beta2 must be in [0, 1), got -0.1"},
      {[](auto& c) { c.eps = 0; }, "memoryx.eps must be a finite number > 0, got 0"},
  };
  MemoryXConfig{}.validate();
  for (const Bad& b : bad) {
    MemoryXConfig c;
    b.spoil(c);
    try {
      c.validate();
      ADD_FAILURE() << "accepted: " << b.message;
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find(b.message), std::string::npos) << e.what();
    }
  }
  // Edges that are valid: zero latency, momentum 0, beta 0.
  MemoryXConfig ok;
  ok.latency_ns = 0;
  ok.momentum = 0;
  ok.beta1 = 0;
  ok.validate();
}

TEST(MemoryX, ConstructorValidatesItsConfig) {
  SKIP_IF_KERNEL_STARTED();
  MemoryXConfig c;
  c.optimizer = "rmsprop";
  EXPECT_THROW(MemoryX(fresh_name().c_str(), c), ConfigError);  // the constructor validates
  MemoryX after(fresh_name().c_str(), MemoryXConfig{});          // and leaves the kernel usable
  EXPECT_EQ(after.add_tensor("w", {1}), 0);
}

}  // namespace
}  // namespace wafersim::tlm
