// The 3-D FFT of Orenes-Vera et al. ("Wafer-Scale Fast Fourier Transforms", ICS 2023, arXiv
// 2209.15040; wsFFT): an n^3 complex array on n x n PEs, one pencil per PE, three supersteps
// of local 1-D FFTs with an all-to-all along the rows, then along the columns, between them
// (docs/kernels.md, docs/validation.md).
#include "firmware/kernels/kernels.h"

#include <cmath>

#include "hw/config.h"

namespace wafersim::kernels {

namespace {

std::string S(long long v) { return std::to_string(v); }

int log2_exact(uint32_t n) {
  int k = 0;
  while ((1u << k) < n) ++k;
  return (1u << k) == n ? k : -1;
}

// Radix-2 decimation in frequency, in place over the interleaved complex array `v` (natural
// order in, bit-reversed order out). Stage h (n/2 down to 1), butterfly j < h over the blocks
// (a strided vector of n/(2h) elements): t = a - b, a = a + b, b = t w^(j n / 2h), the twiddle
// product as vmuls + vfmacs (one rounding each). Registers r1-r7, descriptors d0-d5.
void emit_fft(PeAsm& a, const std::string& v, uint32_t n, const std::string& tag) {
  for (uint32_t h = n / 2, s = 0; h >= 1; h /= 2, ++s) {
    const uint32_t len = n / (2 * h), stride = 4 * h, step = n / (2 * h);
    const std::string L = S(len), St = S(stride), lp = tag + "_" + S(s);
    a << "dmem d0, " + v + ", " + L + ", " + St << "dmem d1, " + v + "+4, " + L + ", " + St
      << "dmem d2, " + v + "+" + S(8LL * h) + ", " + L + ", " + St << "dmem d3, " + v + "+" + S(8LL * h + 4) + ", " + L + ", " + St
      << "dmem d4, tr, " + L + ", 1" << "dmem d5, ti, " + L + ", 1";
    a << "li r3, tw" << "li r1, 0" << "li r2, " + S(h);
    a << lp + ":";
    a << "ld32 r4, [r3]" << "ld32 r5, [r3+4]" << "ld32 r6, [r3+8]";
    a << "vsub.fp32 d4, d0, d2" << "vsub.fp32 d5, d1, d3" << "vadd.fp32 d0, d0, d2" << "vadd.fp32 d1, d1, d3";
    a << "vmuls.fp32 d2, d4, r4" << "vfmacs.fp32 d2, d2, d5, r6" << "vmuls.fp32 d3, d4, r5" << "vfmacs.fp32 d3, d3, d5, r4";
    a << "daddb d0, 8" << "daddb d1, 8" << "daddb d2, 8" << "daddb d3, 8" << "addi r3, r3, " + S(12LL * step);
    a << "addi r1, r1, 1" << "bne r1, r2, " + lp;
    if (h == 1) break;
  }
}

// The host's copy of emit_fft, operation for operation.
void fft_host(std::vector<float>& v, uint32_t n, const std::vector<float>& tw) {
  for (uint32_t h = n / 2; h >= 1; h /= 2) {
    const uint32_t step = n / (2 * h);
    for (uint32_t j = 0; j < h; ++j) {
      const float wr = tw[3 * j * step], wi = tw[3 * j * step + 1], wn = tw[3 * j * step + 2];
      for (uint32_t k = 0; k < n; k += 2 * h) {
        float& ar = v[2 * (k + j)];
        float& ai = v[2 * (k + j) + 1];
        float& br = v[2 * (k + j + h)];
        float& bi = v[2 * (k + j + h) + 1];
        const float tr = ar - br, ti = ai - bi;
        ar = ar + br;
        ai = ai + bi;
        br = std::fma(ti, wn, tr * wr);
        bi = std::fma(ti, wr, tr * wi);
      }
    }
    if (h == 1) break;
  }
}

// One transpose direction along a line of n PEs, at position i: streams arrive from `up`
// positions before it, each the sender's whole array (2n words); the receiver keeps element i
// of each at its sender's place in the destination; then it sends its own array onward (the
// router takes its own copy back too when it also passes others' on: drained). Phase 0 is the
// rows (east, west), phase 1 the columns (south, north); side 0 travels toward higher indices.
// Its color, tasks, microthreads, scratch, descriptors and registers follow from phase and side.
struct Dir {
  int color, task, done_task, ut_rx, ut_tx;
  int up;              // streams from before this position
  bool sends, loops;   // sends its own array; its router hands its own stream back to it
  int first, delta;    // the first sender's index along the line and the step to the next
  std::string scratch;
  int d_in, d_out, d_scr, d_cdst, d_csrc;  // descriptors
  int r_count, r_ptr;  // registers
  Dir(int phase, int side, int i, int n, int color_base)
      : color(color_base + 2 * phase + side), task(10 + 10 * phase + side), done_task(task + 2), ut_rx(side),
        ut_tx(2 + side), up(side ? n - 1 - i : i), sends(up < n - 1), loops(up > 0 && up < n - 1),
        first(side ? n - 1 : 0), delta(side ? -1 : 1), scratch(side ? "s2" : "s1"), d_in(12 + 4 * phase + 2 * side),
        d_out(d_in + 1), d_scr(6 + side), d_cdst(8 + 2 * side), d_csrc(9 + 2 * side), r_count(8 + 2 * side),
        r_ptr(9 + 2 * side) {}
};

void emit_dir_start(PeAsm& a, const Dir& d, const std::string& dst, int i) {
  a << "li r" + S(d.r_count) + ", 0" << "li r" + S(d.r_ptr) + ", " + dst + "+" + S(8LL * d.first)
    << "dmem d" + S(d.d_cdst) + ", " + dst + ", 2, 1" << "dbase d" + S(d.d_cdst) + ", r" + S(d.r_ptr)
    << "dmem d" + S(d.d_csrc) + ", " + d.scratch + "+" + S(8LL * i) + ", 2, 1";
  if (d.up > 0) {
    a << "vmov.fp32 d" + S(d.d_scr) + ", d" + S(d.d_in) + ", async=" + S(d.ut_rx) + ", done=activate:" + S(d.task);
  } else if (d.sends) {
    a << "vmov.fp32 d" + S(d.d_out) + ", d21, async=" + S(d.ut_tx) + ", done=activate:" + S(d.done_task);
  } else {
    a << "activate " + S(d.done_task);
  }
}

void emit_dir_task(PeAsm& a, const Dir& d, const std::string& label) {
  a << label + ":";
  a << "vmov.fp32 d" + S(d.d_cdst) + ", d" + S(d.d_csrc);
  a << "addi r" + S(d.r_ptr) + ", r" + S(d.r_ptr) + ", " + S(8LL * d.delta) << "dbase d" + S(d.d_cdst) + ", r" + S(d.r_ptr);
  a << "addi r" + S(d.r_count) + ", r" + S(d.r_count) + ", 1" << "li r7, " + S(d.up)
    << "beq r" + S(d.r_count) + ", r7, " + label + "_own";
  a << "vmov.fp32 d" + S(d.d_scr) + ", d" + S(d.d_in) + ", async=" + S(d.ut_rx) + ", done=activate:" + S(d.task) << "exit";
  a << label + "_own:";
  if (d.sends) {  // (up > 0 here, so a sender's router hands its stream back: drained)
    a << "vmov.fp32 d" + S(d.d_out) + ", d21, async=" + S(d.ut_tx);
    a << "vmov.fp32 d20, d" + S(d.d_in) + ", async=" + S(d.ut_rx) + ", done=activate:" + S(d.done_task);
  } else {
    a << "activate " + S(d.done_task);
  }
  a << "exit";
}

}  // namespace

std::vector<float> fft_twiddles(uint32_t n) {
  std::vector<float> tw;
  for (uint32_t k = 0; k < n / 2; ++k) {
    const double ang = -2.0 * M_PI * static_cast<double>(k) / static_cast<double>(n);
    const float wr = static_cast<float>(std::cos(ang)), wi = static_cast<float>(std::sin(ang));
    tw.push_back(wr);
    tw.push_back(wi);
    tw.push_back(-wi);
  }
  return tw;
}

void add_fft3d(FabricProgram& prog, const FftParams& p, const std::vector<std::vector<float>>& pencils,
               const AsmTarget& t) {
  const uint32_t n = p.n;
  if (n < 2 || n > 512 || log2_exact(n) < 0) throw ConfigError("fft: n must be a power of two in [2, 512]");
  if (p.x0 < 0 || p.y0 < 0) throw ConfigError("fft: bad origin");
  if (pencils.size() != size_t{n} * n) throw ConfigError("fft: need one pencil per PE (n x n)");
  need_colors("fft", p.color_base, 4, t);
  const uint64_t bytes = uint64_t{42} * n + 64;
  if (bytes + 1024 > t.sram_bytes) {
    throw ConfigError("fft: a pencil of " + S(n) + " complex values needs " + S(static_cast<long long>(bytes)) +
                      " bytes of SRAM per PE plus code; the core has " + S(t.sram_bytes) + " (core.sram_kb)");
  }
  const int N = static_cast<int>(n);
  std::string tw_list;
  for (float v : fft_twiddles(n)) tw_list += (tw_list.empty() ? "" : ", ") + f32_literal(v);
  const std::string N2 = S(2LL * n);
  RouteTable routes;
  for (int y = 0; y < N; ++y) {
    for (int x = 0; x < N; ++x) {
      const int px = p.x0 + x, py = p.y0 + y;
      PeAsm a;
      a.task("0, main, active");
      a.task("10, rx1r");
      a.task("11, rx2r");
      a.task("12, done1r");
      a.task("13, done2r");
      a.task("14, phaser");
      a.task("20, rx1c");
      a.task("21, rx2c");
      a.task("22, done1c");
      a.task("23, done2c");
      a.task("24, phasec");
      a.data(".align 16");
      a.data(".space a, fp32, " + N2);
      a.data(".space b, fp32, " + N2);
      a.data(".space s1, fp32, " + N2);
      a.data(".space s2, fp32, " + N2);
      a.data(".space tr, fp32, " + S(n / 2));
      a.data(".space ti, fp32, " + S(n / 2));
      a.data(".data tw, fp32, " + tw_list);
      a.data(".space dummy, fp32, 1");
      a.data(".space t, i32, 2");
      const Dir dE(0, 0, x, N, p.color_base), dW(0, 1, x, N, p.color_base);
      const Dir dS(1, 0, y, N, p.color_base), dN(1, 1, y, N, p.color_base);
      for (const Dir* d : {&dE, &dW, &dS, &dN}) {
        if (d->up > 0 || d->loops) a.inq(d->color);
        if (d->sends) a.outq(d->color);
      }
      auto fabric_dsds = [&](const Dir& d) {
        if (d.up > 0 || d.loops) a << "dfin d" + S(d.d_in) + ", " + S(d.color) + ", " + N2;
        if (d.sends) a << "dfout d" + S(d.d_out) + ", " + S(d.color) + ", " + N2;
      };
      a << "main:" << "li r0, 0";
      if (p.timed) a << "tsc r13";
      a << "dmem d6, s1, " + N2 + ", 1" << "dmem d7, s2, " + N2 + ", 1" << "dmem d20, dummy, " + N2 + ", 0";
      fabric_dsds(dE);
      fabric_dsds(dW);
      fabric_dsds(dS);
      fabric_dsds(dN);
      // One redistribution: a line's two directions at once, from `src` into `dst`, keeping
      // element `idx` of each array; the two done tasks count to 2 and start task `next`, which
      // first copies its own element.
      auto exchange = [&](const Dir& d1, const Dir& d2, const std::string& src, const std::string& dst, int idx,
                          const std::string& tag, int next) {
        a << "li r12, 0" << "dmem d21, " + src + ", " + N2 + ", 1";
        emit_dir_start(a, d1, dst, idx);
        emit_dir_start(a, d2, dst, idx);
        a << "exit";
        emit_dir_task(a, d1, "rx1" + tag);
        emit_dir_task(a, d2, "rx2" + tag);
        for (const std::string& lbl : {"done1" + tag, "done2" + tag}) {
          a << lbl + ":" << "addi r12, r12, 1" << "li r7, 2" << "bne r12, r7, " + lbl + "_x" << "activate " + S(next)
            << lbl + "_x:" << "exit";
        }
        a << "phase" + tag + ":" << "dmem d22, " + dst + "+" + S(8LL * idx) + ", 2, 1"
          << "dmem d23, " + src + "+" + S(8LL * idx) + ", 2, 1" << "vmov.fp32 d22, d23";
      };
      emit_fft(a, "a", n, "fz");
      exchange(dE, dW, "a", "b", x, "r", 14);  // superstep 2's pencils: along the rows
      emit_fft(a, "b", n, "fx");
      exchange(dS, dN, "b", "a", y, "c", 24);  // superstep 3's: along the columns
      emit_fft(a, "a", n, "fy");
      if (p.timed) a << "tsc r14" << "li r7, t" << "st32 [r7], r13" << "st32 [r7+4], r14";
      a << "halt";
      const int img = intern_image(prog, "fft", a.text(), t);
      prog.place(px, py, img);
      const size_t pe = static_cast<size_t>(y) * n + static_cast<size_t>(x);
      if (pencils[pe].size() != 2 * size_t{n}) throw ConfigError("fft: every pencil needs n complex values (2n floats)");
      prog.set_data(px, py, "a", encode(NumFormat::kF32, pencils[pe], t.cb16_bias));
      const std::string xy = S(px) + "." + S(py);
      prog.output("out." + xy, px, py, "a", 2 * n);
      if (p.timed) prog.output("t." + xy, px, py, "t");
      // Routes: each direction a chain whose routers pass what comes from before them on and
      // to their ramp, and take their own stream from the ramp once the others have passed.
      auto route = [&](const Dir& d, Port in, Port out) {
        uint8_t rx = 0, tx = 0;
        if (d.up > 0) rx |= port_bit(in);
        if (d.sends) rx |= port_bit(kRamp);
        if (d.up > 0 || d.loops) tx |= port_bit(kRamp);
        if (d.sends) tx |= port_bit(out);
        if (rx) routes.add(px, py, d.color, rx, tx);
      };
      route(dE, kWest, kEast);
      route(dW, kEast, kWest);
      route(dS, kNorth, kSouth);
      route(dN, kSouth, kNorth);
    }
  }
  routes.emit(prog);
}

std::vector<std::vector<float>> fft3d_reference(uint32_t n, const std::vector<std::vector<float>>& pencils) {
  const std::vector<float> tw = fft_twiddles(n);
  const size_t N = n;
  std::vector<std::vector<float>> a = pencils, b(N * N, std::vector<float>(2 * N));
  // dst(x, y)[j] = src(sender j of the line)[element x or y], as the transposes move them.
  auto transpose = [&](const std::vector<std::vector<float>>& src, std::vector<std::vector<float>>& dst, bool rows) {
    for (size_t y = 0; y < N; ++y) {
      for (size_t x = 0; x < N; ++x) {
        for (size_t j = 0; j < N; ++j) {
          const size_t from = rows ? y * N + j : j * N + x, k = rows ? x : y;
          dst[y * N + x][2 * j] = src[from][2 * k];
          dst[y * N + x][2 * j + 1] = src[from][2 * k + 1];
        }
      }
    }
  };
  for (auto& v : a) fft_host(v, n, tw);
  transpose(a, b, true);
  for (auto& v : b) fft_host(v, n, tw);
  transpose(b, a, false);
  for (auto& v : a) fft_host(v, n, tw);
  return a;
}

uint32_t bit_reverse(uint32_t v, uint32_t n) {
  uint32_t r = 0;
  for (uint32_t m = n >> 1; m; m >>= 1, v >>= 1) r = (r << 1) | (v & 1);
  return r;
}

}  // namespace wafersim::kernels
