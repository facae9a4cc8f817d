// The 25-point star stencil of Jacquelin, Araya-Polo and Meng ("Massively scalable stencil
// algorithm", SC22, arXiv 2204.03775) for the acoustic wave equation: X and Y over the PE grid,
// each PE's whole Z column in its SRAM, X/Y neighbours exchanged by localized broadcast patterns
// whose routers change switch positions at control wavelets (docs/kernels.md, docs/validation.md).
#include "firmware/kernels/kernels.h"

#include <cmath>

#include "hw/config.h"

namespace wafersim::kernels {

namespace {

constexpr int kDirs = 4;  // broadcast patterns: eastbound, westbound, southbound, northbound
constexpr int kReach = 4;  // radius: a root sends to the next 4 PEs of its pattern

// A pattern's travel along the line of PEs it runs on: position q counts from the line's
// upstream end, so that in step s the roots are the positions q = s (mod 5).
struct Travel {
  int q, len;              // position and line length
  Port in, out;            // the port data arrives on and the one it leaves by
};

Travel travel(int d, int i, int j, const Rect& r) {
  switch (d) {
    case 0: return {i, r.w, kWest, kEast};
    case 1: return {r.w - 1 - i, r.w, kEast, kWest};
    case 2: return {j, r.h, kNorth, kSouth};
    default: return {r.h - 1 - j, r.h, kSouth, kNorth};
  }
}

// The role of position q in step s: -1 none, 0 root, k = 1..4 receiving from the root k
// positions upstream.
int role(int q, int s) {
  const int k = ((q - s) % (kReach + 1) + kReach + 1) % (kReach + 1);
  return q - k >= 0 ? k : -1;
}

uint32_t blocks_for(const StencilParams& p, uint32_t b) { return (p.nz + b - 1) / b; }

// Data bytes per PE with blocks of b cells: two time levels of nz + 8 cells, 4 patterns x 5
// blocks received and the accumulator, a few words.
uint64_t data_bytes(const StencilParams& p, uint32_t b) {
  return uint64_t{2} * (p.nz + 2 * kReach) * 4 + uint64_t{21} * b * 4 + 64;
}

}  // namespace

StencilCoeffs StencilCoeffs::wave(float r) {
  // The eighth-order central second difference (radius 4), times r = (V dt / h)^2 on each axis.
  const double c[5] = {-205.0 / 72, 8.0 / 5, -1.0 / 5, 8.0 / 315, -1.0 / 560};
  StencilCoeffs k;
  k.self = static_cast<float>(2.0 + 3.0 * r * c[0]);
  for (int m = 1; m <= kReach; ++m) k.x[m - 1] = k.y[m - 1] = k.z[m - 1] = static_cast<float>(r * c[m]);
  return k;
}

uint32_t stencil_block(const StencilParams& p, const AsmTarget& t) {
  if (p.block) return p.block;
  // The paper's rule: the fewest Z blocks whose buffers fit (4 patterns x 5 blocks received, the
  // accumulator, two time levels of nz + 8 cells, the code: about 1.5 KB per block).
  for (uint32_t nb = 1; nb <= p.nz; ++nb) {
    const uint32_t b = (p.nz + nb - 1) / nb;
    if (data_bytes(p, b) + uint64_t{nb} * 1600 + 448 <= t.sram_bytes) return b;
  }
  return 1;
}

void add_stencil(FabricProgram& prog, const StencilParams& p, const std::vector<std::vector<float>>& u_prev,
                 const std::vector<std::vector<float>>& u_cur, const AsmTarget& t) {
  const Rect& r = p.rect;
  if (r.w < 1 || r.h < 1 || r.x0 < 0 || r.y0 < 0) throw ConfigError("stencil: bad rectangle");
  if (p.nz < 1 || p.nz > 16384) throw ConfigError("stencil: nz must be in [1, 16384]");
  if (p.steps < 1 || p.steps > (1u << 20) || p.warmup > (1u << 20)) throw ConfigError("stencil: steps must be in [1, 2^20]");
  const size_t pes = static_cast<size_t>(r.w) * r.h;
  if (u_prev.size() != pes || u_cur.size() != pes) throw ConfigError("stencil: need one Z column per PE");
  need_colors("stencil", p.color_base, 2 * kDirs, t);
  const uint32_t b = stencil_block(p, t);
  if (b < 1 || b > p.nz) throw ConfigError("stencil: block must be in [1, nz]");
  const uint32_t nb = blocks_for(p, b), ext = p.nz + 2 * kReach;
  const uint64_t data = data_bytes(p, b);
  if (data + 512 > t.sram_bytes) {
    throw ConfigError("stencil: a Z column of " + std::to_string(p.nz) + " cells in blocks of " + std::to_string(b) +
                      " needs " + std::to_string(data) + " bytes of SRAM per PE plus code; the core has " +
                      std::to_string(t.sram_bytes) + " (core.sram_kb): " +
                      (p.block > 1 ? "use smaller blocks" : "the two time levels alone do not fit; use a smaller nz"));
  }
  auto color = [&](int d, int s) { return p.color_base + 2 * d + s % 2; };
  const StencilCoeffs& c = p.coeffs;
  // Coefficients in SRAM, loaded before each op that takes one: self, x1..x4, y1..y4, z1..z4.
  std::string coef_list = f32_literal(c.self);
  for (const float* v : {c.x, c.y, c.z}) {
    for (int m = 0; m < kReach; ++m) coef_list += ", " + f32_literal(v[m]);
  }
  auto coef_of = [&](int d, int k) { return k == 0 ? 0 : (d < 2 ? k : 4 + k); };  // index in coef

  for (int j = 0; j < r.h; ++j) {
    for (int i = 0; i < r.w; ++i) {
      const int px = r.x0 + i, py = r.y0 + j;
      Travel tr[kDirs];
      for (int d = 0; d < kDirs; ++d) tr[d] = travel(d, i, j, r);
      PeAsm a;
      a.task("0, main, active");
      a.data(".data coef, fp32, " + coef_list);
      a.data(".align 16");
      a.data(".space ua, fp32, " + std::to_string(ext));
      a.data(".align 16");
      a.data(".space ub, fp32, " + std::to_string(ext));
      for (int d = 0; d < kDirs; ++d) {
        for (int k = 0; k <= kReach; ++k) {
          a.data(".align 16");
          a.data(".space p" + std::to_string(d) + std::to_string(k) + ", fp32, " + std::to_string(b));
        }
      }
      a.data(".align 16");
      a.data(".space acc, fp32, " + std::to_string(b));
      a.data(".space one, fp32, 1");
      a.data(".space t, i32, 2");
      // Queues: every color this PE takes or sends in some step.
      for (int d = 0; d < kDirs; ++d) {
        for (int s = 0; s <= kReach; ++s) {
          const int k = role(tr[d].q, s);
          if (k < 0) continue;
          a.inq(color(d, s));
          if (k == 0) a.outq(color(d, s));
        }
      }
      // Registers: r10 = u^n (sent, read by the Z terms), r11 = u^(n-1) (overwritten by
      // u^(n+1)); they swap after each time step. r9 counts steps, r8 = the timed ones.
      a << "main:" << "li r0, 0" << "li r10, ua" << "li r11, ub"
        << "li r9, " + std::to_string(p.warmup + p.steps) << "li r8, " + std::to_string(p.steps);
      a << "step:";
      if (p.timed) a << "bne r9, r8, untimed" << "tsc r13" << "untimed:";
      for (uint32_t blk = 0; blk < nb; ++blk) {
        const uint32_t z0 = blk * b, bl = std::min(b, p.nz - z0), off = (kReach + z0) * 4;
        const std::string BL = std::to_string(bl);
        for (int d = 0; d < kDirs; ++d) {
          for (int par = 0; par < 2; ++par) {
            bool takes = false;
            for (int s = par; s <= kReach; s += 2) takes |= role(tr[d].q, s) >= 0;
            if (takes) a << "dfin d" + std::to_string(10 + 2 * d + par) + ", " + std::to_string(color(d, par)) + ", " + BL;
          }
          for (int s = 0; s <= kReach; ++s) {
            if (role(tr[d].q, s) == 0) a << "dfout d" + std::to_string(20 + d) + ", " + std::to_string(color(d, s)) + ", " + BL;
          }
        }
        // The exchange: five steps of the four patterns. Receives run on microthread d, sends
        // on d + 4; issuing a direction's next op waits for its microthread, and a root's
        // control wavelet follows once its own copy is back (its send has left).
        int pending[kDirs] = {-1, -1, -1, -1};  // a root's control wavelet still to send: its color
        auto flush = [&](int d) {
          if (pending[d] < 0) return;
          a << "ctl " + std::to_string(pending[d]);
          pending[d] = -1;
        };
        a << "dmem d3, one, 1, 1";
        for (int s = 0; s <= kReach; ++s) {
          for (int d = 0; d < kDirs; ++d) {
            const int k = role(tr[d].q, s);
            const std::string fin = "d" + std::to_string(10 + 2 * d + s % 2), U = std::to_string(d);
            const std::string P = "p" + std::to_string(d) + std::to_string(k);
            if (k < 0) {
              if (pending[d] >= 0) {
                a << "vfill.fp32 d3, r0, async=" + U;  // waits for the microthread
                flush(d);
              }
              continue;
            }
            if (k == 0) {
              a << "dmem d2, 0, " + BL + ", 1" << "addi r1, r10, " + std::to_string(off) << "dbase d2, r1";
              a << "vmov.fp32 d" + std::to_string(20 + d) + ", d2, async=" + std::to_string(4 + d);
            }
            a << "dmem d" + std::to_string(4 + d) + ", " + P + ", " + BL + ", 1";
            if (k == 0 && d != 0) {
              a << "vmov.fp32 d" + std::to_string(4 + d) + ", " + fin + ", async=" + U;  // own copy, unused
            } else {
              a << "ld32 r4, [r0+coef+" + std::to_string(4 * coef_of(d, k)) + "]";
              a << "vmuls.fp32 d" + std::to_string(4 + d) + ", " + fin + ", r4, async=" + U;
            }
            flush(d);  // the previous step's control, now that the microthread took this op
            if (k == 0) pending[d] = color(d, s);
          }
        }
        for (int d = 0; d < kDirs; ++d) {
          a << "vfill.fp32 d3, r0, async=" + std::to_string(d);  // all received
          flush(d);
        }
        // The sum of the 17 products (the own cell's, then 4 from each pattern), the 8 Z terms
        // (fmacs), and u^(n+1) = sum - u^(n-1) over the old level.
        std::vector<std::string> terms = {"p00"};
        for (int d = 0; d < kDirs; ++d) {
          for (int k = 1; k <= kReach; ++k) terms.push_back("p" + std::to_string(d) + std::to_string(k));
        }
        a << "dmem d0, acc, " + BL + ", 1" << "dmem d1, " + terms[0] + ", " + BL + ", 1"
          << "dmem d2, " + terms[1] + ", " + BL + ", 1" << "vadd.fp32 d0, d1, d2";
        for (size_t k = 2; k < terms.size(); ++k) {
          a << "dmem d1, " + terms[k] + ", " + BL + ", 1" << "vadd.fp32 d0, d0, d1";
        }
        for (int dz : {-4, -3, -2, -1, 1, 2, 3, 4}) {
          const int m = dz < 0 ? -dz : dz;
          a << "dmem d1, 0, " + BL + ", 1" << "addi r1, r10, " + std::to_string(static_cast<int>(off) + 4 * dz)
            << "dbase d1, r1" << "ld32 r4, [r0+coef+" + std::to_string(4 * (8 + m)) + "]"
            << "vfmacs.fp32 d0, d0, d1, r4";
        }
        a << "dmem d1, 0, " + BL + ", 1" << "addi r1, r11, " + std::to_string(off) << "dbase d1, r1"
          << "vsub.fp32 d1, d0, d1";
      }
      a << "mov r1, r10" << "mov r10, r11" << "mov r11, r1";
      a << "addi r9, r9, -1" << "bne r9, r0, step";
      if (p.timed) a << "tsc r14" << "li r12, t" << "st32 [r12], r13" << "st32 [r12+4], r14";
      a << "halt";
      const int img = intern_image(prog, "stencil", a.text(), t);
      prog.place(px, py, img);
      const size_t pe = static_cast<size_t>(j) * r.w + i;
      if (u_prev[pe].size() != p.nz || u_cur[pe].size() != p.nz) throw ConfigError("stencil: every column needs nz cells");
      prog.set_data(px, py, "ub", encode(NumFormat::kF32, u_prev[pe], t.cb16_bias), kReach * 4);
      prog.set_data(px, py, "ua", encode(NumFormat::kF32, u_cur[pe], t.cb16_bias), kReach * 4);
      const std::string xy = std::to_string(px) + "." + std::to_string(py);
      prog.output("ua." + xy, px, py, "ua", p.nz, kReach);
      prog.output("ub." + xy, px, py, "ub", p.nz, kReach);
      if (p.timed) prog.output("t." + xy, px, py, "t");
      // Routes: per color, the roles of the steps this PE takes part in, in order; each ends
      // with the root's control wavelet passing, which moves the switch to the next one.
      for (int d = 0; d < kDirs; ++d) {
        for (int par = 0; par < 2; ++par) {
          ColorRoute cr;
          cr.npos = 0;
          for (int s = par; s <= kReach; s += 2) {
            const int k = role(tr[d].q, s);
            if (k < 0) continue;
            const bool fwd = tr[d].q + 1 < tr[d].len && k < kReach;
            uint8_t rx = port_bit(k == 0 ? kRamp : tr[d].in);
            uint8_t tx = port_bit(kRamp) | (fwd ? port_bit(tr[d].out) : 0);
            cr.pos[cr.npos++] = {rx, tx};
          }
          if (cr.npos) prog.route(px, py, color(d, par), cr);
        }
      }
    }
  }
}

std::vector<std::vector<float>> stencil_reference(const StencilParams& p, std::vector<std::vector<float>> u_prev,
                                                  std::vector<std::vector<float>> u_cur) {
  const int w = p.rect.w, h = p.rect.h;
  const int nz = static_cast<int>(p.nz);
  const StencilCoeffs& c = p.coeffs;
  auto at = [&](const std::vector<std::vector<float>>& u, int x, int y, int z) -> float {
    return u[static_cast<size_t>(y) * w + x][static_cast<size_t>(z)];
  };
  std::vector<float> terms(17);
  for (uint32_t n = 0; n < p.warmup + p.steps; ++n) {
    for (int y = 0; y < h; ++y) {
      for (int x = 0; x < w; ++x) {
        std::vector<float>& out = u_prev[static_cast<size_t>(y) * w + x];
        for (int z = 0; z < nz; ++z) {
          terms[0] = c.self * at(u_cur, x, y, z);
          int t = 1;
          for (int d = 0; d < kDirs; ++d) {
            for (int k = 1; k <= kReach; ++k) {
              const int sx = d == 0 ? x - k : d == 1 ? x + k : x, sy = d == 2 ? y - k : d == 3 ? y + k : y;
              const bool in = sx >= 0 && sx < w && sy >= 0 && sy < h;
              terms[static_cast<size_t>(t++)] = in ? (d < 2 ? c.x : c.y)[k - 1] * at(u_cur, sx, sy, z) : 0.0f;
            }
          }
          float acc = terms[0] + terms[1];
          for (size_t k = 2; k < terms.size(); ++k) acc = acc + terms[k];
          for (int dz : {-4, -3, -2, -1, 1, 2, 3, 4}) {
            const int zz = z + dz, m = dz < 0 ? -dz : dz;
            const float v = zz >= 0 && zz < nz ? at(u_cur, x, y, zz) : 0.0f;
            acc = std::fma(v, c.z[m - 1], acc);
          }
          out[static_cast<size_t>(z)] = acc - out[static_cast<size_t>(z)];
        }
      }
    }
    std::swap(u_prev, u_cur);
  }
  // The kernel's arrays: ua starts as u^n and ub as u^(n-1); each step overwrites the older one.
  const bool even = (p.warmup + p.steps) % 2 == 0;
  std::vector<std::vector<float>> both = even ? u_cur : u_prev;  // ua
  const auto& ub = even ? u_prev : u_cur;
  both.insert(both.end(), ub.begin(), ub.end());
  return both;
}

}  // namespace wafersim::kernels
