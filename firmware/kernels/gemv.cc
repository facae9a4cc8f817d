// GEMV tiled over a PE rectangle: x multicast down the columns, one data task per x wavelet
// (y_tile += A[:, k] * x_k), partial sums reduced along the rows (docs/kernels.md).
#include "firmware/kernels/kernels.h"

#include "hw/config.h"

namespace wafersim::kernels {
namespace {

std::string fmt_name(NumFormat f) { return format_name(f); }

// The tile program of column position i (rows share it: only routes differ between rows).
std::string tile_source(const GemvParams& p, const LinePlan& plan, int i, uint32_t mt, uint32_t nt) {
  const int cx = p.color_base;
  const std::string F = fmt_name(p.fmt), ACC = fmt_name(p.acc);
  const int eb = p.fmt == NumFormat::kF32 ? 4 : 2;
  PeAsm a;
  a.inq(cx);  // queue 0, the deepest
  a.task("0, init, active");
  a.task("1, reduce");
  a.task("2, onx, color=" + std::to_string(cx));
  // y first, then A half a bank row (8 bytes mod 16) further on, so that vaxpy's two reads (A's
  // column and y, advancing in step) never share a bank with the default 8 banks.
  const uint32_t ybytes = mt * (p.acc == NumFormat::kF32 ? 4 : 2), pad = (8 + 16 - ybytes % 16) % 16;
  a.data(".space y, " + ACC + ", " + std::to_string(mt));
  if (pad) a.data(".space pad, i16, " + std::to_string(pad / 2));
  a.data(".space A, " + F + ", " + std::to_string(mt * nt));
  a << "init:";
  const std::string dA = a.mem("A", mt);  // column k of the tile; advances per x element
  const std::string dY = a.mem("y", mt);
  a << "li r0, 0" << "li r1, 0" << "li r2, " + std::to_string(nt) << "li r3, " + std::to_string(p.reps)
    << "li r5, A" << "vfill." + ACC + " " + dY + ", r0" << "exit";
  a << "onx:";  // r15 = x_k (fp32 bits)
  a << "vaxpy." + F + "." + ACC + " " + dY + ", " + dA + ", r15" << "daddb " + dA + ", " + std::to_string(mt * eb)
    << "addi r1, r1, 1" << "bne r1, r2, onx_done" << "li r1, 0" << "dbase " + dA + ", r5"
    << "block 2" << "activate 1";  // hold the next product's x until this y has left
  a << "onx_done:";
  a << "exit";
  a << "reduce:";
  emit_line_reduce(a, plan, i, mt, ACC, dY);
  a << "addi r3, r3, -1" << "beq r3, r0, finish" << "vfill." + ACC + " " + dY + ", r0" << "unblock 2" << "exit";
  a << "finish:";
  a << "halt";
  return a.text();
}

std::string feeder_source(const GemvParams& p, uint32_t nt) {
  PeAsm a;
  a.task("0, main, active");
  a.data(".space x, fp32, " + std::to_string(nt));
  a << "main:" << "li r0, 0" << "li r1, " + std::to_string(p.reps);
  const std::string out = a.fout(p.color_base, nt);
  const std::string x = a.mem("x", nt);
  a << "loop:" << "vmov.fp32 " + out + ", " + x << "addi r1, r1, -1" << "bne r1, r0, loop" << "halt";
  return a.text();
}

}  // namespace

void add_gemv(FabricProgram& prog, const GemvParams& p, const std::vector<float>& a, const std::vector<float>& x,
              const AsmTarget& t) {
  const Rect& r = p.rect;
  if (r.w < 1 || r.h < 1 || r.x0 < 0 || r.y0 < 1) {
    throw ConfigError("gemv: the rectangle needs w, h >= 1 and a row above it for the x feeders (y0 >= 1)");
  }
  if (p.m == 0 || p.n == 0 || p.m % static_cast<uint32_t>(r.h) || p.n % static_cast<uint32_t>(r.w)) {
    throw ConfigError("gemv: " + std::to_string(p.m) + " x " + std::to_string(p.n) + " does not tile evenly over " +
                      std::to_string(r.w) + " x " + std::to_string(r.h) + " PEs (m must divide by h, n by w)");
  }
  if (p.acc != NumFormat::kF32 && p.acc != p.fmt) throw ConfigError("gemv: acc must be fp32 or the matrix format");
  if (p.reps < 1) throw ConfigError("gemv: reps must be at least 1");
  if (a.size() != size_t{p.m} * p.n || x.size() != p.n) throw ConfigError("gemv: A or x has the wrong size");
  const uint32_t mt = p.m / static_cast<uint32_t>(r.h), nt = p.n / static_cast<uint32_t>(r.w);
  const int eb = p.fmt == NumFormat::kF32 ? 4 : 2, ab = p.acc == NumFormat::kF32 ? 4 : 2;
  const uint64_t tile_bytes = uint64_t{mt} * nt * static_cast<uint64_t>(eb) + uint64_t{mt} * static_cast<uint64_t>(ab);
  if (tile_bytes + 512 > t.sram_bytes) {
    throw ConfigError("gemv: a " + std::to_string(mt) + " x " + std::to_string(nt) + " " + format_name(p.fmt) +
                      " tile needs " + std::to_string(tile_bytes) + " bytes of SRAM per PE plus code; the core has " +
                      std::to_string(t.sram_bytes) + ": use more PEs");
  }
  if (p.algo == ReduceAlgo::kBinomial && p.reps > 1) {
    throw ConfigError("gemv: the binomial reduction runs once (its routers' switches hold): use reps 1 or another algo");
  }
  const LinePlan plan = plan_line_reduce(r.w, r.w - 1, p.algo, p.color_base + 1);
  need_colors("gemv", p.color_base, 1 + plan.colors, t);

  RouteTable routes;
  const int feeder = intern_image(prog, "gemv_feeder", feeder_source(p, nt), t);
  for (int i = 0; i < r.w; ++i) {
    const int col = intern_image(prog, "gemv_tile", tile_source(p, plan, i, mt, nt), t);
    const int fx = r.x0 + i, fy = r.y0 - 1;
    prog.place(fx, fy, feeder);
    std::vector<float> seg(x.begin() + static_cast<std::ptrdiff_t>(i * nt), x.begin() + static_cast<std::ptrdiff_t>((i + 1) * nt));
    for (float& v : seg) v = round_to(p.fmt, v, t.cb16_bias);
    prog.set_f32(fx, fy, "x", seg);
    routes.add(fx, fy, p.color_base, port_bit(kRamp), port_bit(kSouth));
    for (int j = 0; j < r.h; ++j) {
      const int px = r.x0 + i, py = r.y0 + j;
      prog.place(px, py, col);
      routes.add(px, py, p.color_base, port_bit(kNorth), port_bit(kRamp) | (j + 1 < r.h ? port_bit(kSouth) : 0));
      std::vector<float> tile(size_t{mt} * nt);  // column-major: A[:, k] contiguous
      for (uint32_t k = 0; k < nt; ++k) {
        for (uint32_t row = 0; row < mt; ++row) {
          tile[size_t{k} * mt + row] = a[(static_cast<size_t>(j) * mt + row) * p.n + static_cast<size_t>(i) * nt + k];
        }
      }
      prog.set_data(px, py, "A", encode(p.fmt, tile, t.cb16_bias));
    }
  }
  for (int j = 0; j < r.h; ++j) {
    std::vector<std::pair<int, int>> xy;
    for (int i = 0; i < r.w; ++i) xy.emplace_back(r.x0 + i, r.y0 + j);
    route_line_reduce(routes, plan, xy);
    prog.output("y", r.x0 + r.w - 1, r.y0 + j, "y", mt);
  }
  routes.emit(prog);
}

}  // namespace wafersim::kernels
