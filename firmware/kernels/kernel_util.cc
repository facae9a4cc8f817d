#include "firmware/kernels/kernel_util.h"

#include <cstdio>
#include <functional>

#include "hw/config.h"

namespace wafersim::kernels {

namespace {

// Binds `color` to queue `want` (-1: the lowest free one) unless it has one.
int bind_queue(std::map<int, int>& by_color, int color, int want, int count, const char* kind, std::ostringstream& head,
               const char* directive) {
  auto it = by_color.find(color);
  if (it != by_color.end()) return it->second;
  auto taken = [&](int q) {
    for (const auto& [c, used] : by_color) {
      if (used == q) return true;
    }
    return false;
  };
  int q = want;
  if (q < 0) {
    q = 0;
    while (q < count && taken(q)) ++q;
  } else if (q >= count || taken(q)) {
    throw ConfigError(std::string("kernel asks for ") + kind + " queue " + std::to_string(q) + ", which is taken or absent");
  }
  if (q >= count) throw ConfigError(std::string("kernel needs more than ") + std::to_string(count) + " " + kind + " queues on one PE");
  by_color[color] = q;
  head << directive << q << ", " << color << "\n";
  return q;
}

}  // namespace

int PeAsm::inq(int color, int q) { return bind_queue(m_inq, color, q, kNumInputQueues, "input", m_head, ".inq "); }

int PeAsm::outq(int color, int q) { return bind_queue(m_outq, color, q, kNumOutputQueues, "output", m_head, ".outq "); }

std::string PeAsm::dsd() { return "d" + std::to_string(m_next_dsd++); }

std::string PeAsm::fin(int color, uint32_t len) {
  inq(color);
  const std::string d = dsd();
  *this << "dfin " + d + ", " + std::to_string(color) + ", " + std::to_string(len);
  return d;
}

std::string PeAsm::fout(int color, uint32_t len) {
  outq(color);
  const std::string d = dsd();
  *this << "dfout " + d + ", " + std::to_string(color) + ", " + std::to_string(len);
  return d;
}

std::string PeAsm::mem(const std::string& symbol, uint32_t len, int stride) {
  const std::string d = dsd();
  mem(d, symbol, len, stride);
  return d;
}

void PeAsm::mem(const std::string& d, const std::string& symbol, uint32_t len, int stride) {
  *this << "dmem " + d + ", " + symbol + ", " + std::to_string(len) + ", " + std::to_string(stride);
}

PeAsm& PeAsm::operator<<(const std::string& line) {
  if (!line.empty() && line.back() == ':') m_code << line << "\n";
  else m_code << "    " << line << "\n";
  return *this;
}

std::string PeAsm::text() const { return m_head.str() + m_data.str() + m_code.str(); }

void RouteTable::add(int x, int y, int color, uint8_t rx, uint8_t tx) {
  auto& r = m_routes[{x, y, color}];
  r.first |= rx;
  r.second |= tx;
}

void RouteTable::path(int x0, int y0, int x1, int y1, int color) {
  if ((x0 != x1) == (y0 != y1)) throw ConfigError("kernel path must run along one row or one column");
  const int dir = x1 > x0 ? kEast : x1 < x0 ? kWest : y1 > y0 ? kSouth : kNorth;
  add(x0, y0, color, port_bit(kRamp), port_bit(dir));
  int x = x0 + port_dx(dir), y = y0 + port_dy(dir);
  for (; x != x1 || y != y1; x += port_dx(dir), y += port_dy(dir)) {
    add(x, y, color, port_bit(opposite(dir)), port_bit(dir));
  }
  add(x1, y1, color, port_bit(opposite(dir)), port_bit(kRamp));
}

void RouteTable::add_switched(int x, int y, int color, const ColorRoute& r) {
  if (m_routes.count({x, y, color}) || !m_switched.emplace(std::make_tuple(x, y, color), r).second) {
    throw ConfigError("kernel routes: color " + std::to_string(color) + " at PE (" + std::to_string(x) + ", " +
                      std::to_string(y) + ") is taken twice");
  }
}

void RouteTable::emit(FabricProgram& prog) const {
  for (const auto& [k, r] : m_routes) {
    if (m_switched.count(k)) {
      throw ConfigError("kernel routes: color " + std::to_string(std::get<2>(k)) + " at PE (" +
                        std::to_string(std::get<0>(k)) + ", " + std::to_string(std::get<1>(k)) + ") is taken twice");
    }
    prog.route(std::get<0>(k), std::get<1>(k), std::get<2>(k), r.first, r.second);
  }
  for (const auto& [k, r] : m_switched) prog.route(std::get<0>(k), std::get<1>(k), std::get<2>(k), r);
}

const char* reduce_algo_name(ReduceAlgo a) {
  switch (a) {
    case ReduceAlgo::kChain: return "chain";
    case ReduceAlgo::kTree: return "tree";
    case ReduceAlgo::kTwoPhase: return "two-phase";
    case ReduceAlgo::kBinomial: return "binomial";
  }
  return "?";
}

ReduceAlgo parse_reduce_algo(const std::string& s) {
  if (s == "chain") return ReduceAlgo::kChain;
  if (s == "tree") return ReduceAlgo::kTree;
  if (s == "two-phase") return ReduceAlgo::kTwoPhase;
  if (s == "binomial") return ReduceAlgo::kBinomial;
  throw ConfigError("reduction algorithm '" + s + "' is unknown (choose chain, tree, two-phase or binomial)");
}

LinePlan plan_line_reduce(int n, int root, ReduceAlgo algo, int color_base, int group) {
  if (n < 1 || root < 0 || root >= n) throw ConfigError("line reduction: root outside the line");
  LinePlan p;
  p.parent.assign(static_cast<size_t>(n), -1);
  p.children.assign(static_cast<size_t>(n), {});
  p.color.assign(static_cast<size_t>(n), -1);
  int top = color_base - 1;
  auto link = [&](int child, int parent, int color) {
    p.parent[static_cast<size_t>(child)] = parent;
    p.children[static_cast<size_t>(parent)].push_back(child);
    p.color[static_cast<size_t>(child)] = color;
    top = std::max(top, color);
  };
  if (algo == ReduceAlgo::kChain) {
    // Left of the root first, so a position adds its west (or north) child before its east one.
    for (int i = 0; i < root; ++i) link(i, i + 1, color_base + (i % 2));
    for (int i = n - 1; i > root; --i) link(i, i - 1, color_base + 2 + (i % 2));
    // The root adds its left neighbour, then its right one.
    auto& rc = p.children[static_cast<size_t>(root)];
    std::sort(rc.begin(), rc.end());
  } else if (algo == ReduceAlgo::kTwoPhase && n > 1 && (root == 0 || root == n - 1)) {
    // Rooted at an end, as Luczynski et al.'s: numbered from the far end (v = 0 there, n - 1
    // the root), groups of floor(sqrt(n)) (or `group`) from the far end, each led by its
    // position nearest the root (the root's group, perhaps shorter, by the root); a chain
    // inside each group, then one across the leaders, each leader adding its group first.
    int g = group > 0 ? group : 1;
    if (group <= 0) {
      while ((g + 1) * (g + 1) <= n) ++g;
    }
    auto at = [&](int v) { return root == 0 ? n - 1 - v : v; };
    auto leads = [&](int v) { return v == n - 1 || v % g == g - 1; };
    for (int v = 0; v < n - 1; ++v) {
      if (!leads(v)) {
        link(at(v), at(v + 1), color_base + (v % 2));  // toward its group's leader
      } else {
        const int k = v / g, next = std::min(n - 1, v + g);  // the next leader toward the root
        link(at(v), at(next), color_base + 4 + (k % 2));
      }
    }
    for (int i = 0; i < n; ++i) {  // the group's chain first (the nearest child), then the leaders'
      auto& kids = p.children[static_cast<size_t>(i)];
      std::sort(kids.begin(), kids.end(), [&](int a, int b) { return std::abs(a - i) < std::abs(b - i); });
    }
  } else if (algo == ReduceAlgo::kTwoPhase) {
    int g = group > 0 ? group : 1;
    if (group <= 0) {
      while (g * g < n) ++g;
    }
    const int groups = (n + g - 1) / g, rg = root / g;
    std::vector<int> leader(static_cast<size_t>(groups));
    for (int k = 0; k < groups; ++k) {
      const int lo = k * g, hi = std::min(n, lo + g) - 1;
      leader[static_cast<size_t>(k)] = k == rg ? root : std::min(hi, lo + g / 2);
    }
    // Phase 1, inside each group: chains toward its leader (west or north side first).
    for (int k = 0; k < groups; ++k) {
      const int lo = k * g, hi = std::min(n, lo + g) - 1, ld = leader[static_cast<size_t>(k)];
      for (int i = lo; i < ld; ++i) link(i, i + 1, color_base + (i % 2));
      for (int i = hi; i > ld; --i) link(i, i - 1, color_base + 2 + (i % 2));
    }
    // Phase 2: the leaders' chain toward the root's group, added after a leader's own group.
    for (int k = 0; k < rg; ++k) link(leader[static_cast<size_t>(k)], leader[static_cast<size_t>(k) + 1], color_base + 4 + (k % 2));
    for (int k = groups - 1; k > rg; --k) link(leader[static_cast<size_t>(k)], leader[static_cast<size_t>(k) - 1], color_base + 6 + (k % 2));
    for (int k = 0; k < groups; ++k) {
      // Own group first (west child, then east), then the leaders' (west, then east).
      auto& kids = p.children[static_cast<size_t>(leader[static_cast<size_t>(k)])];
      std::stable_sort(kids.begin(), kids.end(), [&](int a, int b) {
        const bool pa = a / g != k, pb = b / g != k;  // a phase-2 child lives in another group
        return pa != pb ? pb : a < b;
      });
    }
  } else if (algo == ReduceAlgo::kBinomial) {
    p.switched = true;
    // Each side on its own pair of colors; the edge into a position of depth k takes color
    // base + k % 2, so a position's input and output colors differ.
    for (int side = 0, pair = 0; side < 2; ++side) {
      const int m = side == 0 ? root : n - 1 - root;  // positions on this side
      if (m == 0) continue;
      const int base = color_base + 2 * pair++;
      auto at = [&](int v) { return side == 0 ? root - (m - v) : root + (m - v); };  // v = m: the root
      std::vector<int> depth(static_cast<size_t>(m) + 1, 0);
      for (int v = m - 1; v >= 0; --v) {
        int t = 0;
        while ((v >> t) & 1) ++t;
        const int par = std::min(v + (1 << t), m);
        depth[static_cast<size_t>(v)] = depth[static_cast<size_t>(par)] + 1;
        link(at(v), at(par), base + (depth[static_cast<size_t>(v)] + 1) % 2);
      }
    }
    // Nearest child first (the order they arrive in); the root's west (north) side first.
    for (int i = 0; i < n; ++i) {
      auto& kids = p.children[static_cast<size_t>(i)];
      std::sort(kids.begin(), kids.end(), [&](int a, int b) {
        const int da = std::abs(a - i), db = std::abs(b - i);
        if ((a < i) != (b < i)) return a < i;
        return da < db;
      });
    }
  } else {
    // In-order binary tree: the middle of each interval is the parent of its halves' middles.
    std::function<void(int, int, int, int)> build = [&](int lo, int hi, int parent, int depth) {
      if (lo > hi) return;
      const int mid = (lo + hi + 1) / 2;
      link(mid, parent, color_base + 2 * (depth - 1) + (mid < parent ? 0 : 1));
      build(lo, mid - 1, mid, depth + 1);
      build(mid + 1, hi, mid, depth + 1);
    };
    build(0, root - 1, root, 1);
    build(root + 1, n - 1, root, 1);
  }
  p.colors = top - color_base + 1;
  p.root = root;
  p.color_base = color_base;
  return p;
}

double LinePlan::model_cycles(uint32_t len, int t_r) const {
  const int n = static_cast<int>(parent.size());
  double energy = 0;
  int contention = 1, distance = 0, depth = 0, lo = root, hi = root;
  for (int i = 0; i < n; ++i) {
    contention = std::max(contention, static_cast<int>(children[static_cast<size_t>(i)].size()));
    if (parent[static_cast<size_t>(i)] < 0) continue;
    energy += std::abs(i - parent[static_cast<size_t>(i)]);
    distance = std::max(distance, std::abs(i - root));
    lo = std::min(lo, i);
    hi = std::max(hi, i);
    int d = 0;
    for (int j = i; parent[static_cast<size_t>(j)] >= 0; j = parent[static_cast<size_t>(j)]) ++d;
    depth = std::max(depth, d);
  }
  const int links = hi - lo;
  if (links == 0) return 0;
  const double b = len;
  return std::max(b * contention, b * energy / links + distance) + (2.0 * t_r + 1) * depth;
}

void emit_line_reduce(PeAsm& a, const LinePlan& plan, int pos, uint32_t len, const std::string& fmt,
                      const std::string& acc) {
  const auto& kids = plan.children[static_cast<size_t>(pos)];
  const int par = plan.parent[static_cast<size_t>(pos)];
  const bool sends = par >= 0;
  const int oc = sends ? plan.color[static_cast<size_t>(pos)] : -1;
  for (size_t k = 0; k < kids.size(); ++k) {
    const std::string in = a.fin(plan.color[static_cast<size_t>(kids[k])], len);
    if (sends && k + 1 == kids.size()) {
      a << "vadd." + fmt + " " + a.fout(oc, len) + ", " + in + ", " + acc;  // the last child streams through
      break;
    }
    a << "vadd." + fmt + " " + acc + ", " + in + ", " + acc;
  }
  if (sends && kids.empty()) a << "vmov." + fmt + " " + a.fout(oc, len) + ", " + acc;
  if (sends && plan.switched) {
    // The last child of its parent tells the routers on its way (the parent's above all) to
    // forward; the others only move their own router on.
    bool last = true;  // no sibling farther on this side (their data comes after ours)
    for (int k : plan.children[static_cast<size_t>(par)]) {
      if ((k < par) == (pos < par) && std::abs(k - par) > std::abs(pos - par)) last = false;
    }
    a << std::string(last ? "ctl " : "swadv ") + std::to_string(oc);
  }
}

void route_line_reduce(RouteTable& routes, const LinePlan& plan, const std::vector<std::pair<int, int>>& xy) {
  if (plan.switched) {
    const int n = static_cast<int>(plan.parent.size());
    auto toward = [&](int from, int to) {  // the port of xy[from] facing its neighbour xy[to]
      const int dx = xy[static_cast<size_t>(to)].first - xy[static_cast<size_t>(from)].first;
      const int dy = xy[static_cast<size_t>(to)].second - xy[static_cast<size_t>(from)].second;
      if (std::abs(dx) + std::abs(dy) != 1) throw ConfigError("line reduction: positions must be neighbours");
      return dx > 0 ? kEast : dx < 0 ? kWest : dy > 0 ? kSouth : kNorth;
    };
    auto sw = [](std::initializer_list<SwitchPos> ps) {
      ColorRoute r;
      r.npos = 0;
      for (const SwitchPos& sp : ps) r.pos[r.npos++] = sp;
      r.hold = r.npos > 1;
      return r;
    };
    // passes[i]: colors whose wavelets go through position i's router to someone beyond.
    std::vector<uint32_t> passes(static_cast<size_t>(n), 0);
    for (int c = 0; c < n; ++c) {
      const int p = plan.parent[static_cast<size_t>(c)];
      for (int j = std::min(c, p) + 1; p >= 0 && j < std::max(c, p); ++j) {
        passes[static_cast<size_t>(j)] |= 1u << plan.color[static_cast<size_t>(c)];
      }
    }
    for (int i = 0; i < n; ++i) {
      const auto [x, y] = xy[static_cast<size_t>(i)];
      const auto& kids = plan.children[static_cast<size_t>(i)];
      const uint32_t pass = passes[static_cast<size_t>(i)];
      if (i == plan.root) {
        for (int k : kids) {
          const int step = k < i ? -1 : 1;
          routes.add(x, y, plan.color[static_cast<size_t>(k)], port_bit(toward(i, i + step)), port_bit(kRamp));
        }
        continue;
      }
      const int step = i < plan.root ? 1 : -1;  // toward the root
      const uint8_t d = port_bit(toward(i, i + step)), r = port_bit(kRamp);
      const uint8_t aw = i - step < 0 || i - step >= n ? 0 : port_bit(toward(i, i - step));
      const int oc = plan.color[static_cast<size_t>(i)];
      const int ic = plan.color_base + ((oc - plan.color_base) ^ 1);  // the side's other color
      // Out: its own data first, then (after swadv or ctl) what comes from farther on.
      routes.add_switched(x, y, oc, (pass >> oc) & 1 ? sw({{r, d}, {aw, d}}) : sw({{r, d}}));
      // In: its children's data to the ramp until the last one's control wavelet, then on
      // toward the root; a leaf only passes it on.
      const bool through = (pass >> ic) & 1;
      if (!kids.empty()) {
        routes.add_switched(x, y, ic, through ? sw({{aw, r}, {aw, d}}) : sw({{aw, r}}));
      } else if (through) {
        routes.add(x, y, ic, aw, d);
      }
    }
    return;
  }
  for (size_t i = 0; i < plan.parent.size(); ++i) {
    const int p = plan.parent[i];
    if (p < 0) continue;
    routes.path(xy[i].first, xy[i].second, xy[static_cast<size_t>(p)].first, xy[static_cast<size_t>(p)].second,
                plan.color[i]);
  }
}

float round_to(NumFormat fmt, float v, int bias) { return to_f32(fmt, from_f32(fmt, v, bias), bias); }

std::vector<uint8_t> encode(NumFormat fmt, const std::vector<float>& v, int bias) {
  const int eb = fmt == NumFormat::kF32 ? 4 : 2;
  std::vector<uint8_t> out;
  out.reserve(v.size() * static_cast<size_t>(eb));
  for (float f : v) {
    const uint32_t bits = from_f32(fmt, f, bias);
    for (int b = 0; b < eb; ++b) out.push_back(static_cast<uint8_t>(bits >> (8 * b)));
  }
  return out;
}

std::string f32_literal(float v) {
  char b[16];
  std::snprintf(b, sizeof b, "0x%08x", f32_bits(v));
  return b;
}

int intern_image(FabricProgram& prog, const std::string& prefix, const std::string& source, const AsmTarget& t) {
  const size_t h = std::hash<std::string>{}(source);
  for (auto [it, end] = prog.interned.equal_range(h); it != end; ++it) {
    if (prog.images[static_cast<size_t>(it->second)].source == source) return it->second;
  }
  int& n = prog.next_number[prefix];
  while (prog.find_image(prefix + "_" + std::to_string(n)) >= 0) ++n;
  const int i = prog.add_image(prefix + "_" + std::to_string(n), source, t);
  ++n;
  prog.interned.emplace(h, i);
  return i;
}

void need_colors(const char* kernel, int base, int colors_needed, const AsmTarget& t) {
  if (base < 0 || base + colors_needed > t.colors) {
    throw ConfigError(std::string(kernel) + " needs colors " + std::to_string(base) + ".." +
                      std::to_string(base + colors_needed - 1) + " but the fabric has " + std::to_string(t.colors) +
                      " (router.colors)");
  }
}

}  // namespace wafersim::kernels
