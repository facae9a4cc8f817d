// Reduce and allreduce over a PE rectangle (rows toward the root column, then that column
// toward the root; allreduce multicasts the sum back), and row/column broadcast.
#include "firmware/kernels/kernels.h"

#include "hw/config.h"

namespace wafersim::kernels {
namespace {

void check_rect(const char* kernel, const Rect& r) {
  if (r.w < 1 || r.h < 1 || r.x0 < 0 || r.y0 < 0) {
    throw ConfigError(std::string(kernel) + ": the rectangle needs w, h >= 1 at non-negative coordinates");
  }
}

}  // namespace

int add_reduce(FabricProgram& prog, const ReduceParams& p, const std::vector<std::vector<float>>& data,
               const AsmTarget& t) {
  const Rect& r = p.rect;
  check_rect("reduce", r);
  const int rx = p.root_x < 0 ? r.x0 + r.w / 2 : p.root_x, ry = p.root_y < 0 ? r.y0 + r.h / 2 : p.root_y;
  if (rx < r.x0 || rx >= r.x0 + r.w || ry < r.y0 || ry >= r.y0 + r.h) throw ConfigError("reduce: the root is outside the rectangle");
  if (p.len < 1) throw ConfigError("reduce: len must be at least 1");
  if (data.size() != static_cast<size_t>(r.w) * r.h) throw ConfigError("reduce: need one vector per PE");
  const LinePlan row = plan_line_reduce(r.w, rx - r.x0, p.algo, p.color_base, p.group);
  const LinePlan col = plan_line_reduce(r.h, ry - r.y0, p.algo, p.color_base + row.colors, p.group);
  const int bcast = p.color_base + row.colors + col.colors;
  const int colors = row.colors + col.colors + (p.all ? 1 : 0);
  need_colors(p.all ? "allreduce" : "reduce", p.color_base, colors, t);
  const std::string F = format_name(p.fmt), L = std::to_string(p.len);

  RouteTable routes;
  for (int y = r.y0; y < r.y0 + r.h; ++y) {
    std::vector<std::pair<int, int>> xy;
    for (int x = r.x0; x < r.x0 + r.w; ++x) xy.emplace_back(x, y);
    route_line_reduce(routes, row, xy);
  }
  {
    std::vector<std::pair<int, int>> xy;
    for (int y = r.y0; y < r.y0 + r.h; ++y) xy.emplace_back(rx, y);
    route_line_reduce(routes, col, xy);
  }
  if (p.all) {
    // Multicast tree: up and down the root column, and from each of its PEs west and east.
    for (int y = r.y0; y < r.y0 + r.h; ++y) {
      for (int x = r.x0; x < r.x0 + r.w; ++x) {
        uint8_t rxp, tx = 0;
        if (x == rx && y == ry) rxp = port_bit(kRamp);
        else if (x == rx) rxp = port_bit(y < ry ? kSouth : kNorth);
        else rxp = port_bit(x < rx ? kEast : kWest);
        if (!(x == rx && y == ry)) tx |= port_bit(kRamp);
        if (x == rx && y <= ry && y > r.y0) tx |= port_bit(kNorth);
        if (x == rx && y >= ry && y < r.y0 + r.h - 1) tx |= port_bit(kSouth);
        if (x <= rx && x > r.x0) tx |= port_bit(kWest);
        if (x >= rx && x < r.x0 + r.w - 1) tx |= port_bit(kEast);
        if (tx) routes.add(x, y, bcast, rxp, tx);
      }
    }
  }
  for (int y = r.y0; y < r.y0 + r.h; ++y) {
    for (int x = r.x0; x < r.x0 + r.w; ++x) {
      const bool root = x == rx && y == ry;
      PeAsm a;
      a.task("0, main, active");
      a.data(".space v, " + F + ", " + L);
      if (!p.in_place) a.data(".space sum, " + F + ", " + L);
      a << "main:";
      const std::string dv = a.mem("v", p.len), ds = p.in_place ? dv : a.mem("sum", p.len);
      if (!p.in_place) a << "vmov." + F + " " + ds + ", " + dv;
      if (p.timed) {
        a.data(".space t, i32, 2");
        a << "tsc r13";
      }
      emit_line_reduce(a, row, x - r.x0, p.len, F, ds);
      if (x == rx) emit_line_reduce(a, col, y - r.y0, p.len, F, ds);
      if (p.all && (r.w > 1 || r.h > 1)) {
        if (root) a << "vmov." + F + " " + a.fout(bcast, p.len) + ", " + ds;
        else a << "vmov." + F + " " + ds + ", " + a.fin(bcast, p.len);
      }
      if (p.timed) a << "tsc r14" << "li r12, t" << "st32 [r12], r13" << "st32 [r12+4], r14";
      a << "halt";
      prog.place(x, y, intern_image(prog, p.all ? "allreduce" : "reduce", a.text(), t));
      const auto& v = data[static_cast<size_t>(y - r.y0) * r.w + (x - r.x0)];
      if (v.size() != p.len) throw ConfigError("reduce: every PE's vector needs len elements");
      prog.set_data(x, y, "v", encode(p.fmt, v, t.cb16_bias));
      const std::string sum = p.in_place ? "v" : "sum";
      if (p.timed) prog.output("t." + std::to_string(x) + "." + std::to_string(y), x, y, "t");
      if (root) prog.output("sum", x, y, sum);
      else if (p.all) prog.output("sum." + std::to_string(x) + "." + std::to_string(y), x, y, sum);
    }
  }
  routes.emit(prog);
  return colors;
}

void add_broadcast(FabricProgram& prog, const BroadcastParams& p, const std::vector<std::vector<float>>& data,
                   const AsmTarget& t) {
  const Rect& r = p.rect;
  check_rect("broadcast", r);
  need_colors("broadcast", p.color, 1, t);
  const int lines = p.columns ? r.w : r.h, n = p.columns ? r.h : r.w;
  if (data.size() != static_cast<size_t>(lines)) throw ConfigError("broadcast: need one vector per line");
  if (n < 2) throw ConfigError("broadcast: each line needs at least 2 PEs");
  const int dir = p.columns ? kSouth : kEast;
  const std::string F = format_name(p.fmt), L = std::to_string(p.len);
  RouteTable routes;
  for (int l = 0; l < lines; ++l) {
    for (int k = 0; k < n; ++k) {
      const int x = p.columns ? r.x0 + l : r.x0 + k, y = p.columns ? r.y0 + k : r.y0 + l;
      PeAsm a;
      a.task("0, main, active");
      a.data(".space buf, " + F + ", " + L);
      a << "main:";
      const std::string db = a.mem("buf", p.len);
      if (k == 0) {
        a << "vmov." + F + " " + a.fout(p.color, p.len) + ", " + db;
        routes.add(x, y, p.color, port_bit(kRamp), port_bit(dir));
      } else {
        a << "vmov." + F + " " + db + ", " + a.fin(p.color, p.len);
        routes.add(x, y, p.color, port_bit(opposite(dir)), port_bit(kRamp) | (k + 1 < n ? port_bit(dir) : 0));
      }
      a << "halt";
      prog.place(x, y, intern_image(prog, "bcast", a.text(), t));
      if (k == 0) {
        if (data[static_cast<size_t>(l)].size() != p.len) throw ConfigError("broadcast: every vector needs len elements");
        prog.set_data(x, y, "buf", encode(p.fmt, data[static_cast<size_t>(l)], t.cb16_bias));
      }
      prog.output(std::string(p.columns ? "bcast.col" : "bcast.row") + std::to_string(l), x, y, "buf");
    }
  }
  routes.emit(prog);
}

}  // namespace wafersim::kernels
