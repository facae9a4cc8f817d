// Helpers shared by the wafersim test tiers: small configs, scratch directories, running a
// fabric to completion, and a per-flow scoreboard over TrafficAgent logs.
#pragma once

#include <unistd.h>

#include <cctype>
#include <cstring>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "hw/fabric.h"
#include "hw/traffic_agent.h"
#include "hw/traffic_gen.h"

namespace wafersim::test {

// Port masks, as routes are written: ColorRoute::simple(W | R, E).
constexpr uint8_t N = port_bit(kNorth), S = port_bit(kSouth), E = port_bit(kEast), W = port_bit(kWest),
                  R = port_bit(kRamp);

// A scratch path inside the build tree (tests never write outside it).
inline std::string tmp_path(const std::string& name) { return std::string(WAFERSIM_TEST_TMPDIR) + "/" + name; }

// A small fabric with the default router/IO figures.
inline HwConfig small_config(int width, int height) {
  HwConfig c;
  c.fabric.width = width;
  c.fabric.height = height;
  return c;
}

inline uint32_t pe_id(const Fabric& f, int x, int y) { return static_cast<uint32_t>(y * f.width() + x); }

// Attaches a TrafficAgent at (x, y) and returns it (the fabric owns it).
inline TrafficAgent* add_agent(Fabric& f, int x, int y, TrafficAgentOptions o = {}) {
  auto a = std::make_unique<TrafficAgent>(pe_id(f, x, y), o);
  TrafficAgent* p = a.get();
  f.attach_agent(x, y, std::move(a));
  return p;
}

inline TrafficAgentOptions recording() {
  TrafficAgentOptions o;
  o.record = true;
  return o;
}

// finalize()'s ConfigError message, or "" when the routes are accepted.
inline std::string finalize_error(Fabric& f) {
  try {
    f.finalize();
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

inline bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// `a` as one shell word (single-quoted), for tests that run the wafersim binary.
inline std::string quote(const std::string& a) {
  std::string q = "'";
  for (char ch : a) q += ch == '\'' ? std::string("'\\''") : std::string(1, ch);
  return q + "'";
}


// A whole file as a string ("" when it cannot be read).
inline std::string slurp(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

// The sum of a CSV matrix of counts (the pe_*.csv files); -1 when it cannot be read.
inline long long csv_sum(const std::filesystem::path& p) {
  std::ifstream f(p);
  if (!f) return -1;
  long long sum = 0;
  std::string cell;
  while (std::getline(f, cell, ',')) {
    std::istringstream line(cell);  // the last cell of a row holds the newline and the next row's first
    for (long long v; line >> v;) sum += v;
  }
  return sum;
}

// The step lines of a training run's losses.csv, from step `from` on.
inline std::vector<std::string> loss_lines(const std::filesystem::path& dir, long long from) {
  std::istringstream in(slurp(dir / "losses.csv"));
  std::vector<std::string> v;
  std::string line;
  std::getline(in, line);
  while (std::getline(in, line)) {
    if (std::stoll(line.substr(0, line.find(','))) >= from) v.push_back(line);
  }
  return v;
}

// Wafer values against the reference's, bit for bit.
inline void expect_same_bits(const std::vector<float>& a, const std::vector<float>& b, const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (size_t i = 0; i < a.size(); ++i) {
    uint32_t x, y;
    std::memcpy(&x, &a[i], 4);
    std::memcpy(&y, &b[i], 4);
    ASSERT_EQ(x, y) << what << "[" << i << "]: wafer " << a[i] << " vs reference " << b[i];
  }
}

// Sequence numbers of everything an agent received, in arrival order.
inline std::vector<uint32_t> seqs_of(const TrafficAgent& a) {
  std::vector<uint32_t> v;
  for (const auto& arr : a.log()) v.push_back(payload_seq(arr.w.payload));
  return v;
}

inline std::vector<uint32_t> iota_seqs(uint32_t n) {
  std::vector<uint32_t> v(n);
  for (uint32_t i = 0; i < n; ++i) v[i] = i;
  return v;
}

// A scratch directory for the running test, under the build tree (WAFERSIM_TEST_TMPDIR, set by
// testbench/CMakeLists.txt) or gtest's TempDir(). Emptied on the first call of each test; later
// calls in the same test return the same directory untouched.
inline std::string test_tmp_dir() {
  const auto* info = testing::UnitTest::GetInstance()->current_test_info();
  std::string name = std::string(info->test_suite_name()) + "." + info->name();
  for (char& ch : name) {
    if (!std::isalnum(static_cast<unsigned char>(ch)) && ch != '.' && ch != '_') ch = '_';
  }
#ifdef WAFERSIM_TEST_TMPDIR
  const std::filesystem::path base = WAFERSIM_TEST_TMPDIR;
#else
  const std::filesystem::path base = testing::TempDir();
#endif
  const auto dir = base / (name + "." + std::to_string(::getpid()));
  static std::string prepared;  // the directory already emptied for the running test
  if (prepared != dir.string()) {
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
    prepared = dir.string();
  }
  return dir.string();
}

inline std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::ostringstream os;
  os << in.rdbuf();
  return os.str();
}

inline void write_text(const std::string& path, const std::string& text) {
  std::ofstream out(path);
  out << text;
}

// Steps until no router has work left (every finite flow sent and drained) or `limit` cycles
// have completed. Returns true when the fabric went idle.
inline bool run_until_idle(Fabric& f, uint64_t limit) {
  f.finalize();
  while (f.cycle() < limit) {
    if (f.active_routers() == 0 && f.totals().in_flight == 0) return true;
    f.step();
  }
  return f.active_routers() == 0 && f.totals().in_flight == 0;
}

// Every router's port counters (sent/stalled), its peak occupancy and each color's peak, a line
// per router in id order: what two runs that must agree are compared on.
inline std::string router_counters(const Fabric& f) {
  std::ostringstream os;
  for (const Router* r : f.routers()) {
    os << r->x() << "," << r->y() << ":";
    for (int p = 0; p < kNumPorts; ++p) os << " " << r->s_forwarded[p] << "/" << r->stall_cycles(p, f.cycle());
    os << " peak " << r->s_peak_occupancy;
    for (int c = 0; c < f.config().router.colors; ++c) os << " " << r->peak_of_color(c);
    os << "\n";
  }
  return os.str();
}

// Every TrafficAgent of the fabric with its position, in router id order.
struct PlacedAgent {
  int x, y;
  const TrafficAgent* agent;
};
inline std::vector<PlacedAgent> traffic_agents(const Fabric& f) {
  std::vector<PlacedAgent> v;
  for (const Router* r : f.routers()) {
    if (const auto* a = dynamic_cast<const TrafficAgent*>(r->agent())) v.push_back({r->x(), r->y(), a});
  }
  return v;
}

// Per-flow scoreboard over recorded arrivals. A flow is (source PE, color) as seen by one
// receiver; for each flow the receiver must see sequence numbers 0, 1, 2, ... with no gap,
// duplicate or reordering.
struct Scoreboard {
  // (receiver id, source id, color) -> sequence numbers in arrival order
  std::map<std::tuple<uint32_t, uint32_t, int>, std::vector<uint32_t>> seqs;
  uint64_t arrivals = 0;

  explicit Scoreboard(const Fabric& f) {
    for (const PlacedAgent& pa : traffic_agents(f)) {
      const uint32_t rx = pe_id(f, pa.x, pa.y);
      for (const TrafficAgent::Arrival& a : pa.agent->log()) {
        seqs[{rx, payload_source(a.w.payload), a.w.color}].push_back(payload_seq(a.w.payload));
        ++arrivals;
      }
    }
  }

  // Checks order and completeness: every flow delivered exactly `count` wavelets (0 = only
  // check that the received prefix is 0..n-1).
  ::testing::AssertionResult in_order(uint64_t count) const {
    for (const auto& [key, v] : seqs) {
      const auto& [rx, src, color] = key;
      if (count && v.size() != count) {
        return ::testing::AssertionFailure() << "flow src " << src << " color " << color << " at PE " << rx
                                             << ": got " << v.size() << " wavelets, expected " << count;
      }
      for (size_t i = 0; i < v.size(); ++i) {
        if (v[i] != (i & ((1u << kSeqBits) - 1))) {
          return ::testing::AssertionFailure() << "flow src " << src << " color " << color << " at PE " << rx
                                               << ": arrival " << i << " has seq " << v[i]
                                               << " (lost, duplicated or reordered)";
        }
      }
    }
    return ::testing::AssertionSuccess();
  }
};

}  // namespace wafersim::test
