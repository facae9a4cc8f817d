#include "hw/traffic_gen.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include <unistd.h>

namespace wafersim {
namespace {

int direction(int ax, int ay, int bx, int by) {
  if (bx == ax + 1) return kEast;
  if (bx == ax - 1) return kWest;
  if (by == ay + 1) return kSouth;
  return kNorth;
}

const std::vector<std::string>& pattern_names() {
  static const std::vector<std::string> k = {"neighbour", "row-broadcast", "column-broadcast", "reduce",
                                             "random",    "hotspot",       "mixed",            "file"};
  return k;
}

}  // namespace

Region parse_region(const std::string& text, int width, int height, const char* key) {
  Region r{0, width - 1, 0, height - 1};
  if (text.empty()) return r;
  char c1 = 0, c2 = 0, c3 = 0;
  std::istringstream is(text);
  if (!(is >> r.x0 >> c1 >> r.x1 >> c2 >> r.y0 >> c3 >> r.y1) || c1 != ':' || c2 != ',' || c3 != ':' ||
      is.peek() != EOF) {
    throw ConfigError(std::string(key) + " must look like x0:x1,y0:y1, got '" + text + "'");
  }
  if (r.x0 < 0 || r.x1 >= width || r.x0 > r.x1 || r.y0 < 0 || r.y1 >= height || r.y0 > r.y1) {
    std::ostringstream os;
    os << key << " " << text << " is not inside the " << width << " x " << height << " fabric";
    throw ConfigError(os.str());
  }
  return r;
}

void TrafficConfig::validate() const {
  if (std::find(pattern_names().begin(), pattern_names().end(), pattern) == pattern_names().end()) {
    std::string all;
    for (const auto& n : pattern_names()) all += (all.empty() ? "" : ", ") + n;
    throw ConfigError("traffic.pattern '" + pattern + "' is unknown (choose one of: " + all + ")");
  }
  if (!(rate > 0 && rate <= 1)) throw ConfigError("traffic.rate must be in (0, 1], got " + std::to_string(rate));
  if (hops < 1 || hops > 4096) throw ConfigError("traffic.hops must be in [1, 4096], got " + std::to_string(hops));
  if (flows < 0 || flows > 1000000) throw ConfigError("traffic.flows must be in [0, 1000000], got " + std::to_string(flows));
  if (!(drain_prob > 0 && drain_prob <= 1)) throw ConfigError("traffic.drain_prob must be in (0, 1], got " + std::to_string(drain_prob));
  if (!(stall_prob >= 0 && stall_prob < 1)) throw ConfigError("traffic.stall_prob must be in [0, 1), got " + std::to_string(stall_prob));
  if (!routes.empty() && pattern != "file") {
    throw ConfigError("traffic.routes is read with traffic.pattern file only, not " + pattern);
  }
  if (hotspot_channel < -1) throw ConfigError("traffic.hotspot_channel must be -1 (the middle one) or a channel index, got " + std::to_string(hotspot_channel));
}

TrafficBuilder::TrafficBuilder(Fabric& fabric, const TrafficAgentOptions& opts) : m_fabric(fabric), m_opts(opts) {}

void TrafficBuilder::route(int x, int y, int color, uint8_t rx, uint8_t tx) {
  SwitchPos& s = m_routes[{static_cast<uint32_t>(y * m_fabric.width() + x), color}].pos[0];
  s.rx |= rx;
  s.tx |= tx;
}

void TrafficBuilder::route(int x, int y, int color, const ColorRoute& full) {
  m_routes[{static_cast<uint32_t>(y * m_fabric.width() + x), color}] = full;
  for (int i = 0; i < full.npos; ++i) {
    if (full.pos[i].tx & port_bit(kRamp)) agent(x, y).add_receive(color);
  }
}

TrafficAgent& TrafficBuilder::agent(int x, int y) {
  const auto id = static_cast<uint32_t>(y * m_fabric.width() + x);
  auto& slot = m_agents[id];
  if (!slot) slot = std::make_unique<TrafficAgent>(id, m_opts);
  return *slot;
}

void TrafficBuilder::path(const std::vector<std::pair<int, int>>& pes, int color, int exit_port) {
  int in = kRamp;
  for (size_t i = 0; i < pes.size(); ++i) {
    const auto [x, y] = pes[i];
    const int out = i + 1 < pes.size() ? direction(x, y, pes[i + 1].first, pes[i + 1].second) : exit_port;
    route(x, y, color, port_bit(in), port_bit(out));
    if (out == kRamp) agent(x, y).add_receive(color);
    in = opposite(out);
  }
  agent(pes.front().first, pes.front().second);  // the source needs an agent even if it only sends
}

void TrafficBuilder::apply() {
  for (const auto& [key, r] : m_routes) {
    const int x = static_cast<int>(key.first % m_fabric.width()), y = static_cast<int>(key.first / m_fabric.width());
    m_fabric.set_route(x, y, key.second, r);
  }
  for (auto& [id, a] : m_agents) {
    m_fabric.attach_agent(static_cast<int>(id % m_fabric.width()), static_cast<int>(id / m_fabric.width()), std::move(a));
  }
  m_agents.clear();
  m_routes.clear();
}

std::vector<std::pair<int, int>> xy_path(int sx, int sy, int dx, int dy) {
  std::vector<std::pair<int, int>> p{{sx, sy}};
  for (int x = sx; x != dx;) p.emplace_back(x += dx > x ? 1 : -1, sy);
  for (int y = sy; y != dy;) p.emplace_back(dx, y += dy > y ? 1 : -1);
  return p;
}

namespace {

struct Ctx {
  Fabric& fabric;
  const TrafficConfig& cfg;
  Region reg;
  TrafficBuilder b;
  TrafficPlan plan;
  uint32_t colors_used = 0;
  int colors() const { return fabric.config().router.colors; }
  void need_color(int c, const char* what) {
    if (c >= colors()) {
      throw ConfigError(std::string("traffic pattern ") + what + " needs color " + std::to_string(c) +
                        " but router.colors = " + std::to_string(colors()));
    }
    colors_used |= 1u << c;
  }
  TrafficFlow flow(int color) const { return TrafficFlow{color, cfg.rate, cfg.count, 0}; }
};

// Every PE sends k hops East on color x mod (k+1) and k hops North on (k+1) + y mod (k+1):
// flows starting k+1 apart share a color but never a (PE, color).
void neighbour(Ctx& c) {
  const int k = c.cfg.hops;
  for (int color = 0; color < 2 * (k + 1); ++color) c.need_color(color, "neighbour");
  for (int y = c.reg.y0; y <= c.reg.y1; ++y) {
    for (int x = c.reg.x0; x <= c.reg.x1; ++x) {
      if (x + k <= c.reg.x1) {
        const int color = x % (k + 1);
        c.b.path(xy_path(x, y, x + k, y), color, kRamp);
        c.b.agent(x, y).add_flow(c.flow(color));
        ++c.plan.flows;
      }
      if (y - k >= c.reg.y0) {
        const int color = k + 1 + y % (k + 1);
        c.b.path(xy_path(x, y, x, y - k), color, kRamp);
        c.b.agent(x, y).add_flow(c.flow(color));
        ++c.plan.flows;
      }
    }
  }
}

// Multicast: the west end of each row (or north end of each column) reaches every other PE.
void broadcast(Ctx& c, bool rows, int color) {
  c.need_color(color, rows ? "row-broadcast" : "column-broadcast");
  const int lines = rows ? c.reg.height() : c.reg.width();
  const int len = rows ? c.reg.width() : c.reg.height();
  if (len < 2) return;
  const int fwd = rows ? kEast : kSouth;
  for (int l = 0; l < lines; ++l) {
    for (int i = 0; i < len; ++i) {
      const int x = rows ? c.reg.x0 + i : c.reg.x0 + l, y = rows ? c.reg.y0 + l : c.reg.y0 + i;
      const uint8_t rx = i == 0 ? port_bit(kRamp) : port_bit(opposite(fwd));
      const uint8_t tx = i == 0 ? port_bit(fwd) : i + 1 < len ? (port_bit(fwd) | port_bit(kRamp)) : port_bit(kRamp);
      c.b.route(x, y, color, rx, tx);
      if (i == 0) {
        c.b.agent(x, y).add_flow(c.flow(color));
      } else {
        c.b.agent(x, y).add_receive(color);
      }
    }
    ++c.plan.flows;
  }
}

// Gather: every PE of a row sends East on one color; each router merges its ramp with the
// stream from the West, and the east end of the row takes them all.
void reduce(Ctx& c, int color) {
  c.need_color(color, "reduce");
  for (int y = c.reg.y0; y <= c.reg.y1; ++y) {
    for (int x = c.reg.x0; x <= c.reg.x1; ++x) {
      const uint8_t rx = port_bit(kRamp) | (x > c.reg.x0 ? port_bit(kWest) : 0);
      c.b.route(x, y, color, rx, x < c.reg.x1 ? port_bit(kEast) : port_bit(kRamp));
      c.b.agent(x, y).add_flow(c.flow(color));
      ++c.plan.flows;
    }
    c.b.agent(c.reg.x1, y).add_receive(color);
  }
}

// Random source/destination pairs on XY paths; each takes the lowest color free on its whole path.
void random_flows(Ctx& c, int first_color, std::vector<uint32_t>& used) {
  std::mt19937_64 rng(c.fabric.config().sim.seed * 0x2545f4914f6cdd1dull + 7);
  std::uniform_int_distribution<int> ux(c.reg.x0, c.reg.x1), uy(c.reg.y0, c.reg.y1);
  if (c.reg.width() * c.reg.height() < 2) return;
  const int w = c.fabric.width();
  for (int f = 0; f < c.cfg.flows; ++f) {
    int sx, sy, dx, dy;
    do {
      sx = ux(rng), sy = uy(rng), dx = ux(rng), dy = uy(rng);
    } while (sx == dx && sy == dy);
    const auto p = xy_path(sx, sy, dx, dy);
    uint32_t busy = (1u << first_color) - 1;
    for (const auto& [x, y] : p) busy |= used[static_cast<size_t>(y * w + x)];
    int color = -1;
    for (int k = first_color; k < c.colors(); ++k) {
      if (!((busy >> k) & 1)) {
        color = k;
        break;
      }
    }
    if (color < 0) {
      ++c.plan.skipped;
      continue;
    }
    for (const auto& [x, y] : p) used[static_cast<size_t>(y * w + x)] |= 1u << color;
    c.b.path(p, color, kRamp);
    c.b.agent(sx, sy).add_flow(c.flow(color));
    c.colors_used |= 1u << color;
    ++c.plan.flows;
  }
}

// Every PE of the region sends to one East I/O channel: columns merge into the channel's row,
// the row merges into the channel, whose bandwidth (io.channel_gbps) is the bottleneck.
void hotspot(Ctx& c, int color) {
  c.need_color(color, "hotspot");
  const int n = c.fabric.channels_per_edge();
  if (n == 0) throw ConfigError("traffic pattern hotspot needs an I/O channel, but io.channels_per_edge = 0");
  const int idx = c.cfg.hotspot_channel < 0 ? n / 2 : c.cfg.hotspot_channel;
  if (idx >= n) {
    throw ConfigError("traffic.hotspot_channel " + std::to_string(idx) + " does not exist (" + std::to_string(n) +
                      " channels per edge)");
  }
  EdgeChannel* ch = c.fabric.channel(kEast, idx);
  ch->set_auto_drain(true);
  const int row = ch->row();
  for (int y = c.reg.y0; y <= c.reg.y1; ++y) {
    for (int x = c.reg.x0; x <= c.reg.x1; ++x) {
      auto p = xy_path(x, y, x, row);  // Y first, then East to the edge
      for (int xx = x + 1; xx < c.fabric.width(); ++xx) p.emplace_back(xx, row);
      c.b.path(p, color, kEast);
      c.b.agent(x, y).add_flow(c.flow(color));
      ++c.plan.flows;
    }
  }
}

}  // namespace

int read_route_file(const std::string& path, TrafficBuilder& b, const Fabric& fabric, double default_rate,
                    uint64_t default_count) {
  std::error_code ec;
  if (std::filesystem::exists(path, ec) && !std::filesystem::is_regular_file(path, ec)) {
    throw ConfigError("route file '" + path + "' is not a regular file");
  }
  std::ifstream in(path);
  if (!in) throw ConfigError("cannot read route file '" + path + "'");
  std::string line;
  int flows = 0;
  for (int lineno = 1; std::getline(in, line); ++lineno) {
    const std::string where = path + ":" + std::to_string(lineno) + ": ";
    if (const auto hash = line.find('#'); hash != std::string::npos) line.resize(hash);
    std::istringstream is(line);
    std::string kw;
    if (!(is >> kw)) continue;
    if (kw != "route" && kw != "flow") throw ConfigError(where + "unknown statement '" + kw + "' (route or flow)");
    int x, y, color;
    if (!(is >> x >> y >> color)) throw ConfigError(where + "expected '" + kw + " X Y COLOR ...'");
    if (!fabric.contains(x, y)) throw ConfigError(where + "PE (" + std::to_string(x) + ", " + std::to_string(y) + ") is outside the fabric");
    if (color < 0 || color >= fabric.config().router.colors) throw ConfigError(where + "color " + std::to_string(color) + " is out of range");
    if (kw == "route") {
      ColorRoute r;
      r.npos = 0;
      std::string rx, tx;
      while (is >> rx) {
        if (rx == "hold") {  // the last position stays (after the pairs)
          std::string more;
          if (r.npos == 0 || (is >> more)) throw ConfigError(where + "'hold' comes last, after the RX TX pairs");
          r.hold = true;
          break;
        }
        if (!(is >> tx)) throw ConfigError(where + "switch position '" + rx + "' has no TX ports");
        if (r.npos == kMaxSwitchPositions) throw ConfigError(where + "more than 4 switch positions");
        SwitchPos& sp = r.pos[r.npos++];
        for (auto [text, mask] : {std::make_pair(&rx, &sp.rx), std::make_pair(&tx, &sp.tx)}) {
          if (*text == "-") continue;
          for (size_t i = 0; i < text->size(); ++i) {
            int port;
            const bool last = i + 1 == text->size();
            if ((*text)[i] == '+' && i % 2 == 1 && !last) continue;
            if (i % 2 == 1 || !parse_port((*text)[i], &port)) {
              throw ConfigError(where + "bad port set '" + *text + "' (use N, S, E, W, R joined by +, or -)");
            }
            *mask |= port_bit(port);
          }
        }
      }
      if (r.npos == 0) throw ConfigError(where + "route needs at least one RX TX pair");
      b.route(x, y, color, r);
    } else if (kw == "flow") {
      TrafficFlow f{color, default_rate, default_count, 0};
      std::vector<std::string> rest;
      for (std::string t; is >> t;) rest.push_back(t);
      if (rest.size() > 3) throw ConfigError(where + "unexpected '" + rest[3] + "'");
      try {
        // Whole tokens only; COUNT and CTRL_EVERY are not negative (stoull would wrap -1 around).
        size_t used = 0;
        auto whole = [&](const std::string& t) {
          if (used != t.size() || t[0] == '-') throw std::invalid_argument(t);
        };
        if (rest.size() > 0) {
          f.rate = std::stod(rest[0], &used);
          if (used != rest[0].size()) throw std::invalid_argument(rest[0]);
        }
        if (rest.size() > 1) f.count = std::stoull(rest[1], &used), whole(rest[1]);
        if (rest.size() > 2) {
          const unsigned long long e = std::stoull(rest[2], &used);
          whole(rest[2]);
          if (e > 0xffffffffu) throw std::out_of_range(rest[2]);
          f.ctrl_every = static_cast<uint32_t>(e);
        }
      } catch (const std::exception&) {
        throw ConfigError(where + "flow takes numbers: RATE (0, 1], COUNT >= 0, CTRL_EVERY >= 0");
      }
      if (!(f.rate > 0 && f.rate <= 1)) throw ConfigError(where + "rate must be in (0, 1]");
      b.agent(x, y).add_flow(f);
      ++flows;
    }
  }
  if (flows == 0) throw ConfigError("route file '" + path + "' has no flow statement: nothing would be sent");
  return flows;
}

TrafficPlan program_traffic(Fabric& fabric, const TrafficConfig& cfg) {
  cfg.validate();
  TrafficAgentOptions ao;
  ao.queue_depth = fabric.config().router.buffer_depth;
  ao.drain_prob = cfg.drain_prob;
  ao.stall_prob = cfg.stall_prob;
  ao.seed = fabric.config().sim.seed;
  ao.record = cfg.record;
  Ctx c{fabric, cfg, parse_region(cfg.region, fabric.width(), fabric.height(), "traffic.region"),
        TrafficBuilder(fabric, ao), TrafficPlan{cfg.pattern}};
  std::vector<uint32_t> used;
  const auto& p = cfg.pattern;
  // The patterns that route every PE of the region take about 5-7 KB of host memory per PE
  // (router, buffers, traffic agent, counters, and the vector engine's arrays when `wafersim
  // fabric` uses it; 757 x 996 neighbour: 3.1 GB with the routers alone, 4.4 GB with the engine).
  // Say so before a fabric that cannot fit this machine's memory is built, rather than exhaust it.
  if (p != "random" && p != "hotspot" && p != "file") {
    constexpr double kBytesPerPe = 7000;
    const double need = kBytesPerPe * static_cast<double>(c.reg.width()) * static_cast<double>(c.reg.height());
    const double limit = cfg.host_memory_gb > 0 ? cfg.host_memory_gb * 1e9
                                                : 0.8 * static_cast<double>(sysconf(_SC_PHYS_PAGES)) *
                                                      static_cast<double>(sysconf(_SC_PAGE_SIZE));
    if (limit > 0 && need > limit) {
      std::ostringstream os;
      os.precision(3);
      os << "traffic pattern " << p << " routes all " << c.reg.width() << " x " << c.reg.height() << " PEs"
         << (cfg.region.empty() ? "" : " of traffic.region") << ": about " << need / 1e9
         << " GB of host memory, more than the " << limit / 1e9
         << " GB this machine allows (80 % of its memory); use a smaller fabric or traffic.region";
      throw ConfigError(os.str());
    }
  }
  if (p == "neighbour") neighbour(c);
  if (p == "row-broadcast") broadcast(c, true, 0);
  if (p == "column-broadcast") broadcast(c, false, 0);
  if (p == "reduce") reduce(c, 0);
  if (p == "hotspot") hotspot(c, 0);
  if (p == "file") {
    if (cfg.routes.empty()) throw ConfigError("traffic.pattern file needs traffic.routes (a route file)");
    c.plan.flows = read_route_file(cfg.routes, c.b, fabric, cfg.rate, cfg.count);
  }
  if (p == "random" || p == "mixed") used.assign(static_cast<size_t>(fabric.width()) * fabric.height(), 0);
  if (p == "random") random_flows(c, 0, used);
  if (p == "mixed") {
    broadcast(c, true, 0);
    broadcast(c, false, 1);
    reduce(c, 2);
    hotspot(c, 3);
    random_flows(c, 4, used);
  }
  // A region too small for its pattern places nothing: say so rather than run an empty fabric.
  if (c.plan.flows == 0 && c.plan.skipped == 0 && p != "file") {
    std::ostringstream os;
    os << "traffic pattern " << p << " makes no flow in the " << c.reg.width() << " x " << c.reg.height()
       << (cfg.region.empty() ? " fabric" : " region (traffic.region)");
    if (p == "neighbour") os << ": it needs a side longer than traffic.hops = " << cfg.hops;
    else if (p == "row-broadcast") os << ": it needs at least 2 PEs in a row";
    else if (p == "column-broadcast") os << ": it needs at least 2 PEs in a column";
    else if (p == "random" && cfg.flows == 0) os << ": traffic.flows is 0";
    else os << ": it needs at least 2 PEs";
    throw ConfigError(os.str());
  }
  c.b.apply();
  if (p == "file") {
    for (const Router* r : fabric.routers()) c.colors_used |= r->routed_colors();
  }
  c.plan.colors_used = __builtin_popcount(c.colors_used);
  return c.plan;
}

}  // namespace wafersim
