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
  check_range("fabric.width", width, 1, 4096);
  check_range("fabric.height", height, 1, 4096);
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

void SimConfig::validate() const {
  check_range<uint64_t>("sim.cycles", cycles, 0, uint64_t(1) << 40);
  check_range("sim.threads", threads, 1, 64);
}

void HwConfig::validate() const {
  fabric.validate();
  router.validate();
  io.validate();
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
