#include "hw/config.h"

#include <algorithm>
#include <sstream>

#include "hw/wavelet.h"

namespace wafersim {
namespace {

template <typename T>
void check_range(const char* key, T value, T lo, T hi) {
  if (value < lo || value > hi) {
    std::ostringstream os;
    os << key << " must be in [" << lo << ", " << hi << "], got " << value;
    throw ConfigError(os.str());
  }
}

}  // namespace

void FabricConfig::validate() const {
  check_range("fabric.width", width, 1, kMaxFabricSide);
  check_range("fabric.height", height, 1, kMaxFabricSide);
  check_range("fabric.clock_mhz", clock_mhz, 1.0, 10000.0);
}

void RouterConfig::validate() const {
  check_range("router.colors", colors, 1, kMaxColors);
  check_range("router.buffer_depth", buffer_depth, 1, 255);
  check_range("router.hop_latency", hop_latency, 1, 64);
  check_range("router.ramp_latency", ramp_latency, 1, 64);
}

void IoConfig::validate() const {
  check_range("io.channels_per_edge", channels_per_edge, 0, 4096);
  check_range("io.spacing", spacing, 1, 4096);
  check_range("io.queue_depth", queue_depth, 1, 1 << 20);
  check_range("io.channel_gbps", channel_gbps, 0.001, 10000.0);
}

namespace {

std::vector<int> parse_depths(const char* key, const std::string& s, size_t count) {
  std::vector<int> v;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    size_t used = 0;
    int d = 0;
    try {
      d = std::stoi(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || used != item.size() || d < 1 || d > 255) {
      throw ConfigError(std::string(key) + " must be " + std::to_string(count) +
                        " comma-separated depths in [1, 255], got '" + s + "'");
    }
    v.push_back(d);
  }
  if (v.size() != count) {
    throw ConfigError(std::string(key) + " must list " + std::to_string(count) + " depths, got '" + s + "'");
  }
  return v;
}

}  // namespace

std::vector<int> CoreConfig::inq() const { return parse_depths("core.inq_depths", inq_depths, 8); }
std::vector<int> CoreConfig::outq() const { return parse_depths("core.outq_depths", outq_depths, 6); }

void CoreConfig::validate() const {
  check_range("core.sram_kb", sram_kb, 1, 1024);
  check_range("core.sram_banks", sram_banks, 1, 64);
  check_range("core.read_ports", read_ports, 1, 8);
  check_range("core.write_ports", write_ports, 1, 8);
  if (vector_bits != 32 && vector_bits != 64 && vector_bits != 128 && vector_bits != 256) {
    throw ConfigError("core.vector_bits must be 32, 64, 128 or 256, got " + std::to_string(vector_bits));
  }
  check_range("core.dsd_regs", dsd_regs, 1, 64);
  check_range("core.microthreads", microthreads, 0, 8);
  check_range("core.decode_latency", decode_latency, 1, 64);
  for (auto [key, v] : {std::pair<const char*, int>{"core.fmac_fp32", fmac_fp32}, {"core.fmac_16", fmac_16},
                        {"core.fmac_mixed", fmac_mixed}, {"core.add_fp32", add_fp32}, {"core.mul_fp32", mul_fp32}, {"core.add_16", add_16},
                        {"core.special", special}}) {
    check_range(key, v, 1, 64);
  }
  const int max16 = vector_bits / 16, max32 = vector_bits / 32;
  if (fmac_16 > max16 || add_16 > max16 || fmac_mixed > max16) {
    throw ConfigError("core 16-bit rates cannot exceed core.vector_bits / 16 = " + std::to_string(max16) +
                      " elements per cycle (one SRAM access per operand)");
  }
  if (fmac_fp32 > std::max(1, max32) || add_fp32 > std::max(1, max32) || mul_fp32 > std::max(1, max32)) {
    throw ConfigError("core fp32 rates cannot exceed core.vector_bits / 32 = " + std::to_string(std::max(1, max32)) +
                      " elements per cycle (one SRAM access per operand)");
  }
  inq();
  outq();
  if (cb16_bias < 1 || cb16_bias > 62) {
    throw ConfigError("core.cb16_bias must be in [1, 62] (1.0 must be a normal number), got " +
                      std::to_string(cb16_bias));
  }
}

void SimConfig::validate() const {
  check_range<uint64_t>("sim.cycles", cycles, 0, uint64_t(1) << 40);
  check_range("sim.threads", threads, 1, 64);
  check_range("sim.threaded_visits", threaded_visits, 0, 1 << 30);
}

void HwConfig::validate() const {
  fabric.validate();
  router.validate();
  io.validate();
  core.validate();
  sim.validate();
  const uint64_t max_latency = std::max(router.hop_latency, router.ramp_latency);
  if (sim.watchdog_cycles != 0 && sim.watchdog_cycles <= 2 * max_latency) {
    throw ConfigError("sim.watchdog_cycles must be 0 (off) or more than twice the largest latency (" +
                      std::to_string(2 * max_latency) + "), got " +
                      std::to_string(sim.watchdog_cycles));
  }
  // A channel slower than the watchdog would look like a deadlock while it drains.
  const double channel_period = 32.0 * fabric.clock_mhz / (io.channel_gbps * 1e3);
  if (sim.watchdog_cycles != 0 && static_cast<double>(sim.watchdog_cycles) <= 2 * channel_period) {
    throw ConfigError("sim.watchdog_cycles (" + std::to_string(sim.watchdog_cycles) +
                      ") must exceed twice an I/O channel's cycles per wavelet (" +
                      std::to_string(2 * channel_period) + " at io.channel_gbps = " +
                      std::to_string(io.channel_gbps) + "), or be 0 (off)");
  }
}

const char* visit_order_name(VisitOrder v) {
  switch (v) {
    case VisitOrder::kForward: return "forward";
    case VisitOrder::kReverse: return "reverse";
    case VisitOrder::kShuffle: return "shuffle";
  }
  return "?";
}

VisitOrder parse_visit_order(const std::string& s) {
  if (s == "forward") return VisitOrder::kForward;
  if (s == "reverse") return VisitOrder::kReverse;
  if (s == "shuffle") return VisitOrder::kShuffle;
  throw ConfigError("sim.visit_order must be forward, reverse or shuffle, got '" + s + "'");
}

}  // namespace wafersim
