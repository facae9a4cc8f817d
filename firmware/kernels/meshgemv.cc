// MeshGEMV (He et al., "WaferLLM", OSDI 2025; its WSE-2 code MeshInfra/WaferLLM): out = x W
// with W tiled over a mesh, x resident, a local GEMV per PE, a two-phase reduction down each
// column and a broadcast back up and down it (docs/kernels.md, docs/validation.md).
#include "firmware/kernels/kernels.h"

#include <cmath>
#include <functional>

#include "hw/config.h"

namespace wafersim::kernels {

void add_meshgemv(FabricProgram& prog, const MeshGemvParams& p, const std::vector<float>& w,
                  const std::vector<float>& x, const AsmTarget& t) {
  const Rect& r = p.rect;
  if (r.w < 1 || r.h < 1 || r.x0 < 0 || r.y0 < 0) throw ConfigError("meshgemv: bad rectangle");
  if (p.m == 0 || p.n == 0 || p.m % static_cast<uint32_t>(r.h) || p.n % static_cast<uint32_t>(r.w)) {
    throw ConfigError("meshgemv: [1, " + std::to_string(p.m) + "] x [" + std::to_string(p.m) + ", " +
                      std::to_string(p.n) + "] does not tile evenly over " + std::to_string(r.w) + " x " +
                      std::to_string(r.h) + " PEs (m must divide by h, n by w)");
  }
  if (w.size() != size_t{p.m} * p.n || x.size() != p.m) throw ConfigError("meshgemv: W or x has the wrong size");
  if (p.reps < 1 || p.warmup > (1u << 30) || p.reps > (1u << 30)) throw ConfigError("meshgemv: reps must be at least 1");
  const uint32_t mt = p.m / static_cast<uint32_t>(r.h), nt = p.n / static_cast<uint32_t>(r.w);
  if (nt > 65535 || mt > 65535) throw ConfigError("meshgemv: a tile's row is longer than one descriptor");
  const int eb = p.fmt == NumFormat::kF32 ? 4 : 2;
  const uint64_t bytes = uint64_t{mt} * nt * static_cast<uint64_t>(eb) + uint64_t{mt} * 4 + uint64_t{nt} * static_cast<uint64_t>(eb) + 64;
  if (bytes + 512 > t.sram_bytes) {
    throw ConfigError("meshgemv: a " + std::to_string(mt) + " x " + std::to_string(nt) + " " + format_name(p.fmt) +
                      " tile with its x segment needs " + std::to_string(bytes) + " bytes of SRAM per PE plus code; the core has " +
                      std::to_string(t.sram_bytes) + " (core.sram_kb): use more PEs");
  }
  // Down each column, toward the middle row: rows reduce in groups, then the groups' leaders.
  const int root = r.h / 2;
  const LinePlan plan = plan_line_reduce(r.h, root, ReduceAlgo::kTwoPhase, p.color_base, p.group);
  const int bcast = p.color_base + plan.colors;
  need_colors("meshgemv", p.color_base, plan.colors + 1, t);
  const std::string F = format_name(p.fmt), NT = std::to_string(nt);
  RouteTable routes;
  for (int j = 0; j < r.h; ++j) {
    PeAsm a;
    a.task("0, main, active");
    a.data(".space x, fp32, " + std::to_string(mt));
    a.data(".align 16");
    a.data(".space W, " + F + ", " + std::to_string(uint64_t{mt} * nt));
    // The result 8 bytes (mod 16) from W's rows, so that vfmacs' two reads never share a bank
    // when a row is a whole number of 16-byte lines.
    a.data(".align 16");
    a.data(".space gap, i32, 2");
    a.data(".space res, " + F + ", " + NT);
    a.data(".align 4");
    a.data(".space t, i32, 2");
    a << "main:" << "li r0, 0" << "li r9, " + std::to_string(p.warmup + p.reps) << "li r8, " + std::to_string(p.reps);
    // Each repeat: the local GEMV, the column's reduction and broadcast; the counter is read as
    // the first timed repeat starts and after the last one.
    a << "again:";
    if (p.timed) a << "bne r9, r8, untimed" << "tsc r13" << "untimed:";
    const std::string dW = a.mem("W", nt), dR = a.mem("res", nt);
    a << "li r6, x" << "li r1, " + std::to_string(mt);
    a << "vfill." + F + " " + dR + ", r0";
    a << "row:" << "ld32 r5, [r6]" << "vfmacs." + F + " " + dR + ", " + dR + ", " + dW + ", r5"
      << "daddb " + dW + ", " + std::to_string(uint64_t{nt} * static_cast<uint64_t>(eb)) << "addi r6, r6, 4"
      << "addi r1, r1, -1" << "bne r1, r0, row";
    emit_line_reduce(a, plan, j, nt, F, dR);
    if (r.h > 1) {
      if (j == root) a << "vmov." + F + " " + a.fout(bcast, nt) + ", " + dR;
      else a << "vmov." + F + " " + dR + ", " + a.fin(bcast, nt);
    }
    a << "addi r9, r9, -1" << "bne r9, r0, again";
    if (p.timed) a << "tsc r14" << "li r12, t" << "st32 [r12], r13" << "st32 [r12+4], r14";
    a << "halt";
    const int img = intern_image(prog, "meshgemv", a.text(), t);
    for (int i = 0; i < r.w; ++i) {
      const int px = r.x0 + i, py = r.y0 + j;
      prog.place(px, py, img);
      std::vector<float> tile(size_t{mt} * nt);  // row-major: W[k, :] contiguous
      for (uint32_t k = 0; k < mt; ++k) {
        for (uint32_t c = 0; c < nt; ++c) {
          tile[size_t{k} * nt + c] = w[(static_cast<size_t>(j) * mt + k) * p.n + static_cast<size_t>(i) * nt + c];
        }
      }
      prog.set_data(px, py, "W", encode(p.fmt, tile, t.cb16_bias));
      std::vector<float> seg(x.begin() + static_cast<std::ptrdiff_t>(size_t{mt} * static_cast<size_t>(j)),
                             x.begin() + static_cast<std::ptrdiff_t>(size_t{mt} * static_cast<size_t>(j + 1)));
      for (float& v : seg) v = round_to(p.fmt, v, t.cb16_bias);  // x in the matrix format, held as fp32
      prog.set_f32(px, py, "x", seg);
      const std::string xy = std::to_string(px) + "." + std::to_string(py);
      prog.output("out." + xy, px, py, "res");
      if (p.timed) prog.output("t." + xy, px, py, "t");
      // The broadcast: from the root up and down the column, each PE taking it and passing it on.
      if (r.h > 1) {
        uint8_t rx, tx = 0;
        if (j == root) rx = port_bit(kRamp);
        else rx = port_bit(j < root ? kSouth : kNorth);
        if (j != root) tx |= port_bit(kRamp);
        if (j <= root && j > 0) tx |= port_bit(kNorth);
        if (j >= root && j + 1 < r.h) tx |= port_bit(kSouth);
        routes.add(px, py, bcast, rx, tx);
      }
    }
  }
  for (int i = 0; i < r.w; ++i) {
    std::vector<std::pair<int, int>> xy;
    for (int j = 0; j < r.h; ++j) xy.emplace_back(r.x0 + i, r.y0 + j);
    route_line_reduce(routes, plan, xy);
  }
  routes.emit(prog);
}

std::vector<float> meshgemv_reference(const MeshGemvParams& p, const std::vector<float>& w, const std::vector<float>& x,
                                      int cb16_bias) {
  const int ph = p.rect.h;
  const uint32_t mt = p.m / static_cast<uint32_t>(ph);
  auto rnd = [&](float v) { return round_to(p.fmt, v, cb16_bias); };
  const LinePlan plan = plan_line_reduce(ph, ph / 2, ReduceAlgo::kTwoPhase, 0, p.group);
  std::vector<float> out(p.n), part(static_cast<size_t>(ph));
  for (uint32_t c = 0; c < p.n; ++c) {
    for (int j = 0; j < ph; ++j) {
      float acc = 0;
      for (uint32_t k = 0; k < mt; ++k) {
        const size_t row = size_t{mt} * static_cast<size_t>(j) + k;
        acc = rnd(std::fma(w[row * p.n + c], x[row], acc));
      }
      part[static_cast<size_t>(j)] = acc;
    }
    std::function<float(int)> total = [&](int pos) {
      float acc = part[static_cast<size_t>(pos)];
      for (int kid : plan.children[static_cast<size_t>(pos)]) acc = rnd(total(kid) + acc);
      return acc;
    };
    out[c] = total(ph / 2);
  }
  return out;
}

}  // namespace wafersim::kernels
