#include "compiler/routing.h"

#include <algorithm>
#include <map>
#include <utility>

#include "hw/router.h"

namespace wafersim::compiler {
namespace {

uint8_t bit(int port) { return port_bit(port); }

// Port from (x0,y0) toward the adjacent (x1,y1).
int dir_to(int x0, int y0, int x1, int y1) {
  return x1 > x0 ? kEast : x1 < x0 ? kWest : y1 > y0 ? kSouth : kNorth;
}

struct Builder {
  Routing r;

  int add(const std::string& name, std::vector<Hop> hops) {
    r.nets.push_back(Net{name, std::move(hops), -1});
    return static_cast<int>(r.nets.size()) - 1;
  }
  // From the ramp at src through each PE of `line` (adjacent steps), every one taking a copy
  // (deliver_all) or only the last.
  int line(const std::string& name, std::pair<int, int> src, const std::vector<std::pair<int, int>>& pes, bool deliver_all) {
    std::vector<Hop> h;
    auto prev = src;
    h.push_back(Hop{src.first, src.second, bit(kRamp), 0});
    for (size_t i = 0; i < pes.size(); ++i) {
      const int d = dir_to(prev.first, prev.second, pes[i].first, pes[i].second);
      h.back().tx |= bit(d);
      Hop hop{pes[i].first, pes[i].second, bit(opposite(d)), 0};
      if (deliver_all || i + 1 == pes.size()) hop.tx |= bit(kRamp);
      h.push_back(hop);
      prev = pes[i];
    }
    return add(name, std::move(h));
  }
};

// The straight run of PEs from a to b, both included.
std::vector<std::pair<int, int>> run(std::pair<int, int> a, std::pair<int, int> b) {
  std::vector<std::pair<int, int>> v;
  const int dx = (b.first > a.first) - (b.first < a.first), dy = (b.second > a.second) - (b.second < a.second);
  for (auto p = a;; p = {p.first + dx, p.second + dy}) {
    v.push_back(p);
    if (p == b) break;
  }
  return v;
}

// A path entering at (0, row) from the West edge, along `row` to x, then along column x to y.
// The last PE takes it onto its ramp (to_edge = false), or the reverse path leaving at the West edge.
std::vector<Hop> edge_path(int row, int x, int y, bool to_edge) {
  std::vector<std::pair<int, int>> pts = run({0, row}, {x, row});
  if (y != row) {
    auto col = run({x, row}, {x, y});
    pts.insert(pts.end(), col.begin() + 1, col.end());
  }
  if (to_edge) std::reverse(pts.begin(), pts.end());
  std::vector<Hop> h;
  for (size_t i = 0; i < pts.size(); ++i) {
    Hop hop{pts[i].first, pts[i].second, 0, 0};
    if (i == 0) hop.rx = to_edge ? bit(kRamp) : bit(kWest);
    else hop.rx = bit(opposite(dir_to(pts[i - 1].first, pts[i - 1].second, pts[i].first, pts[i].second)));
    if (i + 1 == pts.size()) hop.tx = to_edge ? bit(kWest) : bit(kRamp);
    else hop.tx = bit(dir_to(pts[i].first, pts[i].second, pts[i + 1].first, pts[i + 1].second));
    h.push_back(hop);
  }
  return h;
}

}  // namespace

namespace {

// Copy r's nets: the plan's layers shifted to the copy's band, on its channels.
CopyNets route_copy(Builder& b, const Plan& base, int r, const HwConfig& hw) {
  Plan plan = base;
  for (LayerPlan& l : plan.layers) l.y0 += r * base.band;
  for (int& c : plan.row_channel) c = base.channel(c, r);
  plan.loss_channel = base.channel(base.loss_channel, r);
  CopyNets out;
  const int L = static_cast<int>(plan.layers.size());
  auto ch_row = [&](int c) { return hw.io.channel_row(hw.fabric.height, c); };
  out.layers.resize(static_cast<size_t>(L));
  const std::string pre = r > 0 ? "r" + std::to_string(r) + "." : "";
  for (int l = 0; l < L; ++l) {
    const LayerPlan& lp = plan.layers[static_cast<size_t>(l)];
    LayerNets& n = out.layers[static_cast<size_t>(l)];
    const std::string tag = pre + "L" + std::to_string(l);
    // Inputs: from the previous layer's roots, or (layer 0) from the West channels along column 0.
    for (int a = 0; a < lp.p_in; ++a) {
      std::vector<std::pair<int, int>> tiles;
      for (int bb = 0; bb < lp.p_out; ++bb) tiles.push_back(lp.tile_xy(a, bb));
      if (l > 0) {
        n.xin.push_back(b.line(tag + ".x" + std::to_string(a), plan.layers[static_cast<size_t>(l) - 1].root_xy(a), tiles, true));
        continue;
      }
      const int row = ch_row(plan.row_channel[static_cast<size_t>(a)]), ty = tiles[0].second;
      std::vector<Hop> h;
      for (auto p : run({0, row}, {0, ty})) {
        Hop hop{0, p.second, 0, 0};
        hop.rx = p.second == row ? bit(kWest) : bit(p.second > row ? kNorth : kSouth);
        hop.tx = p.second == ty ? bit(kEast) : bit(ty > row ? kSouth : kNorth);
        h.push_back(hop);
      }
      for (size_t i = 0; i < tiles.size(); ++i) {
        h.push_back(Hop{tiles[i].first, tiles[i].second, bit(kWest),
                        static_cast<uint8_t>(bit(kRamp) | (i + 1 < tiles.size() ? bit(kEast) : 0))});
      }
      n.xin.push_back(b.add(tag + ".x" + std::to_string(a), std::move(h)));
    }
    n.fchain.assign(static_cast<size_t>(lp.p_in), std::vector<int>(static_cast<size_t>(lp.p_out), -1));
    n.dxchain.assign(static_cast<size_t>(lp.p_in), std::vector<int>(static_cast<size_t>(lp.p_out), -1));
    for (int a = 0; a < lp.p_in; ++a) {
      for (int bb = 0; bb < lp.p_out; ++bb) {
        const auto to = a + 1 < lp.p_in ? lp.tile_xy(a + 1, bb) : lp.root_xy(bb);
        n.fchain[static_cast<size_t>(a)][static_cast<size_t>(bb)] =
            b.line(tag + ".f" + std::to_string(a) + "." + std::to_string(bb), lp.tile_xy(a, bb), {to}, true);
        if (lp.dx) {
          const auto dto = bb > 0 ? lp.tile_xy(a, bb - 1) : plan.layers[static_cast<size_t>(l) - 1].root_xy(a);
          n.dxchain[static_cast<size_t>(a)][static_cast<size_t>(bb)] =
              b.line(tag + ".dx" + std::to_string(a) + "." + std::to_string(bb), lp.tile_xy(a, bb), {dto}, true);
        }
      }
    }
    for (int bb = 0; bb < lp.p_out; ++bb) {
      std::vector<std::pair<int, int>> tiles;
      for (int a = lp.p_in - 1; a >= 0; --a) tiles.push_back(lp.tile_xy(a, bb));
      n.dy.push_back(b.line(tag + ".dy" + std::to_string(bb), lp.root_xy(bb), tiles, true));
    }
  }
  // Residual connections: from each source root to the target root of the same slice, and the
  // sum's gradient back the same way. The roots of a slice lie on a line (a row or a column), so
  // a path that runs along such a line would share its routers with every other slice's; and a
  // net's color must be free at every router it crosses. Each slice takes, of the paths with one
  // or two turns (through any row or column between the two roots), the one that meets the
  // fewest nets on its way (then the shortest), and its routers count it twice (both
  // directions) for the slices after it.
  std::map<std::pair<int, int>, int> load;
  for (const Net& net : b.r.nets) {
    for (const Hop& h : net.hops) ++load[{h.x, h.y}];
  }
  auto path = [&](std::pair<int, int> from, std::pair<int, int> to, bool x_first, int mid) {
    std::vector<std::pair<int, int>> pts{from};
    auto go = [&](std::pair<int, int> p) {
      auto seg = run(pts.back(), p);
      pts.insert(pts.end(), seg.begin() + 1, seg.end());
    };
    if (x_first) {  // along the row to column mid, down or up to the target's row, along it
      go({mid, from.second});
      go({mid, to.second});
      go(to);
    } else {  // along the column to row mid, across to the target's column, along it
      go({from.first, mid});
      go({to.first, mid});
      go(to);
    }
    return pts;
  };
  // Every slice's two roots carry its two nets whatever path it takes: counted from the start, so
  // that no earlier slice's path takes them for free.
  for (const LayerPlan& lp : plan.layers) {
    if (lp.residual < 1) continue;
    for (int bb = 0; bb < lp.p_out; ++bb) {
      load[plan.layers[static_cast<size_t>(lp.residual) - 1].root_xy(bb)] += 2;
      load[lp.root_xy(bb)] += 2;
    }
  }
  for (int l = 0; l < L; ++l) {
    const LayerPlan& lp = plan.layers[static_cast<size_t>(l)];
    if (lp.residual < 1) continue;
    const LayerPlan& src = plan.layers[static_cast<size_t>(lp.residual) - 1];
    LayerNets& n = out.layers[static_cast<size_t>(l)];
    for (int bb = 0; bb < lp.p_out; ++bb) {
      const auto from = src.root_xy(bb), to = lp.root_xy(bb);
      load[from] -= 2;
      load[to] -= 2;
      std::vector<std::pair<int, int>> best;
      std::pair<int, size_t> best_cost{0, 0};
      for (const bool x_first : {false, true}) {
        const int lo = x_first ? std::min(from.first, to.first) : std::min(from.second, to.second);
        const int hi = x_first ? std::max(from.first, to.first) : std::max(from.second, to.second);
        for (int mid = lo; mid <= hi; ++mid) {
          auto pts = path(from, to, x_first, mid);
          // The nets it meets on the way: a net's color must be free at every router it crosses.
          int met = 0;
          for (const auto& p : pts) met += load[p];
          const std::pair<int, size_t> cost{met, pts.size()};
          if (best.empty() || cost < best_cost) {
            best = std::move(pts);
            best_cost = cost;
          }
        }
      }
      for (const auto& p : best) load[p] += 2;
      const std::string tag = pre + "L" + std::to_string(l) + ".skip" + std::to_string(bb);
      n.skip.push_back(b.line(tag, from, std::vector<std::pair<int, int>>(best.begin() + 1, best.end()), false));
      std::reverse(best.begin(), best.end());
      n.skip_grad.push_back(b.line(tag + "g", to, std::vector<std::pair<int, int>>(best.begin() + 1, best.end()), false));
    }
  }
  const auto lr = plan.layers.back().root_xy(0);
  const int lrow = ch_row(plan.loss_channel);
  out.label = b.add(pre + "label", edge_path(lrow, lr.first, lr.second, false));
  out.loss = b.add(pre + "loss", edge_path(lrow, lr.first, lr.second, true));
  return out;
}

}  // namespace

Routing route_plan(const Plan& plan, const HwConfig& hw) {
  Builder b;
  for (int r = 0; r < plan.replicas; ++r) b.r.copies.push_back(route_copy(b, plan, r, hw));
  b.r.layers = b.r.copies[0].layers;
  b.r.label = b.r.copies[0].label;
  b.r.loss = b.r.copies[0].loss;
  if (plan.replicas > 1) {
    // The gradient sum, per column: a chain through every copy's weight PEs. The copies south
    // of the middle one m send their stream north link by link (each PE on the way adds its
    // part), those north of it south; within m both ways. The sums then leave m's northernmost
    // PE in one multicast north past every PE of copies 0..m-1, and its southernmost PE in one
    // south past copies m+1.., each PE taking its part at its ramp.
    const int R = plan.replicas, m = R / 2;
    for (const auto& col : weight_columns(plan)) {
      const int x = col.first;  // (named, not bound: the lambda below captures them)
      const std::vector<int>& rows = col.second;
      const std::string tag = "sum" + std::to_string(x) + ".";
      std::vector<std::pair<int, int>> chain;  // south to north: the last copy's rows first
      for (int r = R - 1; r >= 0; --r) {
        for (int y : rows) chain.push_back(plan.at({x, y}, r));
      }
      const size_t k = rows.size();
      for (size_t i = 0; i + 1 < chain.size(); ++i) {
        // The copies of the link's south and north ends.
        const int lo = R - 1 - static_cast<int>(i / k), hi = R - 1 - static_cast<int>((i + 1) / k);
        if (lo > m || (lo == m && hi == m)) {
          const int n = b.line(tag + "n" + std::to_string(i), chain[i], run({x, chain[i].second - 1}, chain[i + 1]), false);
          b.r.sum[chain[i]].nout = n;
          b.r.sum[chain[i + 1]].nin = n;
        }
        if (hi < m || (lo == m && hi == m)) {
          const int sn = b.line(tag + "s" + std::to_string(i), chain[i + 1], run({x, chain[i + 1].second + 1}, chain[i]), false);
          b.r.sum[chain[i + 1]].sout = sn;
          b.r.sum[chain[i]].sin = sn;
        }
      }
      // The multicasts: from m's end PE past the half's routers, into every weight PE's ramp.
      auto multicast = [&](bool north) {
        const auto src = plan.at({x, north ? rows.back() : rows.front()}, m);
        const auto last = plan.at({x, north ? rows.back() : rows.front()}, north ? 0 : R - 1);
        std::vector<Hop> h{Hop{x, src.second, bit(kRamp), bit(north ? kNorth : kSouth)}};
        for (const auto& p : run({x, src.second + (north ? -1 : 1)}, last)) {
          const bool takes = std::find(chain.begin(), chain.end(), p) != chain.end();
          Hop hop{x, p.second, bit(north ? kSouth : kNorth), static_cast<uint8_t>(takes ? bit(kRamp) : 0)};
          if (p != last) hop.tx |= bit(north ? kNorth : kSouth);
          h.push_back(hop);
          if (takes) b.r.sum[p].dist = static_cast<int>(b.r.nets.size());
        }
        const int id = b.add(tag + (north ? "dn" : "ds"), std::move(h));
        (north ? b.r.sum[src].nout : b.r.sum[src].sout) = id;
      };
      if (m > 0) multicast(true);
      if (R - 1 > m) multicast(false);
    }
  }

  // Greedy colors: each net takes the lowest color free at every router it crosses.
  std::map<std::pair<int, int>, uint32_t> used;
  for (Net& net : b.r.nets) {
    uint32_t busy = 0;
    for (const Hop& h : net.hops) busy |= used[{h.x, h.y}];
    int c = 0;
    while (c < hw.router.colors && ((busy >> c) & 1)) ++c;
    if (c >= hw.router.colors) {
      // Name the most crowded PE on the path.
      const Hop* worst = &net.hops[0];
      for (const Hop& h : net.hops) {
        if (__builtin_popcount(used[{h.x, h.y}]) > __builtin_popcount(used[{worst->x, worst->y}])) worst = &h;
      }
      throw CompileError("routing needs more than the fabric's " + std::to_string(hw.router.colors) +
                         " colors (router.colors): net '" + net.name + "' finds none free at PE (" +
                         std::to_string(worst->x) + ", " + std::to_string(worst->y) + ")");
    }
    net.color = c;
    b.r.colors_used = std::max(b.r.colors_used, c + 1);
    for (const Hop& h : net.hops) used[{h.x, h.y}] |= 1u << c;
  }
  return std::move(b.r);
}

}  // namespace wafersim::compiler
