#include "compiler/codegen.h"

#include <cstring>
#include <limits>
#include <map>
#include <tuple>
#include <utility>

#include "compiler/codegen_util.h"
#include "compiler/reference.h"
#include "compiler/ws_plan.h"
#include "firmware/assembler.h"
#include "firmware/kernels/kernel_util.h"
#include "hw/config.h"
#include "hw/number_format.h"

namespace wafersim::compiler {
namespace {

using kernels::PeAsm;

std::string S(long long v) { return std::to_string(v); }

// With a lookahead of F samples: activates the update task once the minibatch's gradients are
// in (r6 == r7) and the F lookahead samples have passed (r5 == batch + F), or at the host's
// drain flag (no next minibatch). r13 is scratch.
void emit_check_update(PeAsm& a, int batch, int F, int update_task, const std::string& tag) {
  a << "bne r6, r7, " + tag << "li r13, " + S(batch + F) << "beq r5, r13, " + tag + "_go" << "ld32 r13, [r0+drain]"
    << "beq r13, r0, " + tag << tag + "_go:" << "activate " + S(update_task) << tag + ":";
}

// The replicas' gradient sum (compiler/routing.h SumNets; docs/compiler.md, "Replicas"). Per
// column, a chain through every copy's PEs that hold weights; the middle copy m = R / 2 gets the
// sums. The copies south of it send a northward stream, those north of it a southward one:
// each carries one segment per PE of a copy, in stream order, and each copy adds its gradient
// buffer G to its own segment as the stream passes (the farthest copy starts it). The middle
// copy takes both: G = north half's + (south half's + its own). It then sends the sums out
// both ways, one multicast each, and every other copy's PEs take their own segment into G at
// their ramps (a filter window of the segment's place in the stream, moved on by the stream's
// length each minibatch).
enum class SumOp {
  kStart,     // pass what precedes, then send G
  kRelayAdd,  // pass what precedes, send in + G, pass what follows
  kAbsorb,    // G = in + G, pass what follows
  kEmit,      // pass what precedes, send G
  kTake,      // G = the multicast's window
};
struct SumStep {
  SumOp op;
  bool north;  // the northward stream (nin, nout; segments south of the PE precede its own)
};
struct SumSpec {
  std::vector<SumStep> steps;
  long before = 0, own = 0, after = 0;  // elements of one copy's column south of, at, north of the PE
  int nin = -1, nout = -1, sin = -1, sout = -1, dist = -1;
  long pos = 0;  // kTake: where the PE's segment starts in the multicast (before, or after south of m)
};

// Copy `rep` of R's steps: reduce toward the middle copy, then distribute from it.
std::vector<SumStep> sum_steps(int rep, int R) {
  const int m = R / 2;
  std::vector<SumStep> st;
  if (rep > m) st.push_back({rep == R - 1 ? SumOp::kStart : SumOp::kRelayAdd, true});
  if (rep < m) st.push_back({rep == 0 ? SumOp::kStart : SumOp::kRelayAdd, false});
  if (rep == m) {
    if (R - 1 > m) st.push_back({SumOp::kAbsorb, true});
    if (m > 0) st.push_back({SumOp::kAbsorb, false});
    if (m > 0) st.push_back({SumOp::kEmit, true});
    if (R - 1 > m) st.push_back({SumOp::kEmit, false});
  }
  if (rep != m) st.push_back({SumOp::kTake, rep < m});
  return st;
}

// Fabric descriptors of the exact lengths the sum's ops take, made once in the init task so
// that no setup stalls a stream between two ops (a pass longer than 65,535 elements takes
// several).
struct SumDsd {
  std::map<std::tuple<bool, int, long>, std::string> d;  // (input, color, length)
};

// The sum's streams take the deepest queues (core.inq_depths, core.outq_depths: input 0 and 1,
// output 2 and 3 by default), where a wavelet a cycle passes the ramps' round trip; the data
// tasks' colors, whose tasks take several cycles a wavelet, do with shallow ones. Called first.
void bind_sum_queues(PeAsm& a, const SumSpec* s) {
  if (!s) return;
  if (s->nin >= 0) a.inq(s->nin, 0);
  if (s->sin >= 0) a.inq(s->sin, 1);
  if (s->dist >= 0) a.inq(s->dist, s->nin >= 0 ? 1 : 0);
  if (s->nout >= 0) a.outq(s->nout, 2);
  if (s->sout >= 0) a.outq(s->sout, 3);
}

SumDsd prepare_sum(PeAsm& a, const SumSpec& s) {
  SumDsd out;
  auto want = [&](bool in, int color, long n) {
    for (long done = 0; done < n;) {
      const long c = std::min(65535L, n - done);
      auto& name = out.d[{in, color, c}];
      if (name.empty()) name = in ? a.fin(color, static_cast<uint32_t>(c)) : a.fout(color, static_cast<uint32_t>(c));
      done += c;
    }
  };
  for (const SumStep& st : s.steps) {
    if (st.op == SumOp::kTake) {
      // The window [pos, pos + own) of the multicast's wavelets, counted from the first.
      want(true, s.dist, s.own);
      a.data(".space sumlo, i32, 1");
      a << "li r13, " + std::to_string(s.pos) << "st32 [r0+sumlo], r13" << "li r14, " + std::to_string(s.pos + s.own)
        << "filt " + std::to_string(s.dist) + ", r13, r14";
      continue;
    }
    const int in = st.north ? s.nin : s.sin, out_c = st.north ? s.nout : s.sout;
    const long pre = st.north ? s.before : s.after, post = st.north ? s.after : s.before;
    const bool reads = st.op == SumOp::kRelayAdd || st.op == SumOp::kAbsorb;
    const bool sends = st.op != SumOp::kAbsorb;
    const bool passes_pre = st.op != SumOp::kAbsorb;
    const bool passes_post = st.op == SumOp::kRelayAdd || st.op == SumOp::kAbsorb;
    if (passes_pre && pre > 0) {
      want(true, in, pre);
      want(false, out_c, pre);
    }
    if (reads) want(true, in, s.own);
    if (sends) want(false, out_c, s.own);
    if (passes_post && post > 0) {
      want(true, in, post);
      want(false, out_c, post);
    }
  }
  return out;
}

// The sum on the main thread (the PE has nothing else to do until its update). r1, r2 and r13
// are scratch.
void emit_sum(PeAsm& a, const SumSpec& s, const SumDsd& dd, const std::string& dG) {
  auto D = [&](bool in, int color, long n) { return dd.d.at({in, color, n}); };
  auto pass = [&](int in, int out, long n) {
    for (long done = 0; done < n;) {
      const long c = std::min(65535L, n - done);
      a << "vmov.fp32 " + D(false, out, c) + ", " + D(true, in, c);
      done += c;
    }
  };
  for (const SumStep& st : s.steps) {
    const int in = st.north ? s.nin : s.sin, out = st.north ? s.nout : s.sout;
    const long pre = st.north ? s.before : s.after, post = st.north ? s.after : s.before;
    switch (st.op) {
      case SumOp::kStart:
      case SumOp::kEmit:
        pass(in, out, pre);
        a << "vmov.fp32 " + D(false, out, s.own) + ", " + dG;
        break;
      case SumOp::kRelayAdd:
        pass(in, out, pre);
        a << "vadd.fp32 " + D(false, out, s.own) + ", " + D(true, in, s.own) + ", " + dG;
        pass(in, out, post);
        break;
      case SumOp::kAbsorb:
        a << "vadd.fp32 " + dG + ", " + D(true, in, s.own) + ", " + dG;
        pass(in, out, post);
        break;
      case SumOp::kTake: {
        // The next minibatch's window: the stream's length further on (every arrival counts).
        const long total = s.before + s.own + s.after;
        a << "vmov.fp32 " + dG + ", " + D(true, s.dist, s.own) << "ld32 r13, [r0+sumlo]" << "li r1, " + std::to_string(total)
          << "add r13, r13, r1" << "st32 [r0+sumlo], r13" << "li r2, " + std::to_string(s.own) << "add r2, r13, r2"
          << "filt " + std::to_string(s.dist) + ", r13, r2";
        break;
      }
    }
  }
}

// A weight PE's step after a minibatch (reference.cc's update): with replicas (`sum`) the
// gradient buffer dG summed over the copies first (emit_sum) and added to V, then cleared;
// then SGD with momentum, W += -lr V; V *= momentum. r13 is scratch (the sum's: r1, r2).
void emit_update(PeAsm& a, const SumSpec* sum, const SumDsd& dd, const std::string& dG, const std::string& dW,
                 const std::string& dV, const TrainHyper& h) {
  if (sum) {
    emit_sum(a, *sum, dd, dG);
    a << "vadd.fp32 " + dV + ", " + dV + ", " + dG << "vfill.fp32 " + dG + ", r0";
  }
  a << "lif r13, " + kernels::f32_literal(-h.lr) << "vaxpy.fp32 " + dW + ", " + dV + ", r13";
  a << "lif r13, " + kernels::f32_literal(h.momentum) << "vmuls.fp32 " + dV + ", " + dV + ", r13";
}

// Colors of one tile's streams; -1 where absent.
struct TileColors {
  int x = -1, fin = -1, fout = -1, dy = -1, dxin = -1, dxout = -1;
};

// A tile: weights T[k][o] (k over its input slice, o over its output slice), k-major.
//   fwd (data task, one per input wavelet x_k): y += x_k * T[k, :]; keep x_k in the ring slot
//   bwd (data task, one per gradient wavelet g_o): V[:, o] += g_o * x; dx += g_o * T[:, o]
//   ysend/dxsend: the partial sums leave asynchronously (streaming through the child's sum)
//   update: W += -lr * V; V *= momentum, once per minibatch
// Registers: r0 0, r1 k, r2 o, r3 fwd ring pointer, r4 samples in flight, r5/r6 forward/backward
// samples of this minibatch, r7 batch, r8 ring depth, r9 nI, r10 nO, r11 bwd ring slot,
// r12 ring end, r13 scratch, r14 1 while y is being sent.
// With a lookahead of F > 0 samples (two minibatches in flight), r5 counts the samples forwarded
// since the last update and runs up to batch + F: the next minibatch's first F samples pass with
// the old weights; the update waits for them and for the minibatch's last gradient (or for the
// host's drain flag when no next minibatch follows), and the next minibatch's gradients wait for
// the update.
// With replicas (`sum` set), the gradients go to a buffer G beside V instead of into V, and the
// update first sums G over the copies (emit_sum), then V += G and G = 0 before the SGD step.
// A tile's input queues (dense and convolution): the replicas' sum's first, then with replicas
// the partial sums' streams before the data's colors, else after them.
void bind_tile_queues(PeAsm& a, const TileColors& c, const SumSpec* sum) {
  bind_sum_queues(a, sum);
  if (sum && c.fin >= 0) a.inq(c.fin);
  if (sum && c.dxin >= 0) a.inq(c.dxin);
  a.inq(c.x);
  a.inq(c.dy);
  if (c.fin >= 0) a.inq(c.fin);  // (a color binds once: these only bind what is still free)
  if (c.dxin >= 0) a.inq(c.dxin);
}

std::string tile_source(int ni, int no, bool dx, const TileColors& c, int batch, int depth, int lookahead,
                        const TrainHyper& h, const SumSpec* sum) {
  PeAsm a;
  bind_tile_queues(a, c, sum);
  a.task("0, init, active");
  a.task("1, update");
  if (dx) a.task("2, dxsent");
  a.task("3, ysent");
  if (dx) a.task("4, dxsend");
  a.task("5, ysend");
  a.task("6, bwd, color=" + S(c.dy));
  a.task("7, fwd, color=" + S(c.x));
  a.data(".space y, fp32, " + S(no));
  if (dx) a.data(".space dx, fp32, " + S(ni));
  a.data(".space nupd, fp32, 1");
  a.data(".space W, fp32, " + S(static_cast<long long>(ni) * no));
  a.data(".space V, fp32, " + S(static_cast<long long>(ni) * no));
  a.data(".space ring, fp32, " + S(static_cast<long long>(depth) * ni));
  if (sum) a.data(".space G, fp32, " + S(static_cast<long long>(ni) * no));
  const int F = lookahead;
  if (F > 0) a.data(".space drain, i32, 1");
  const long long ring_end_off = 4LL * depth * ni;
  auto try_unblock = [&](const std::string& tag) {
    a << "bne r14, r0, " + tag;
    if (F > 0) a << "li r13, " + S(batch + F) << "beq r5, r13, " + tag;
    else a << "beq r5, r7, " + tag;
    a << "beq r4, r8, " + tag << "unblock 7" << tag + ":";
  };
  auto check_update = [&](const std::string& tag) { emit_check_update(a, batch, F, 1, tag); };
  a << "init:";
  const std::string dY = a.mem("y", static_cast<uint32_t>(no));
  const std::string dWrow = a.mem("W", static_cast<uint32_t>(no));
  // The weight gradients' accumulator: V itself, or with replicas the buffer G.
  const std::string dVcol = a.mem(sum ? "G" : "V", static_cast<uint32_t>(ni), no);
  const std::string dGall = sum ? a.mem("G", static_cast<uint32_t>(ni * no)) : "";
  const SumDsd sum_dsd = sum ? prepare_sum(a, *sum) : SumDsd{};
  const std::string dXs = a.mem("ring", static_cast<uint32_t>(ni));
  const std::string dWall = a.mem("W", static_cast<uint32_t>(ni * no));
  const std::string dVall = a.mem("V", static_cast<uint32_t>(ni * no));
  std::string dWcol, dDX, dDO, dDI, dFI;
  if (dx) {
    dWcol = a.mem("W", static_cast<uint32_t>(ni), no);
    dDX = a.mem("dx", static_cast<uint32_t>(ni));
    dDO = a.fout(c.dxout, static_cast<uint32_t>(ni));
    if (c.dxin >= 0) dDI = a.fin(c.dxin, static_cast<uint32_t>(ni));
  }
  const std::string dFO = a.fout(c.fout, static_cast<uint32_t>(no));
  if (c.fin >= 0) dFI = a.fin(c.fin, static_cast<uint32_t>(no));
  a << "li r0, 0" << "li r1, 0" << "li r2, 0" << "li r3, ring" << "li r4, 0" << "li r5, 0" << "li r6, 0"
    << "li r7, " + S(batch) << "li r8, " + S(depth) << "li r9, " + S(ni) << "li r10, " + S(no) << "li r11, ring"
    << "li r12, ring+" + S(ring_end_off) << "li r14, 0" << "exit";

  a << "update:";
  emit_update(a, sum, sum_dsd, dGall, dWall, dVall, h);
  if (F > 0) {
    // The lookahead samples stay in the ring; an empty ring restarts at its first slot.
    a << "addi r5, r5, -" + S(batch) << "li r6, 0" << "bne r5, r0, upd_keep" << "li r3, ring" << "li r11, ring"
      << "dbase " + dXs + ", r11" << "upd_keep:";
  } else {
    a << "li r5, 0" << "li r6, 0" << "li r3, ring" << "li r11, ring" << "dbase " + dXs + ", r11";
  }
  a << "ld32 r1, [r0+nupd]" << "lif r2, 1.0" << "fadd r1, r1, r2" << "st32 [r0+nupd], r1" << "li r1, 0" << "li r2, 0";
  if (F > 0) a << "unblock 6";
  try_unblock("upd_u");
  a << "exit";

  if (dx) {
    a << "dxsent:" << "vfill.fp32 " + dDX + ", r0" << "unblock 6" << "jmp sample_done";
    a << "dxsend:";
    if (c.dxin >= 0) a << "vadd.fp32 " + dDO + ", " + dDI + ", " + dDX + ", async=1, done=activate:2";
    else a << "vmov.fp32 " + dDO + ", " + dDX + ", async=1, done=activate:2";
    a << "exit";
  }
  a << "ysent:" << "vfill.fp32 " + dY + ", r0" << "li r14, 0";
  try_unblock("ys_u");
  if (F > 0) check_update("ys_c");
  a << "exit";
  a << "ysend:";
  if (c.fin >= 0) a << "vadd.fp32 " + dFO + ", " + dFI + ", " + dY + ", async=0, done=activate:3";
  else a << "vmov.fp32 " + dFO + ", " + dY + ", async=0, done=activate:3";
  a << "exit";

  a << "bwd:";
  a << "vaxpy.fp32 " + dVcol + ", " + dXs + ", r15";
  if (dx) a << "vaxpy.fp32 " + dDX + ", " + dWcol + ", r15";
  a << "daddb " + dVcol + ", 4";
  if (dx) a << "daddb " + dWcol + ", 4";
  a << "addi r2, r2, 1" << "bne r2, r10, bwd_x" << "li r2, 0" << std::string("li r13, ") + (sum ? "G" : "V")
    << "dbase " + dVcol + ", r13";
  if (dx) a << "li r13, W" << "dbase " + dWcol + ", r13";
  a << "addi r11, r11, " + S(4LL * ni) << "bne r11, r12, bwd_nw" << "li r11, ring" << "bwd_nw:" << "dbase " + dXs + ", r11";
  if (dx) a << "block 6" << "activate 4" << "exit";
  if (F > 0) {
    a << "sample_done:" << "addi r4, r4, -1" << "addi r6, r6, 1" << "bne r6, r7, sd_more" << "block 6";
    check_update("sd_c");
    a << "sd_more:";
  } else {
    a << "sample_done:" << "addi r4, r4, -1" << "addi r6, r6, 1" << "bne r6, r7, sd_more" << "activate 1" << "exit";
    a << "sd_more:";
  }
  try_unblock("sd_u");
  a << "bwd_x:" << "exit";

  a << "fwd:";
  a << "vaxpy.fp32 " + dY + ", " + dWrow + ", r15" << "st32 [r3], r15" << "addi r3, r3, 4" << "daddb " + dWrow + ", " + S(4LL * no)
    << "addi r1, r1, 1" << "bne r1, r9, fwd_x" << "li r1, 0" << "li r13, W" << "dbase " + dWrow + ", r13"
    << "bne r3, r12, fwd_nw" << "li r3, ring" << "fwd_nw:" << "addi r5, r5, 1" << "addi r4, r4, 1" << "li r14, 1"
    << "block 7" << "activate 5";
  // (lookahead) The update need not wait for the sample's partial sums to leave: the next
  // layer may be waiting for this tile's update before it takes them.
  if (F > 0) check_update("fw_c");
  a << "fwd_x:" << "exit";
  return a.text();
}

}  // namespace

std::string emit_softmax_loss(kernels::PeAsm& a, int no, const std::string& dAcc, const std::string& dT,
                              const std::string& dG, const std::vector<std::string>& scratch) {
  const uint32_t n = static_cast<uint32_t>(no);
  a << "vmov.fp32 " + dT + ", " + dAcc;
  // Its nine descriptor registers: fresh ones, or `scratch`'s (each set here by a dmem).
  const bool reuse = scratch.size() >= 9;
  size_t next = 0;
  auto reg = [&] { return reuse ? scratch[next++] : a.dsd(); };
  auto over = [&](const std::string& symbol, uint32_t len) {
    if (!reuse) return a.mem(symbol, len);
    const std::string d = reg();
    a.mem(d, symbol, len);
    return d;
  };
  // The max by halving, in place in t: two descriptor registers serve every level, each level
  // re-pointing them (a dmem each, as a fresh pair per level would take), so any class count fits
  // the core's registers (until 2026-11-28 a pair per level: 200 classes ran out of 44).
  const std::string d1 = reg(), d2 = reg();
  for (int m = no; m > 1;) {
    const int half = m / 2;
    a.mem(d1, "t", static_cast<uint32_t>(half));
    a.mem(d2, "t+" + S(4LL * (m - half)), static_cast<uint32_t>(half));
    a << "vmax.fp32 " + d1 + ", " + d1 + ", " + d2;
    m -= half;
  }
  const std::string dM = over("mvec", n), dZ = over("z", n), dE = over("e", n);
  const std::string dS1 = over("s1", 1), dL1 = over("l1", 1), dQ1 = over("q1", 1), dLV = over("lossv", 1);
  a << "ld32 r13, [r0+t]" << "vfill.fp32 " + dM + ", r13" << "vsub.fp32 " + dZ + ", " + dAcc + ", " + dM
    << "vexp.fp32 " + dE + ", " + dZ << "vsum.fp32 r13, " + dE << "st32 [r0+s1], r13" << "vlog.fp32 " + dL1 + ", " + dS1
    << "vrecip.fp32 " + dQ1 + ", " + dS1 << "ld32 r13, [r0+q1]" << "vmuls.fp32 " + dG + ", " + dE + ", r13";
  a << "li r10, 2" << "shl r10, r9, r10" << "li r14, z" << "add r14, r14, r10" << "ld32 r14, [r14]"
    << "ld32 r13, [r0+l1]" << "fsub r13, r13, r14" << "st32 [r0+lossv], r13";
  return dLV;
}

namespace {

// Descriptors for the slots given; the others stay empty (a program using one is a compile error).
ActDsds dsds(std::initializer_list<std::pair<Slot, std::string>> given) {
  ActDsds d;
  for (const auto& [slot, name] : given) d[static_cast<size_t>(slot)] = name;
  return d;
}

}  // namespace

void emit_act_fwd(kernels::PeAsm& a, Activation act, const ActParams& p, const std::string& dY, const std::string& dPre,
                  const std::string& dTmp, const std::string& dOnes) {
  emit_act_fwd(a, act, p, dsds({{Slot::kZ, dPre}, {Slot::kY, dY}, {Slot::kT0, dTmp}, {Slot::kOnes, dOnes}}));
}

void emit_act_bwd(kernels::PeAsm& a, Activation act, const ActParams& p, const std::string& dG, const std::string& dY,
                  const std::string& dTmp, const std::string& dOnes) {
  emit_act_bwd(a, act, p, dsds({{Slot::kG, dG}, {Slot::kY, dY}, {Slot::kT0, dTmp}, {Slot::kOnes, dOnes}}));
}

void emit_pre_act_fwd(kernels::PeAsm& a, Activation act, const ActParams& p, const std::string& dY, const std::string& dZ,
                      const std::string (&t)[4], const std::string& dOnes) {
  emit_act_fwd(a, act, p,
               dsds({{Slot::kZ, dZ}, {Slot::kY, dY}, {Slot::kT0, t[0]}, {Slot::kT1, t[1]}, {Slot::kT2, t[2]}, {Slot::kT3, t[3]}, {Slot::kOnes, dOnes}}));
}

void emit_pre_act_bwd(kernels::PeAsm& a, Activation act, const ActParams& p, const std::string& dG, const std::string& dZ,
                      const std::string (&t)[4], const std::string& dOnes) {
  emit_act_bwd(a, act, p,
               dsds({{Slot::kZ, dZ}, {Slot::kG, dG}, {Slot::kT0, t[0]}, {Slot::kT1, t[1]}, {Slot::kT2, t[2]}, {Slot::kT3, t[3]}, {Slot::kOnes, dOnes}}));
}

void emit_ln_fwd(kernels::PeAsm& a, int n, float eps, const std::string& dZ, const std::string& dXh, const std::string& dT,
                 const std::string& dLs, const std::string& lsc, const std::string& dOnes, const std::string& dG,
                 const std::string& dB, const std::function<void()>& keep_r) {
  const std::string inv_n = kernels::f32_literal(1.0f / static_cast<float>(n));
  a << "vsum.fp32 r13, " + dZ << "lif r14, " + inv_n << "fmul r13, r13, r14" << "lif r14, -1.0" << "fmul r13, r13, r14"
    << "vfmacs.fp32 " + dXh + ", " + dZ + ", " + dOnes + ", r13" << "vmul.fp32 " + dT + ", " + dXh + ", " + dXh << "vsum.fp32 r13, " + dT
    << "lif r14, " + inv_n << "fmul r13, r13, r14" << "lif r14, " + kernels::f32_literal(eps) << "fadd r13, r13, r14"
    << "st32 [r0+" + lsc + "], r13" << "vlog.fp32 " + dLs + ", " + dLs << "lif r14, -0.5" << "vmuls.fp32 " + dLs + ", " + dLs + ", r14"
    << "vexp.fp32 " + dLs + ", " + dLs << "ld32 r13, [r0+" + lsc + "]";
  keep_r();
  a << "vmuls.fp32 " + dXh + ", " + dXh + ", r13" << "vmul.fp32 " + dZ + ", " + dXh + ", " + dG << "vadd.fp32 " + dZ + ", " + dZ + ", " + dB;
}

void emit_ln_bwd(kernels::PeAsm& a, int n, const std::string& dG, const std::string& dXh, const std::string& dL1,
                 const std::string& dL2, const std::string& dGam, const std::string& dOnes, const std::string& ra1,
                 const std::string& ra2, const std::function<void()>& load_r) {
  const std::string inv_n = kernels::f32_literal(1.0f / static_cast<float>(n));
  a << "vmul.fp32 " + dL1 + ", " + dG + ", " + dGam;
  a << "vsum.fp32 " + ra1 + ", " + dL1 << "lif r13, " + inv_n << "fmul " + ra1 + ", " + ra1 + ", r13" << "lif r13, -1.0"
    << "fmul " + ra1 + ", " + ra1 + ", r13";
  a << "vmul.fp32 " + dL2 + ", " + dL1 + ", " + dXh << "vsum.fp32 " + ra2 + ", " + dL2 << "lif r13, " + inv_n
    << "fmul " + ra2 + ", " + ra2 + ", r13" << "lif r13, -1.0" << "fmul " + ra2 + ", " + ra2 + ", r13";
  a << "vfmacs.fp32 " + dL1 + ", " + dL1 + ", " + dOnes + ", " + ra1 << "vfmacs.fp32 " + dL1 + ", " + dL1 + ", " + dXh + ", " + ra2;
  load_r();
  a << "vmuls.fp32 " + dG + ", " + dL1 + ", r13";
}

std::string conv_tap_table(const ConvParams& cv, const std::string& sym) {
  std::string tbl = ".data " + sym + ", i32";
  for (const ConvTap& t : conv_taps(cv)) {
    const long long xo = 4LL * ((static_cast<long long>(t.ci) * cv.h + t.oy0 * cv.sh - cv.pt + t.ky) * cv.w + t.ox0 * cv.sw - cv.pl + t.kx);
    const long long ao = 4LL * (static_cast<long long>(t.oy0) * cv.wo + t.ox0);
    tbl += ", " + S(t.oy1 > t.oy0 ? xo : 0) + ", " + S(ao) + ", " + S(t.ox1 - t.ox0) + ", " + S(static_cast<long long>(t.oy1 - t.oy0) * (t.ox1 - t.ox0));
  }
  return tbl;
}

int intern_fitting(FabricProgram& prog, const std::string& prefix, const std::string& source, const AsmTarget& t,
                   const std::string& what) {
  try {
    return kernels::intern_image(prog, prefix, source, t);
  } catch (const AsmError& e) {
    const std::string msg = e.what();
    if (msg.find("expected a descriptor register") != std::string::npos) {
      // A kernel whose roles add up to more descriptors than the core has (a convolution's root
      // with residual streams, replicas' sums and a long activation program, say).
      throw CompileError(what + ": its PE's program needs more descriptor registers than core.dsd_regs (" + msg +
                         "); use compile.replicas 1, or a larger core.dsd_regs");
    }
    if (msg.find("does not fit in SRAM") == std::string::npos) throw;
    throw CompileError(what + ": its PE's program does not fit core.sram_kb (" + msg +
                       "); use a larger core.sram_kb, or a smaller model: fewer channels, smaller planes or pooling windows");
  }
}

std::string pool_div_table(const ConvParams& cv, const PoolParams& q, const std::string& sym) {
  if (q.kind != PoolParams::kAvg || pool_uniform(q)) return "";
  std::string tbl = ".data " + sym + ", i32";
  for (int py = 0; py < q.hq; ++py) {
    for (int px = 0; px < q.wq; ++px) tbl += ", " + S(static_cast<long long>(f32_bits(pool_inv(cv, q, py, px))));
  }
  return tbl;
}

namespace {

// A padded pooling's rows of windows in runs that see the same kernel rows (the rest fall in
// the padding): [first, end) and which ky are inside the plane.
struct PoolRowRun {
  int first = 0, end = 0;
  std::vector<bool> ky;
};
std::vector<PoolRowRun> pool_row_runs(const ConvParams& cv, const PoolParams& q) {
  std::vector<PoolRowRun> runs;
  for (int py = 0; py < q.hq; ++py) {
    std::vector<bool> in(static_cast<size_t>(q.kh));
    for (int ky = 0; ky < q.kh; ++ky) {
      const int iy = py * q.sh - q.pt + ky;
      in[static_cast<size_t>(ky)] = iy >= 0 && iy < cv.ho;
    }
    if (runs.empty() || runs.back().ky != in) runs.push_back({py, py, in});
    runs.back().end = py + 1;
  }
  return runs;
}

// The padded forms of emit_pool_fwd/bwd (ws_plan.h pool_forward's padded order): per run of
// rows a loop whose body takes each tap inside the plane over the windows that have it.
void emit_pool_fwd_padded(kernels::PeAsm& a, const ConvParams& cv, const PoolParams& q, const PoolDsd& d, const std::string& L_) {
  const bool max = q.kind == PoolParams::kMax, table = !max && !pool_uniform(q);
  const long long row0 = -4LL * (static_cast<long long>(q.pt) * cv.wo + q.pl);
  a << "li r13, 1" << "dstride " + d.pq + ", r13" << "li r13, " + S(q.sw) << "dstride " + d.py + ", r13" << "addi r6, r3, " + S(row0)
    << "mov r7, r4";
  if (table) a << "li r13, " + S(q.wq) << "dlen " + d.cm + ", r13" << "li r13, 1" << "dstride " + d.cm + ", r13";
  int k = 0;
  for (const PoolRowRun& run : pool_row_runs(cv, q)) {
    const std::string lbl = "ppr_" + L_ + "_" + S(k++);
    a << "li r8, " + S(run.first) << lbl + ":" << "li r13, " + S(q.wq) << "dlen " + d.pq + ", r13" << "dbase " + d.pq + ", r7"
      << "lif r13, " + kernels::f32_literal(max ? -std::numeric_limits<float>::infinity() : 0.0f) << "vfill.fp32 " + d.pq + ", r13";
    for (int ky = 0; ky < q.kh; ++ky) {
      if (!run.ky[static_cast<size_t>(ky)]) continue;
      for (int kx = 0; kx < q.kw; ++kx) {
        const PoolSpan sp = pool_span(cv, q, ky, kx);
        if (sp.x1 <= sp.x0) continue;
        a << "li r13, " + S(sp.x1 - sp.x0) << "dlen " + d.pq + ", r13" << "dlen " + d.py + ", r13" << "addi r13, r7, " + S(4LL * sp.x0)
          << "dbase " + d.pq + ", r13" << "addi r13, r6, " + S(4LL * (static_cast<long long>(ky) * cv.wo + kx + static_cast<long long>(sp.x0) * q.sw))
          << "dbase " + d.py + ", r13" << std::string(max ? "vmax" : "vadd") + ".fp32 " + d.pq + ", " + d.pq + ", " + d.py;
      }
    }
    if (!max) {
      a << "li r13, " + S(q.wq) << "dlen " + d.pq + ", r13" << "dbase " + d.pq + ", r7";
      if (table) {
        a << "sub r13, r7, r4" << "addi r13, r13, " + d.dv << "dbase " + d.cm + ", r13" << "vmul.fp32 " + d.pq + ", " + d.pq + ", " + d.cm;
      } else {
        a << "lif r13, " + kernels::f32_literal(1.0f / static_cast<float>(q.kh * q.kw)) << "vmuls.fp32 " + d.pq + ", " + d.pq + ", r13";
      }
    }
    a << "addi r6, r6, " + S(4LL * q.sh * cv.wo) << "addi r7, r7, " + S(4LL * q.wq) << "addi r8, r8, 1" << "li r13, " + S(run.end)
      << "bne r8, r13, " + lbl;
  }
}

void emit_pool_bwd_padded(kernels::PeAsm& a, const ConvParams& cv, const PoolParams& q, const PoolDsd& d, const std::string& L_) {
  const bool max = q.kind == PoolParams::kMax, table = !max && !pool_uniform(q);
  const long long row0 = -4LL * (static_cast<long long>(q.pt) * cv.wo + q.pl);
  a << "li r13, " + S(q.sw) << "dstride " + d.py + ", r13" << "dstride " + d.dt + ", r13" << "li r13, 1" << "dstride " + d.pq + ", r13"
    << "dstride " + d.gq + ", r13";
  if (table) a << "dstride " + d.cm + ", r13";
  a << "addi r6, r3, " + S(row0) << "addi r8, r15, " + S(row0) << "mov r7, r4" << "mov r14, r11";
  // The descriptors a tap's ops read, and those whose base moves to its first window.
  std::vector<std::string> lens{d.pq, d.py, d.gq, d.dt}, moved{d.pq, d.gq};
  if (max) {
    for (const std::string& x : {d.rr, d.cm, d.tt, d.zero}) lens.push_back(x);
    moved.push_back(d.rr);
  }
  int k = 0;
  for (const PoolRowRun& run : pool_row_runs(cv, q)) {
    const std::string lbl = "pbr_" + L_ + "_" + S(k++);
    a << "li r9, " + S(run.first) << lbl + ":" << "li r13, " + S(q.wq);
    for (const std::string& x : lens) a << "dlen " + x + ", r13";
    if (table) a << "dlen " + d.cm + ", r13";
    a << "dbase " + d.pq + ", r7" << "dbase " + d.gq + ", r14";
    if (max) a << "vmov.fp32 " + d.rr + ", " + d.gq;
    if (table) a << "sub r13, r14, r11" << "addi r13, r13, " + d.dv << "dbase " + d.cm + ", r13" << "vmul.fp32 " + d.gq + ", " + d.gq + ", " + d.cm;
    for (int ky = 0; ky < q.kh; ++ky) {
      if (!run.ky[static_cast<size_t>(ky)]) continue;
      for (int kx = 0; kx < q.kw; ++kx) {
        const PoolSpan sp = pool_span(cv, q, ky, kx);
        if (sp.x1 <= sp.x0) continue;
        const long long off = 4LL * (static_cast<long long>(ky) * cv.wo + kx + static_cast<long long>(sp.x0) * q.sw), x0 = 4LL * sp.x0;
        a << "li r13, " + S(sp.x1 - sp.x0);
        for (const std::string& x : lens) a << "dlen " + x + ", r13";
        if (x0) {
          for (const std::string& x : moved) a << "daddb " + x + ", " + S(x0);
        }
        a << "addi r13, r6, " + S(off) << "dbase " + d.py + ", r13" << "addi r13, r8, " + S(off) << "dbase " + d.dt + ", r13";
        if (max) {
          a << "vcmpgt.fp32 " + d.cm + ", " + d.pq + ", " + d.py << "vsel.fp32 " + d.tt + ", " + d.cm + ", " + d.zero + ", " + d.rr
            << "vadd.fp32 " + d.dt + ", " + d.dt + ", " + d.tt << "vsel.fp32 " + d.rr + ", " + d.cm + ", " + d.rr + ", " + d.zero;
        } else if (table) {
          a << "vadd.fp32 " + d.dt + ", " + d.dt + ", " + d.gq;
        } else {
          a << "lif r13, " + kernels::f32_literal(1.0f / static_cast<float>(q.kh * q.kw)) << "vaxpy.fp32 " + d.dt + ", " + d.gq + ", r13";
        }
        if (x0) {
          for (const std::string& x : moved) a << "daddb " + x + ", " + S(-x0);
        }
      }
    }
    a << "addi r6, r6, " + S(4LL * q.sh * cv.wo) << "addi r8, r8, " + S(4LL * q.sh * cv.wo) << "addi r7, r7, " + S(4LL * q.wq)
      << "addi r14, r14, " + S(4LL * q.wq) << "addi r9, r9, 1" << "li r13, " + S(run.end) << "bne r9, r13, " + lbl;
  }
}

}  // namespace

void emit_pool_fwd(kernels::PeAsm& a, const ConvParams& cv, const PoolParams& q, long long planes, const PoolDsd& d,
                   const std::string& tag) {
  const long long P = static_cast<long long>(cv.ho) * cv.wo, Pq = static_cast<long long>(q.hq) * q.wq;
  const std::string inv = kernels::f32_literal(1.0f / static_cast<float>(q.kh * q.kw)), &L_ = tag;
  a << "mov r3, r1" << "mov r4, r2" << "li r5, 0" << "pps_" + L_ + ":";
  if (q.padded()) {
    emit_pool_fwd_padded(a, cv, q, d, L_);
  } else if (whole_plane(cv, q)) {
    a << "li r13, " + S(P) << "dlen " + d.py + ", r13" << "li r13, 1" << "dstride " + d.py + ", r13" << "dbase " + d.py + ", r3"
      << "vsum.fp32 r13, " + d.py << "lif r14, " + inv << "fmul r13, r13, r14" << "st32 [r4], r13";
  } else if (whole_plane_max(cv, q)) {
    // The taps in element order, as the unrolled form's (the same vmax's).
    a << "li r13, 1" << "dlen " + d.pq + ", r13" << "dlen " + d.py + ", r13" << "dbase " + d.pq + ", r4" << "dbase " + d.py + ", r3"
      << "vmov.fp32 " + d.pq + ", " + d.py;
    if (P > 1) {
      a << "li r8, 1" << "pmx_" + L_ + ":" << "daddb " + d.py + ", 4" << "vmax.fp32 " + d.pq + ", " + d.pq + ", " + d.py << "addi r8, r8, 1"
        << "li r13, " + S(P) << "bne r8, r13, pmx_" + L_;
    }
  } else {
    a << "li r13, " + S(q.wq) << "dlen " + d.pq + ", r13" << "dlen " + d.py + ", r13" << "li r13, " + S(q.sw) << "dstride " + d.py + ", r13"
      << "li r13, 1" << "dstride " + d.pq + ", r13" << "mov r6, r3" << "mov r7, r4" << "li r8, 0" << "ppr_" + L_ + ":" << "dbase " + d.pq + ", r7";
    for (int ky = 0; ky < q.kh; ++ky) {
      for (int kx = 0; kx < q.kw; ++kx) {
        a << "addi r13, r6, " + S(4LL * (static_cast<long long>(ky) * cv.wo + kx)) << "dbase " + d.py + ", r13";
        if (ky == 0 && kx == 0) a << "vmov.fp32 " + d.pq + ", " + d.py;
        else a << std::string(q.kind == PoolParams::kMax ? "vmax" : "vadd") + ".fp32 " + d.pq + ", " + d.pq + ", " + d.py;
      }
    }
    if (q.kind == PoolParams::kAvg) a << "lif r13, " + inv << "vmuls.fp32 " + d.pq + ", " + d.pq + ", r13";
    a << "addi r6, r6, " + S(4LL * q.sh * cv.wo) << "addi r7, r7, " + S(4LL * q.wq) << "addi r8, r8, 1" << "li r13, " + S(q.hq)
      << "bne r8, r13, ppr_" + L_;
  }
  a << "addi r3, r3, " + S(4 * P) << "addi r4, r4, " + S(4 * Pq) << "addi r5, r5, 1" << "li r13, " + S(planes) << "bne r5, r13, pps_" + L_;
}

void emit_pool_bwd(kernels::PeAsm& a, const ConvParams& cv, const PoolParams& q, long long planes, const PoolDsd& d,
                   const std::string& dz_sym, const std::string& gq_sym, const std::string& tag) {
  const long long P = static_cast<long long>(cv.ho) * cv.wo, Pq = static_cast<long long>(q.hq) * q.wq;
  const std::string inv = kernels::f32_literal(1.0f / static_cast<float>(q.kh * q.kw)), &L_ = tag;
  a << "li r13, " + S(planes * P) << "dlen " + d.zp + ", r13" << "li r13, " + dz_sym << "dbase " + d.zp + ", r13" << "vfill.fp32 " + d.zp + ", r0";
  a << "mov r3, r1" << "mov r4, r2" << "li r15, " + dz_sym << "li r11, " + gq_sym << "li r5, 0" << "pbs_" + L_ + ":";
  if (q.padded()) {
    emit_pool_bwd_padded(a, cv, q, d, L_);
  } else if (whole_plane(cv, q)) {
    a << "li r13, " + S(P) << "dlen " + d.zp + ", r13" << "dbase " + d.zp + ", r15" << "ld32 r13, [r11]" << "lif r14, " + inv
      << "fmul r13, r13, r14" << "vfill.fp32 " + d.zp + ", r13";
  } else if (whole_plane_max(cv, q)) {
    // The gradient to the first largest element, tap after tap as the unrolled form's.
    a << "li r13, 1";
    for (const std::string& x : {d.pq, d.py, d.gq, d.dt, d.rr, d.cm, d.tt, d.zero}) a << "dlen " + x + ", r13";
    a << "dbase " + d.pq + ", r4" << "dbase " + d.gq + ", r11" << "vmov.fp32 " + d.rr + ", " + d.gq << "dbase " + d.py + ", r3"
      << "dbase " + d.dt + ", r15" << "li r8, 0" << "pbx_" + L_ + ":" << "vcmpgt.fp32 " + d.cm + ", " + d.pq + ", " + d.py
      << "vsel.fp32 " + d.tt + ", " + d.cm + ", " + d.zero + ", " + d.rr << "vadd.fp32 " + d.dt + ", " + d.dt + ", " + d.tt
      << "vsel.fp32 " + d.rr + ", " + d.cm + ", " + d.rr + ", " + d.zero << "daddb " + d.py + ", 4" << "daddb " + d.dt + ", 4"
      << "addi r8, r8, 1" << "li r13, " + S(P) << "bne r8, r13, pbx_" + L_;
  } else {
    a << "li r13, " + S(q.wq);
    for (const std::string& x : {d.pq, d.py, d.gq, d.dt}) a << "dlen " + x + ", r13";
    if (q.kind == PoolParams::kMax) {
      for (const std::string& x : {d.rr, d.cm, d.tt, d.zero}) a << "dlen " + x + ", r13";
    }
    a << "li r13, " + S(q.sw) << "dstride " + d.py + ", r13" << "dstride " + d.dt + ", r13" << "li r13, 1" << "dstride " + d.pq + ", r13"
      << "dstride " + d.gq + ", r13" << "mov r6, r3" << "mov r7, r4" << "mov r8, r15" << "mov r14, r11" << "li r9, 0"
      << "pbr_" + L_ + ":" << "dbase " + d.pq + ", r7" << "dbase " + d.gq + ", r14";
    if (q.kind == PoolParams::kMax) a << "vmov.fp32 " + d.rr + ", " + d.gq;
    for (int ky = 0; ky < q.kh; ++ky) {
      for (int kx = 0; kx < q.kw; ++kx) {
        const long long off = 4LL * (static_cast<long long>(ky) * cv.wo + kx);
        a << "addi r13, r6, " + S(off) << "dbase " + d.py + ", r13" << "addi r13, r8, " + S(off) << "dbase " + d.dt + ", r13";
        if (q.kind == PoolParams::kMax) {
          a << "vcmpgt.fp32 " + d.cm + ", " + d.pq + ", " + d.py << "vsel.fp32 " + d.tt + ", " + d.cm + ", " + d.zero + ", " + d.rr
             << "vadd.fp32 " + d.dt + ", " + d.dt + ", " + d.tt << "vsel.fp32 " + d.rr + ", " + d.cm + ", " + d.rr + ", " + d.zero;
        } else {
          a << "lif r13, " + inv << "vaxpy.fp32 " + d.dt + ", " + d.gq + ", r13";
        }
      }
    }
    a << "addi r6, r6, " + S(4LL * q.sh * cv.wo) << "addi r8, r8, " + S(4LL * q.sh * cv.wo) << "addi r7, r7, " + S(4LL * q.wq)
      << "addi r14, r14, " + S(4LL * q.wq) << "addi r9, r9, 1" << "li r13, " + S(q.hq) << "bne r9, r13, pbr_" + L_;
  }
  a << "addi r3, r3, " + S(4 * P) << "addi r4, r4, " + S(4 * Pq) << "addi r15, r15, " + S(4 * P) << "addi r11, r11, " + S(4 * Pq)
    << "addi r5, r5, 1" << "li r13, " + S(planes) << "bne r5, r13, pbs_" + L_;
}

void emit_softmax_grad(kernels::PeAsm& a, int batch, const std::string& dG) {
  a << "li r14, g" << "add r14, r14, r10" << "ld32 r13, [r14]" << "lif r9, 1.0" << "fsub r13, r13, r9" << "st32 [r14], r13";
  a << "lif r13, " + kernels::f32_literal(1.0f / static_cast<float>(batch)) << "vmuls.fp32 " + dG + ", " + dG + ", r13";
}

namespace {

struct RootColors {
  int fin = -1, yout = -1, dxin = -1, dyout = -1, label = -1, loss = -1;
  // Residual connections (LayerPlan::residual): as the target, the source's values in and the
  // sum's gradient out; as the source, its values out and the sum's gradient in.
  int skin = -1, sgout = -1, skout = -1, sgin = -1;
  int skip_depth = 0;  // slots of each ring that takes a residual stream in
  bool skip_pre = false;  // as the target, the sum is taken before the activation (residual_pre)
};

// A root's residual streams (docs/compiler.md, "Residual connections"): as the target `nt`
// values a sample (its sum's slice), as the source `ns` (its output's slice; a convolution's
// root may pool the sum it makes before it sends it on as a source).
// A stream a root takes in is read asynchronously into a ring of `depth` slots as it comes (so
// its sender never waits on this root's work), one sample's slice a slot; its completion task
// (6: the source's values, 7: the sum's gradient) counts the slot and reads on while a slot is
// free. Where the slice has not come yet, the root's task waits (fwait, dwait) and the completion
// task goes on with it at fj_go or dj_go. The rings' write and read slots are kept in SRAM (skw,
// skrd, sgw, sgrd; r13 to r15 scratch). As the target a root takes the source's values (skr) and
// sends the sum's gradient from sgo (microthread 5); as the source it sends its values
// (microthread 4) and takes the sum's gradient (sgr).
struct SkipStreams {
  kernels::PeAsm& a;
  long long nt, ns;
  int D;
  bool target, source;
  std::string dSkIn, dSkW, dSkR, dSgo, dSgOut, dSkOut, dSgIn, dSgW, dSgR, dFence, arm_skip, arm_sg;

  SkipStreams(kernels::PeAsm& as, const RootColors& c, long long n_target, long long n_source)
      : a(as), nt(n_target), ns(n_source), D(c.skip_depth), target(c.skin >= 0), source(c.skout >= 0) {
    if (target) a.inq(c.skin), a.task("6, skgot");
    if (source) a.inq(c.sgin), a.task("7, sggot");
  }
  void data() {
    if (target) {
      a.data(".space skr, fp32, " + S(static_cast<long long>(D) * nt));
      a.data(".space sgo, fp32, " + S(nt));
      a.data(".space skc, i32, 1\n.space skw, i32, 1\n.space skrd, i32, 1\n.space fwait, i32, 1");
    }
    if (source) {
      a.data(".space sgr, fp32, " + S(static_cast<long long>(D) * ns));
      a.data(".space sgc, i32, 1\n.space sgw, i32, 1\n.space sgrd, i32, 1\n.space dwait, i32, 1");
    }
    if (target || source) a.data(".space sfence, fp32, 1");
  }
  // The descriptors (in init), given the colors.
  void descriptors(const RootColors& c) {
    const uint32_t t = static_cast<uint32_t>(nt), n = static_cast<uint32_t>(ns);
    if (target) dSkIn = a.fin(c.skin, t), dSkW = a.mem("skr", t), dSkR = a.mem("skr", t), dSgo = a.mem("sgo", t), dSgOut = a.fout(c.sgout, t);
    if (source) dSkOut = a.fout(c.skout, n), dSgIn = a.fin(c.sgin, n), dSgW = a.mem("sgr", n), dSgR = a.mem("sgr", n);
    if (target || source) dFence = a.mem("sfence", 1);
    if (target) arm_skip = "vmov.fp32 " + dSkW + ", " + dSkIn + ", async=6, done=activate:6";
    if (source) arm_sg = "vmov.fp32 " + dSgW + ", " + dSgIn + ", async=7, done=activate:7";
  }
  // The rings' slots and their first reads (in init).
  void start() {
    if (target) a << "li r15, skr" << "st32 [r0+skw], r15" << "st32 [r0+skrd], r15" << "dbase " + dSkW + ", r15" << "dbase " + dSkR + ", r15" << arm_skip;
    if (source) a << "li r15, sgr" << "st32 [r0+sgw], r15" << "st32 [r0+sgrd], r15" << "dbase " + dSgW + ", r15" << "dbase " + dSgR + ", r15" << arm_sg;
  }
  // The completion tasks: a slot is in: count it, move to the next slot (the ring wraps), read on
  // while a slot is free; a task that waited for it goes on.
  void handlers() {
    auto got = [&](const std::string& tag, const std::string& ring, const std::string& cnt, const std::string& wptr, const std::string& dW,
                   const std::string& arm, const std::string& wait, const std::string& resume, long long no) {
      a << tag + ":" << "ld32 r13, [r0+" + cnt + "]" << "addi r13, r13, 1" << "st32 [r0+" + cnt + "], r13" << "ld32 r15, [r0+" + wptr + "]"
        << "addi r15, r15, " + S(4LL * no) << "li r14, " + ring + "+" + S(4LL * D * no) << "bne r15, r14, " + tag + "_w"
        << "li r15, " + ring << tag + "_w:" << "st32 [r0+" + wptr + "], r15" << "dbase " + dW + ", r15" << "li r14, " + S(D)
        << "beq r13, r14, " + tag + "_f" << arm
        << tag + "_f:" << "ld32 r13, [r0+" + wait + "]" << "beq r13, r0, " + tag + "_x" << "st32 [r0+" + wait + "], r0" << "jmp " + resume
        << tag + "_x:" << "exit";
    };
    if (target) got("skgot", "skr", "skc", "skw", dSkW, arm_skip, "fwait", "fj_go", nt);
    if (source) got("sggot", "sgr", "sgc", "sgw", dSgW, arm_sg, "dwait", "dj_go", ns);
  }
  // The task waits (exits) until the ring holds a slot, then goes on at fj_go (the source's
  // values) or dj_go (the sum's gradient) with dSkR or dSgR on it.
  void wait_values() { a << "ld32 r13, [r0+skc]" << "bne r13, r0, fj_go" << "li r13, 1" << "st32 [r0+fwait], r13" << "exit" << "fj_go:"; }
  void wait_grad() { a << "ld32 r13, [r0+sgc]" << "bne r13, r0, dj_go" << "li r13, 1" << "st32 [r0+dwait], r13" << "exit" << "dj_go:"; }
  // After the read slot's values are used: the next slot, one fewer in the ring, and the read
  // resumed if the ring was full.
  void take(bool grad) {
    const std::string tag = grad ? "dj" : "fj", ring = grad ? "sgr" : "skr", cnt = grad ? "sgc" : "skc", rptr = grad ? "sgrd" : "skrd";
    const std::string& dR = grad ? dSgR : dSkR;
    const std::string& arm = grad ? arm_sg : arm_skip;
    const long long no = grad ? ns : nt;
    a << "ld32 r15, [r0+" + rptr + "]" << "addi r15, r15, " + S(4LL * no) << "li r14, " + ring + "+" + S(4LL * D * no)
      << "bne r15, r14, " + tag + "_r" << "li r15, " + ring << tag + "_r:" << "st32 [r0+" + rptr + "], r15" << "dbase " + dR + ", r15"
      << "ld32 r13, [r0+" + cnt + "]" << "addi r13, r13, -1"
      << "st32 [r0+" + cnt + "], r13" << "li r14, " + S(D - 1) << "bne r13, r14, " + tag + "_n" << arm << tag + "_n:";
  }
  // The sum's gradient dG to the source, from sgo once the last send from it is through.
  void send_grad(const std::string& dG) {
    a << "vmov.fp32 " + dFence + ", " + dFence + ", async=5" << "vmov.fp32 " + dSgo + ", " + dG << "vmov.fp32 " + dSgOut + ", " + dSgo + ", async=5";
  }
  // The source's values (dV, kept until the next send from it) to the target.
  void send_values(const std::string& dV) { a << "vmov.fp32 " + dSkOut + ", " + dV + ", async=4"; }
};

// A root: the bias of its output slice, the activation (ring of outputs for the derivative),
// or for the last layer softmax cross-entropy against the label from the host.
// Registers: r0 0, r3/r11 forward/backward ring slot, r5/r6 forward/backward samples of this
// minibatch, r7 batch, r12 ring end, r9 r10 r13 r14 scratch.
// With a lookahead of F > 0 samples, r5 and r6 count since the last update (as in a tile) and
// the update is task 5. The last layer's root computes the lookahead samples' bias gradients
// with the old bias and keeps them (stash, r3 its pointer, r12 its end) until after the update,
// then adds them in sample order: the same sums as if they had waited.
// With replicas (`sum` set), `batch` is the copy's samples of a minibatch, `scale` the
// minibatch's (the loss gradient's 1 / scale), and the bias gradients go to a buffer GB that
// the update sums over the copies (emit_sum) before VB += GB.
// Residual connections (docs/compiler.md, "Residual connections"). A stream a root takes in is
// read asynchronously into a ring of skip_depth slots as it comes (so its sender never waits
// on this root's work), one sample's slice a slot; its completion task (6: the source's values,
// 7: the sum's gradient) counts the slot and reads on while a slot is free. The target root,
// after its activation (R, kept in yring for the derivative), adds the source's slice of the
// sample, X = X_k + R, into xring (beside yring) and sends X on instead of R; backward, it sends
// the sum's gradient (the incoming dx, before the derivative) to the source from `sgo`. The
// source root sends its outputs once more to the target, and adds the sum's gradient to its
// incoming dx before the derivative. Where the slice has not come yet, the task waits
// (fwait, dwait) and the completion task goes on with it. The rings' write and read slots are
// kept in SRAM (skw, skrd, sgw, sgrd; r15 scratch): the replicas' sum takes r1 and r2.
// A LayerNorm (`ln`, its root alone holds the layer's outputs): per sample, after the bias,
// mean and variance by vsum, 1 / sqrt(var + eps) as e^(-0.5 log(.)) on one element, x^ = (z -
// mean) r kept in the ring's third region (r in its fourth), u = gamma x^ + beta, then the
// activation; backward, after the activation's derivative g: vg += g x^, vbeta += g, then
// g = r (g gamma - mean(g gamma) - x^ mean(g gamma x^)); gamma and beta update with the bias.
// reference.cc layer_norm and layer_norm_grad do the same operations in the same order.
std::string root_source(int no, Activation act, const ActParams& alpha, bool last, const RootColors& c, int batch, int depth, int lookahead,
                        const TrainHyper& h, int scale, const SumSpec* sum, const LayerNormParams* ln = nullptr) {
  PeAsm a;
  bind_sum_queues(a, sum);
  a.inq(c.fin);
  if (c.dxin >= 0) a.inq(c.dxin);
  if (c.label >= 0) a.inq(c.label);
  a.task("0, init, active");
  a.task("1, dysent");
  if (!last) a.task("2, ysent");
  if (!last) a.task("3, dxgot");
  a.task("4, fwdgot");
  const int F = lookahead;
  if (F > 0) a.task("5, update");
  SkipStreams sk(a, c, no, no);
  const bool target = sk.target, source = sk.source;
  const std::string N = S(no);
  a.data(".space b, fp32, " + N);
  a.data(".space vb, fp32, " + N);
  a.data(".space acc, fp32, " + N);
  a.data(".space g, fp32, " + N);
  a.data(".space t, fp32, " + N);
  a.data(".space nupd, fp32, 1");
  // Replicas: the gradients summed over the copies, the bias's, then a LayerNorm's gamma's and
  // beta's (one segment of the column's sum).
  if (sum) a.data(".space gsum, fp32, " + S(static_cast<long long>(ln ? 3 : 1) * no));
  // A GELU keeps z for its derivative (yring) and sends y from the second half of the ring.
  const bool gelu = act_needs_pre(act);
  const bool ones = act_uses_ones(act, alpha) || gelu || ln;
  if (ones) a.data(".space ones, fp32, " + N);
  if (gelu) a.data(".space ga, fp32, " + N + "\n.space gb, fp32, " + N + "\n.space gc, fp32, " + N);
  // With a residual connection into it or a GELU, xring (the sums, or y) follows yring: slot i
  // at yring + X.
  const bool pre_sum = target && c.skip_pre;  // the sum before the activation: in acc
  // A LayerNorm after the activation (ln->post) normalises a copy of y in xring's slot: y (or a
  // GELU's z) stays for the derivative.
  const bool ln_post = ln && ln->post;
  const bool xring = (target && !pre_sum) || gelu || ln_post;
  if (!last) a.data(".space yring, fp32, " + S(static_cast<long long>(ln ? 4 : xring ? 2 : 1) * depth * no));
  if (ln) {
    a.data(".space lng, fp32, " + N + "\n.space lnb, fp32, " + N + "\n.space lnvg, fp32, " + N + "\n.space lnvb, fp32, " + N);
    a.data(".space lt1, fp32, " + N + "\n.space lt2, fp32, " + N + "\n.space lsc, fp32, 1");
  }
  const long long xoff = 4LL * depth * no;
  sk.data();
  if (F > 0) a.data(".space drain, i32, 1");
  if (F > 0 && last) a.data(".space stash, fp32, " + S(static_cast<long long>(F) * no));
  if (last) {
    a.data(".space z, fp32, " + N);
    a.data(".space e, fp32, " + N);
    a.data(".space mvec, fp32, " + N);
    a.data(".space lab, i32, 1");
    a.data(".space s1, fp32, 1");
    a.data(".space l1, fp32, 1");
    a.data(".space q1, fp32, 1");
    a.data(".space lossv, fp32, 1");
  }
  const uint32_t n = static_cast<uint32_t>(no);
  a << "init:";
  const std::string dB = a.mem("b", n), dVB = a.mem("vb", n), dAcc = a.mem("acc", n), dG = a.mem("g", n), dT = a.mem("t", n);
  const std::string dFin = a.fin(c.fin, n), dDYO = a.fout(c.dyout, n);
  const std::string dGB = sum ? a.mem("gsum", n) : dVB;  // where the bias gradients add up
  const SumDsd sum_dsd = sum ? prepare_sum(a, *sum) : SumDsd{};
  std::string dOnes, dYO, dDXI, dYf, dYb;
  if (ones) dOnes = a.mem("ones", n);
  if (!last) {
    dYO = a.fout(c.yout, n);
    dDXI = a.fin(c.dxin, n);
    dYf = a.mem("yring", n);
    dYb = a.mem("yring", n);
  }
  std::string dXf;
  if (xring && !last) dXf = a.mem("yring", n);
  std::string dLg, dLb, dLvg, dLvb, dXh, dL1, dL2, dLs, dGLg, dGLb, dGsum;
  if (ln) {
    dLg = a.mem("lng", n), dLb = a.mem("lnb", n), dLvg = a.mem("lnvg", n), dLvb = a.mem("lnvb", n);
    // Where gamma's and beta's gradients add up: their momenta, or with replicas gsum's segments.
    dGLg = sum ? a.mem("gsum+" + S(4LL * no), n) : dLvg;
    dGLb = sum ? a.mem("gsum+" + S(8LL * no), n) : dLvb;
    if (sum) dGsum = a.mem("gsum", 3 * n);
    dXh = a.mem("yring", n), dL1 = a.mem("lt1", n), dL2 = a.mem("lt2", n), dLs = a.mem("lsc", 1);
  }
  const std::string inv_n = kernels::f32_literal(1.0f / static_cast<float>(no));
  std::string t4[4];
  if (gelu) t4[1] = a.mem("ga", n), t4[2] = a.mem("gb", n), t4[3] = a.mem("gc", n);
  sk.descriptors(c);
  const std::string arm_fwd = "vadd.fp32 " + dAcc + ", " + dFin + ", " + dB + ", async=0, done=activate:4";
  const std::string arm_dx = last ? "" : "vmov.fp32 " + dG + ", " + dDXI + ", async=2, done=activate:3";
  a << "li r0, 0" << "li r5, 0" << "li r6, 0" << "li r7, " + S(batch);
  if (!last) a << "li r3, yring" << "li r11, yring" << "li r12, yring+" + S(4LL * depth * no);
  std::string dStash;
  if (F > 0 && last) {
    dStash = a.mem("stash", n);
    a << "li r3, stash" << "li r12, stash+" + S(4LL * F * no);
  }
  if (ones) a << "lif r13, 1.0" << "vfill.fp32 " + dOnes + ", r13";
  sk.start();
  a << arm_fwd;
  if (!last) a << arm_dx;
  a << "exit";

  sk.handlers();

  auto bias_update = [&] {
    if (sum) {
      emit_sum(a, *sum, sum_dsd, ln ? dGsum : dGB);
      a << "vadd.fp32 " + dVB + ", " + dVB + ", " + dGB;
      if (ln) a << "vadd.fp32 " + dLvg + ", " + dLvg + ", " + dGLg << "vadd.fp32 " + dLvb + ", " + dLvb + ", " + dGLb;
      a << "vfill.fp32 " + (ln ? dGsum : dGB) + ", r0";
    }
    a << "lif r13, " + kernels::f32_literal(-h.lr) << "vaxpy.fp32 " + dB + ", " + dVB + ", r13";
    a << "lif r13, " + kernels::f32_literal(h.momentum) << "vmuls.fp32 " + dVB + ", " + dVB + ", r13";
    if (ln) {
      a << "lif r13, " + kernels::f32_literal(-h.lr) << "vaxpy.fp32 " + dLg + ", " + dLvg + ", r13" << "vaxpy.fp32 " + dLb + ", " + dLvb + ", r13";
      a << "lif r13, " + kernels::f32_literal(h.momentum) << "vmuls.fp32 " + dLvg + ", " + dLvg + ", r13"
        << "vmuls.fp32 " + dLvb + ", " + dLvb + ", r13";
    }
  };
  auto count_update = [&] { a << "ld32 r9, [r0+nupd]" << "lif r10, 1.0" << "fadd r9, r9, r10" << "st32 [r0+nupd], r9"; };
  auto check_update = [&](const std::string& tag) { emit_check_update(a, batch, F, 5, tag); };
  if (F == 0) {
    a << "dysent:" << "addi r6, r6, 1" << "bne r6, r7, dy_more";
    bias_update();
    a << "li r5, 0" << "li r6, 0";
    if (!last) a << "li r3, yring" << "li r11, yring" << "dbase " + dYf + ", r3" << "dbase " + dYb + ", r11";
    count_update();
    a << arm_fwd;
    if (!last) a << arm_dx;
    a << "exit";
    a << "dy_more:";
    a << (last ? arm_fwd : arm_dx) << "exit";
  } else if (!last) {
    a << "dysent:" << "addi r6, r6, 1" << "bne r6, r7, dy_more";
    check_update("dy_c");
    a << "exit";
    a << "dy_more:" << arm_dx << "exit";
    a << "update:";
    bias_update();
    a << "addi r5, r5, -" + S(batch) << "li r6, 0" << "bne r5, r0, ru_keep" << "li r3, yring" << "li r11, yring"
      << "dbase " + dYf + ", r3" << "dbase " + dYb + ", r11" << "ru_keep:";
    count_update();
    a << arm_dx << "li r13, " + S(F) << "bne r5, r13, ru_x" << arm_fwd << "ru_x:" << "exit";
  } else {
    // The last root: r6 counts the gradients sent since the update, the lookahead's included.
    a << "dysent:" << "addi r6, r6, 1" << "li r13, " + S(batch + F) << "beq r6, r13, ld_upd" << "bne r6, r7, ld_more"
      << "ld32 r13, [r0+drain]" << "beq r13, r0, ld_more" << "ld_upd:" << "activate 5" << "exit";
    a << "ld_more:" << arm_fwd << "exit";
    a << "update:";
    bias_update();
    a << "beq r5, r7, lu_nost" << "li r3, stash" << "dbase " + dStash + ", r3" << "lu_add:" << "vadd.fp32 " + dVB + ", " + dVB + ", " + dStash
      << "addi r3, r3, " + S(4LL * no) << "dbase " + dStash + ", r3" << "bne r3, r12, lu_add" << "lu_nost:"
      << "li r3, stash" << "dbase " + dStash + ", r3" << "addi r5, r5, -" + S(batch) << "addi r6, r6, -" + S(batch);
    count_update();
    a << arm_fwd << "exit";
  }

  if (!last) {
    if (F > 0) {
      a << "ysent:" << "li r13, " + S(batch + F) << "beq r5, r13, ys_x" << arm_fwd << "ys_x:";
      check_update("ys_c");
      a << "exit";
    } else {
      a << "ysent:" << "beq r5, r7, ys_x" << arm_fwd << "ys_x:" << "exit";
    }
    a << "dxgot:";
    if (source) {
      // The sum's gradient of this sample, added to the incoming dx (waiting for it if need be).
      sk.wait_grad();
      a << "vadd.fp32 " + dG + ", " + dG + ", " + sk.dSgR;
      sk.take(true);
    }
    // The sum's gradient to the source, from sgo once the last send from it is through: before
    // the derivative, or after it where the sum is the activation's input.
    if (target && !pre_sum) sk.send_grad(dG);
    auto ln_bwd = [&] {
      // The LayerNorm's gradients, then its input's: g = r (g gamma - S1 / n - x^ S2 / n).
      a << "addi r13, r11, " + S(2 * xoff) << "dbase " + dXh + ", r13" << "vfmac.fp32 " + dGLg + ", " + dG + ", " + dXh + ", " + dGLg
        << "vadd.fp32 " + dGLb + ", " + dGLb + ", " + dG;
      emit_ln_bwd(a, no, dG, dXh, dL1, dL2, dLg, dOnes, "r9", "r10", [&] { a << "addi r14, r11, " + S(3 * xoff) << "ld32 r13, [r14]"; });
    };
    if (ln_post) ln_bwd();  // the gradient at u, then at y
    if (gelu) {
      t4[0] = dT;
      emit_pre_act_bwd(a, act, alpha, dG, dYb, t4, dOnes);
    } else {
      emit_act_bwd(a, act, alpha, dG, dYb, dT, dOnes);
    }
    if (pre_sum) sk.send_grad(dG);
    if (ln && !ln_post) ln_bwd();
    a << "addi r11, r11, " + S(4LL * no) << "bne r11, r12, dx_nw" << "li r11, yring" << "dx_nw:" << "dbase " + dYb + ", r11";
    a << "jmp gcommon";
  }

  a << "fwdgot:";
  if (!last) {
    std::string dSend = dYf;
    if (ln && !ln_post) {
      // u = gamma (z - mean) r + beta into acc, x^ and r kept (regions 3 and 4 of the ring).
      a << "addi r14, r3, " + S(2 * xoff) << "dbase " + dXh + ", r14";
      emit_ln_fwd(a, no, ln->eps, dAcc, dXh, dL1, dLs, "lsc", dOnes, dLg, dLb, [&] { a << "addi r14, r3, " + S(3 * xoff) << "st32 [r14], r13"; });
    }
    if (pre_sum) {
      // acc = X_k + z before the activation (waiting for the source's slice if need be).
      sk.wait_values();
      a << "vadd.fp32 " + dAcc + ", " + sk.dSkR + ", " + dAcc;
      sk.take(false);
    }
    if (gelu) {
      // z kept for the derivative, y = gelu(z) into xring's slot and sent from there.
      t4[0] = dT;
      a << "vmov.fp32 " + dYf + ", " + dAcc << "addi r13, r3, " + S(xoff) << "dbase " + dXf + ", r13";
      emit_pre_act_fwd(a, act, alpha, dXf, dAcc, t4, dOnes);
      dSend = dXf;
    } else {
      emit_act_fwd(a, act, alpha, dYf, dAcc, dT, dOnes);
    }
    if (ln_post) {
      // u = gamma (y - mean) r + beta in xring's slot (y copied there unless a GELU's is
      // already), x^ and r kept (regions 3 and 4 of the ring); u is sent.
      if (!gelu) a << "addi r13, r3, " + S(xoff) << "dbase " + dXf + ", r13" << "vmov.fp32 " + dXf + ", " + dYf;
      a << "addi r14, r3, " + S(2 * xoff) << "dbase " + dXh + ", r14";
      emit_ln_fwd(a, no, ln->eps, dXf, dXh, dL1, dLs, "lsc", dOnes, dLg, dLb, [&] { a << "addi r14, r3, " + S(3 * xoff) << "st32 [r14], r13"; });
      dSend = dXf;
    }
    if (target && !pre_sum) {
      // X = X_k + R into xring's slot (waiting for the source's slice if need be), sent on.
      sk.wait_values();
      a << "addi r13, r3, " + S(xoff) << "dbase " + dXf + ", r13" << "vadd.fp32 " + dXf + ", " + sk.dSkR + ", " + dSend;
      sk.take(false);
      dSend = dXf;
    }
    a << "vmov.fp32 " + dYO + ", " + dSend + ", async=1, done=activate:2";
    if (source) sk.send_values(dSend);
    a << "addi r3, r3, " + S(4LL * no) << "bne r3, r12, fw_nw" << "li r3, yring" << "fw_nw:" << "dbase " + dYf + ", r3";
    a << "addi r5, r5, 1" << "exit";
  } else {
    // Softmax cross-entropy: z = logits - max, p = e^z / sum, loss = log(sum) - z[label],
    // gradient (p - onehot(label)) / batch.
    const std::string dLab = a.mem("lab", 1), dLabIn = a.fin(c.label, 1);
    a << "vmov.fp32 " + dLab + ", " + dLabIn << "ld32 r9, [r0+lab]";
    const std::string dLV = emit_softmax_loss(a, no, dAcc, dT, dG);
    a << "vmov.fp32 " + a.fout(c.loss, 1) + ", " + dLV;
    emit_softmax_grad(a, scale, dG);
    if (F > 0) {
      // A lookahead sample's bias gradient waits in the stash for the update.
      a << "blt r5, r7, lf_now" << "vmov.fp32 " + dStash + ", " + dG << "addi r3, r3, " + S(4LL * no) << "dbase " + dStash + ", r3"
        << "addi r5, r5, 1" << "vmov.fp32 " + dDYO + ", " + dG + ", async=3, done=activate:1" << "exit" << "lf_now:";
    }
    a << "addi r5, r5, 1" << "jmp gcommon";
  }
  a << "gcommon:" << "vadd.fp32 " + dGB + ", " + dGB + ", " + dG << "vmov.fp32 " + dDYO + ", " + dG + ", async=3, done=activate:1"
    << "exit";
  return a.text();
}

std::vector<uint8_t> f32_bytes(const std::vector<float>& v) {
  std::vector<uint8_t> out(v.size() * 4);
  if (!v.empty()) std::memcpy(out.data(), v.data(), out.size());
  return out;
}

// A convolution's tile (docs/compiler.md, "Convolutions"): weights T[o][t] of its output channels
// o and the taps t of its input channels (ws_plan.h conv_taps, channels of the slice from 0).
// Each sample's input slice (its channels' planes) comes whole into a ring slot (microthread 0);
// then per output channel and tap one vaxpy of the tap's weight times its window of the input (a
// two-dimensional operand: drows) into the valid part of the output's plane of sums (y), and y
// leaves down the chain (microthread 1; with a partial sum from above, a vadd). A forward pass
// first asks for the next input (into the next slot, while the ring has one), so that it streams
// in during the pass; the pass after it waits (task 2 blocked) until y has left and is cleared
// (ysent). So no issue ever waits on a busy microthread.
// Backward, the sample's dz planes come whole (microthread 2); per output channel and tap a
// vfmac of dz and the input window into the tap's momentum element (stride 0: the sum of the
// window in element order), and (not in the first layer) a vaxpy of the weight times dz into the
// window of dx, which leaves along the dx chain (microthread 3). After the minibatch's last
// gradient: W += -lr V; V *= momentum.
// Registers: r0 0, r3/r11 forward/backward ring slot (the next input's in SRAM, xarm), r4 slots in
// use, r5/r6 inputs asked for / backward passes done in this minibatch, r12 ring end, r14 1 from
// asking for an input until its forward pass starts; r1, r2, r7-r10, r13, r15 scratch.
std::string conv_tile_source(const ConvParams& cs, int cq, bool dx, const TileColors& c, int batch, int depth, const TrainHyper& h,
                             const SumSpec* sum, int align) {
  PeAsm a;
  bind_tile_queues(a, c, sum);
  const long long T = cs.taps(), P = static_cast<long long>(cs.ho) * cs.wo, ni = static_cast<long long>(cs.c) * cs.h * cs.w;
  const uint32_t uT = static_cast<uint32_t>(cq * T), uP = static_cast<uint32_t>(cq * P), uN = static_cast<uint32_t>(ni);
  a.task("0, init, active");
  a.task("1, update");
  a.task("2, fwd");
  a.task("3, ysent");
  a.task("4, bwd");
  if (dx) a.task("5, dxsent");
  a.data(conv_tap_table(cs, "ct"));
  a.data(".space W, fp32, " + S(cq * T));
  a.data(".space V, fp32, " + S(cq * T));
  // The windows' operands start on a multiple of the banks (placement.h conv_sram_align), so
  // that the estimate knows their bank conflicts.
  const std::string al = ".align " + S(align) + "\n";
  a.data(al + ".space ring, fp32, " + S(depth * ni));
  a.data(al + ".space y, fp32, " + S(cq * P));
  a.data(al + ".space dz, fp32, " + S(cq * P));
  if (dx) a.data(al + ".space dx, fp32, " + S(ni));
  if (sum) a.data(".space G, fp32, " + S(cq * T));
  a.data(".space nupd, fp32, 1");
  a.data(".space xarm, i32, 1");
  a << "init:";
  const std::string dGall = sum ? a.mem("G", uT) : "";
  const SumDsd sum_dsd = sum ? prepare_sum(a, *sum) : SumDsd{};
  const std::string dXin = a.mem("ring", uN), dFx = a.fin(c.x, uN), dY = a.mem("y", uP), dFO = a.fout(c.fout, uP);
  const std::string dFI = c.fin >= 0 ? a.fin(c.fin, uP) : "", dZ = a.mem("dz", uP), dDy = a.fin(c.dy, uP);
  const std::string dWall = a.mem("W", uT), dVall = a.mem("V", uT);
  const std::string dCx = a.mem("ring", 1), dCa = a.mem("y", 1), dCz = a.mem("dz", 1), dCw0 = a.mem("V", 1, 0);
  std::string dDX, dDO, dDI, dCdx;
  if (dx) {
    dDX = a.mem("dx", uN);
    dDO = a.fout(c.dxout, uN);
    if (c.dxin >= 0) dDI = a.fin(c.dxin, uN);
    dCdx = a.mem("dx", 1);
  }
  const std::string arm_x = "vmov.fp32 " + dXin + ", " + dFx + ", async=0, done=activate:2";
  const std::string arm_dz = "vmov.fp32 " + dZ + ", " + dDy + ", async=2, done=activate:4";
  // The next input into slot xarm: unless one is asked for and not yet taken, the minibatch's
  // inputs are all asked for, or the ring is full.
  auto try_arm = [&](const std::string& tag) {
    a << "bne r14, r0, " + tag << "li r13, " + S(batch) << "beq r5, r13, " + tag << "li r13, " + S(depth) << "beq r4, r13, " + tag
      << "li r14, 1" << "ld32 r13, [r0+xarm]" << "dbase " + dXin + ", r13" << arm_x << "addi r13, r13, " + S(4 * ni)
      << "bne r13, r12, " + tag + "_w" << "li r13, ring" << tag + "_w:" << "st32 [r0+xarm], r13" << "addi r5, r5, 1"
      << "addi r4, r4, 1" << tag + ":";
  };
  a << "li r0, 0" << "li r3, ring" << "st32 [r0+xarm], r3" << "li r4, 0" << "li r5, 0" << "li r6, 0" << "li r11, ring"
    << "li r12, ring+" + S(4 * depth * ni) << "li r14, 0" << "li r13, " + S(cs.sw) << "dstride " + dCx + ", r13";
  if (dx) a << "dstride " + dCdx + ", r13";
  a << arm_dz;
  try_arm("in_a");
  a << "exit";

  a << "update:";
  emit_update(a, sum, sum_dsd, dGall, dWall, dVall, h);
  a << "li r5, 0" << "li r6, 0" << "li r3, ring" << "li r11, ring" << "st32 [r0+xarm], r3"
    << "ld32 r1, [r0+nupd]" << "lif r2, 1.0" << "fadd r1, r1, r2" << "st32 [r0+nupd], r1";
  try_arm("up_a");
  a << "exit";

  // A tap's window and its rows: r9 its table entry; `win` over the input (rows sh w apart),
  // `out` over a plane of the output (rows wo apart).
  auto tap_shape = [&](const std::vector<std::string>& win, const std::vector<std::string>& out) {
    a << "ld32 r13, [r9+8]" << "li r15, " + S(static_cast<long long>(cs.sh) * cs.w);
    for (const std::string& d : win) a << "drows " + d + ", r13, r15";
    a << "li r15, " + S(cs.wo);
    for (const std::string& d : out) a << "drows " + d + ", r13, r15";
  };
  // Per output channel (r1; r7 its plane), per tap (r9 the table, r10 the count; r2 the weight).
  a << "fwd:" << "li r14, 0";
  try_arm("cf_a");
  a << "li r1, 0" << "li r2, W" << "li r7, y" << "cf_o:" << "li r9, ct" << "li r10, 0";
  a << "cf_t:" << "ld32 r13, [r9+12]" << "beq r13, r0, cf_n" << "dlen " + dCx + ", r13" << "dlen " + dCa + ", r13";
  tap_shape({dCx}, {dCa});
  a << "ld32 r13, [r9]" << "add r13, r13, r3" << "dbase " + dCx + ", r13" << "ld32 r13, [r9+4]" << "add r13, r13, r7"
    << "dbase " + dCa + ", r13" << "ld32 r15, [r2]" << "vaxpy.fp32 " + dCa + ", " + dCx + ", r15";
  a << "cf_n:" << "addi r2, r2, 4" << "addi r9, r9, 16" << "addi r10, r10, 1" << "li r13, " + S(T) << "bne r10, r13, cf_t"
    << "addi r7, r7, " + S(4 * P) << "addi r1, r1, 1" << "li r13, " + S(cq) << "bne r1, r13, cf_o";
  a << "addi r3, r3, " + S(4 * ni) << "bne r3, r12, cf_w" << "li r3, ring" << "cf_w:" << "block 2";
  if (c.fin >= 0) a << "vadd.fp32 " + dFO + ", " + dFI + ", " + dY + ", async=1, done=activate:3";
  else a << "vmov.fp32 " + dFO + ", " + dY + ", async=1, done=activate:3";
  a << "exit";
  a << "ysent:" << "vfill.fp32 " + dY + ", r0" << "unblock 2" << "exit";

  // Per output channel (r1; r7 its dz plane), per tap (r2 its momentum element, r8 its weight).
  // The taps' gradients add up in V, or with replicas in G (summed over the copies at the update).
  a << "bwd:" << "li r1, 0" << std::string("li r2, ") + (sum ? "G" : "V") << "li r8, W" << "li r7, dz" << "cb_o:" << "li r9, ct" << "li r10, 0";
  a << "cb_t:" << "ld32 r13, [r9+12]" << "beq r13, r0, cb_n" << "dlen " + dCx + ", r13" << "dlen " + dCz + ", r13" << "dlen " + dCw0 + ", r13";
  if (dx) a << "dlen " + dCdx + ", r13";
  tap_shape(dx ? std::vector<std::string>{dCx, dCdx} : std::vector<std::string>{dCx}, {dCz});
  a << "ld32 r13, [r9]" << "add r15, r13, r11" << "dbase " + dCx + ", r15";
  if (dx) a << "li r15, dx" << "add r15, r13, r15" << "dbase " + dCdx + ", r15";
  a << "ld32 r13, [r9+4]" << "add r13, r13, r7" << "dbase " + dCz + ", r13" << "dbase " + dCw0 + ", r2";
  if (dx) a << "ld32 r15, [r8]" << "vaxpy.fp32 " + dCdx + ", " + dCz + ", r15";
  a << "vfmac.fp32 " + dCw0 + ", " + dCz + ", " + dCx + ", " + dCw0;
  a << "cb_n:" << "addi r2, r2, 4" << "addi r8, r8, 4" << "addi r9, r9, 16" << "addi r10, r10, 1" << "li r13, " + S(T) << "bne r10, r13, cb_t"
    << "addi r7, r7, " + S(4 * P) << "addi r1, r1, 1" << "li r13, " + S(cq) << "bne r1, r13, cb_o";
  a << "addi r11, r11, " + S(4 * ni) << "bne r11, r12, cb_w" << "li r11, ring" << "cb_w:";
  if (dx) {
    if (c.dxin >= 0) a << "vadd.fp32 " + dDO + ", " + dDI + ", " + dDX + ", async=3, done=activate:5";
    else a << "vmov.fp32 " + dDO + ", " + dDX + ", async=3, done=activate:5";
    a << "exit";
    a << "dxsent:" << "vfill.fp32 " + dDX + ", r0";
  }
  a << arm_dz << "addi r4, r4, -1" << "addi r6, r6, 1" << "li r13, " + S(batch) << "bne r6, r13, sd_more" << "activate 1" << "exit"
    << "sd_more:";
  try_arm("sd_a");
  a << "exit";
  return a.text();
}

// A convolution's root: per sample its output channels' planes of sums come whole (microthread
// 0), each plane adds its channel's bias, the activation's output is kept in a ring slot (yring)
// and pooled into another (qring), whose planes leave for the next layer (microthread 1); the
// next sums are taken once they have left. Backward, the pooled gradient comes whole (2), is
// spread over the windows into dz (codegen_util.h emit_pool_bwd), takes the activation's
// derivative at the kept output, adds each plane's sum (vsum) to its bias's momentum, and dz
// leaves for the tiles (3). The bias updates after the minibatch's last gradient.
// Registers: r0 0, r10/r12 forward/backward samples of this minibatch; the ring slots are words
// in SRAM (yf, yb, qf, qb): the pooling takes r1-r9, r11, r13-r15.
std::string conv_root_source(const ConvParams& cv, const PoolParams& q, int cq, Activation act, const ActParams& alpha, const RootColors& c,
                             int batch, int depth, const TrainHyper& h, const SumSpec* sum) {
  PeAsm a;
  bind_sum_queues(a, sum);
  a.inq(c.fin);
  a.inq(c.dxin);
  const bool pooled = q.kind != PoolParams::kNone;
  const long long P = static_cast<long long>(cv.ho) * cv.wo, Pq = pooled ? static_cast<long long>(q.hq) * q.wq : P;
  const uint32_t uP = static_cast<uint32_t>(cq * P), uQ = static_cast<uint32_t>(cq * Pq);
  a.task("0, init, active");
  a.task("1, fwdgot");
  a.task("2, ysent");
  a.task("3, dxgot");
  a.task("4, dysent");
  // Residual connections (SkipStreams): as the target, the source's planes (cq P a sample) added
  // to z before the activation (skip_pre) or to y after it into xs, which is then pooled or sent;
  // the sum's gradient back (after the pooling's spread; before the derivative, or after it
  // with skip_pre). As the source, its output's planes to the target, and the sum's gradient
  // added to the incoming gradient first.
  SkipStreams sk(a, c, static_cast<long long>(cq) * P, static_cast<long long>(cq) * Pq);
  const bool pre_sum = sk.target && c.skip_pre, post_sum = sk.target && !c.skip_pre;
  const bool ones = act_uses_ones(act, alpha);
  // An activation whose derivative is taken at z (act_needs_pre): the ring keeps z, y goes to
  // py (pooled from there, or sent), and backward a max pooling takes y again from z into py;
  // its programs' scratch beyond tmp in pt1..pt3 (conv_root_act_planes).
  const bool pre = act_needs_pre(act);
  const int temps = pre ? act_temps(act, alpha) : 0;
  a.data(".space b, fp32, " + S(cq));
  a.data(".space vb, fp32, " + S(cq));
  a.data(".space acc, fp32, " + S(cq * P));
  if (pre) a.data(".space py, fp32, " + S(cq * P));
  for (int t = 1; t < temps; ++t) a.data(".space pt" + S(t) + ", fp32, " + S(cq * P));
  a.data(".space bb, fp32, " + S(P));
  a.data(".space tm, fp32, " + S(cq * P));
  a.data(".space tmp, fp32, " + S(cq * P));
  if (ones) a.data(".space ones, fp32, " + S(cq * P));
  a.data(".space yring, fp32, " + S(depth * cq * P));
  if (pooled) {
    a.data(".space qring, fp32, " + S(depth * cq * Pq));
    a.data(".space gq, fp32, " + S(cq * Pq));
    const long long wq = std::max(1, q.wq);
    a.data(".space rr, fp32, " + S(wq) + "\n.space cm, fp32, " + S(wq) + "\n.space tt, fp32, " + S(wq) + "\n.space zw, fp32, 1");
    if (const std::string t = pool_div_table(cv, q, "pdv"); !t.empty()) a.data(t);
  }
  a.data(".space yf, i32, 1\n.space yb, i32, 1\n.space qf, i32, 1\n.space qb, i32, 1");
  if (sum) a.data(".space gb, fp32, " + S(cq));  // replicas: the bias gradients, summed over the copies
  a.data(".space nupd, fp32, 1");
  sk.data();
  if (post_sum) a.data(".space xs, fp32, " + S(cq * P));
  a << "init:";
  const std::string dGB = sum ? a.mem("gb", static_cast<uint32_t>(cq)) : "";
  const SumDsd sum_dsd = sum ? prepare_sum(a, *sum) : SumDsd{};
  const std::string dAcc = a.mem("acc", uP), dFin = a.fin(c.fin, uP), dAccP = a.mem("acc", static_cast<uint32_t>(P));
  const std::string dBB = a.mem("bb", static_cast<uint32_t>(P)), dYs = a.mem("yring", uP), dTm = a.mem("tm", uP);
  const std::string dTmP = a.mem("tm", static_cast<uint32_t>(P)), dTmp = a.mem("tmp", uP), dOnes = ones ? a.mem("ones", uP) : "";
  const std::string dYO = a.fout(c.yout, uQ), dDXI = a.fin(c.dxin, uQ), dDYO = a.fout(c.dyout, uP);
  const std::string dB = a.mem("b", static_cast<uint32_t>(cq)), dVB = a.mem("vb", static_cast<uint32_t>(cq));
  const std::string dPy = pre ? a.mem("py", uP) : "";
  std::string tv[4] = {dTmp, "", "", ""};
  for (int t = 1; t < temps; ++t) tv[t] = a.mem("pt" + S(t), uP);
  std::string dQs, dGq;
  PoolDsd pd;
  if (pooled) {
    dQs = a.mem("qring", uQ);
    dGq = a.mem("gq", uQ);
    // A max's running gradient, compare and select scratch and zero; an average's table (cm)
    // where it has one: an average needs none of the others (the root's 44 registers are few).
    const bool max = q.kind == PoolParams::kMax, table = !max && !pool_uniform(q);
    pd = PoolDsd{a.mem("tm", 1), a.mem("tm", 1), a.mem("tm", 1), a.mem("tm", 1), max ? a.mem("rr", 1) : "", max || table ? a.mem("cm", 1) : "",
                 max ? a.mem("tt", 1) : "", max ? a.mem("zw", 1, 0) : "", a.mem("tm", 1), "pdv"};
  }
  sk.descriptors(c);
  const std::string dXs = post_sum ? a.mem("xs", uP) : "";
  const std::string arm_fwd = "vmov.fp32 " + dAcc + ", " + dFin + ", async=0, done=activate:1";
  // The pooled gradient into gq, or without pooling straight into dz.
  const std::string arm_dx = "vmov.fp32 " + (pooled ? dGq : dTm) + ", " + dDXI + ", async=2, done=activate:3";
  auto reset = [&] {
    a << "li r13, yring" << "st32 [r0+yf], r13" << "st32 [r0+yb], r13";
    if (pooled) a << "li r13, qring" << "st32 [r0+qf], r13" << "st32 [r0+qb], r13";
    a << "li r10, 0" << "li r12, 0";
  };
  // A ring slot's word moved on by n bytes, wrapping at the ring's end.
  auto next_slot = [&](const std::string& word, const std::string& ring, long long n, const std::string& tag) {
    a << "ld32 r13, [r0+" + word + "]" << "addi r13, r13, " + S(n) << "li r14, " + ring + "+" + S(depth * n) << "bne r13, r14, " + tag
      << "li r13, " + ring << tag + ":" << "st32 [r0+" + word + "], r13";
  };
  a << "li r0, 0";
  reset();
  if (ones) a << "lif r13, 1.0" << "vfill.fp32 " + dOnes + ", r13";
  sk.start();
  a << arm_fwd << arm_dx << "exit";
  sk.handlers();

  a << "fwdgot:" << "li r2, acc" << "li r3, b" << "li r4, 0" << "rf_b:" << "dbase " + dAccP + ", r2" << "ld32 r13, [r3]"
    << "vfill.fp32 " + dBB + ", r13" << "vadd.fp32 " + dAccP + ", " + dAccP + ", " + dBB << "addi r2, r2, " + S(4 * P) << "addi r3, r3, 4"
    << "addi r4, r4, 1" << "li r13, " + S(cq) << "bne r4, r13, rf_b";
  if (sk.target) {
    sk.wait_values();  // the source's planes of this sample
    if (pre_sum) a << "vadd.fp32 " + dAcc + ", " + sk.dSkR + ", " + dAcc;
  }
  // py and xs, which the source's last send may still read, are written only once it is through.
  if (sk.source && !pooled && (pre || post_sum)) a << "vmov.fp32 " + sk.dFence + ", " + sk.dFence + ", async=4";
  a << "ld32 r1, [r0+yf]" << "dbase " + dYs + ", r1";
  if (pre) {
    a << "vmov.fp32 " + dYs + ", " + dAcc;
    emit_pre_act_fwd(a, act, alpha, dPy, dYs, tv, dOnes);
    a << "li r1, py";
  } else {
    emit_act_fwd(a, act, alpha, dYs, dAcc, dTmp, dOnes);
  }
  if (post_sum) a << "vadd.fp32 " + dXs + ", " + sk.dSkR + ", " + (pre ? dPy : dYs) << "li r1, xs";
  if (sk.target) sk.take(false);
  if (pooled) {
    a << "ld32 r2, [r0+qf]";
    emit_pool_fwd(a, cv, q, cq, pd, "rf");
    a << "dbase " + dQs + ", r2" << "vmov.fp32 " + dYO + ", " + dQs + ", async=1, done=activate:2";
    if (sk.source) sk.send_values(dQs);
    next_slot("qf", "qring", 4 * cq * Pq, "rf_q");
  } else {
    const std::string& sent = post_sum ? dXs : pre ? dPy : dYs;
    a << "vmov.fp32 " + dYO + ", " + sent + ", async=1, done=activate:2";
    if (sk.source) sk.send_values(sent);
  }
  next_slot("yf", "yring", 4 * cq * P, "rf_y");
  a << "addi r10, r10, 1" << "exit";
  a << "ysent:" << "li r13, " + S(batch) << "beq r10, r13, ys_x" << arm_fwd << "ys_x:" << "exit";

  a << "dxgot:";
  if (sk.source) {  // the gradient of the sum this output feeds, added first
    sk.wait_grad();
    a << "vadd.fp32 " + (pooled ? dGq : dTm) + ", " + (pooled ? dGq : dTm) + ", " + sk.dSgR;
    sk.take(true);
  }
  a << "ld32 r1, [r0+yb]";
  if (pooled) {
    if (pre && q.kind == PoolParams::kMax) {  // y again from the kept z, for the windows' maxima
      a << "dbase " + dYs + ", r1";
      emit_pre_act_fwd(a, act, alpha, dPy, dYs, tv, dOnes);
      a << "li r1, py";
    }
    a << "ld32 r2, [r0+qb]";
    emit_pool_bwd(a, cv, q, cq, pd, "tm", "gq", "rb");
    next_slot("qb", "qring", 4 * cq * Pq, "rb_q");
    if (pre) a << "ld32 r1, [r0+yb]";
  }
  a << "dbase " + dYs + ", r1";
  if (post_sum) sk.send_grad(dTm);
  if (pre) emit_pre_act_bwd(a, act, alpha, dTm, dYs, tv, dOnes);
  else emit_act_bwd(a, act, alpha, dTm, dYs, dTmp, dOnes);
  if (pre_sum) sk.send_grad(dTm);
  next_slot("yb", "yring", 4 * cq * P, "rb_y");
  a << "li r2, tm" << std::string("li r3, ") + (sum ? "gb" : "vb") << "li r4, 0" << "rb_b:" << "dbase " + dTmP + ", r2" << "vsum.fp32 r13, " + dTmP << "ld32 r14, [r3]"
    << "fadd r14, r14, r13" << "st32 [r3], r14" << "addi r2, r2, " + S(4 * P) << "addi r3, r3, 4" << "addi r4, r4, 1"
    << "li r13, " + S(cq) << "bne r4, r13, rb_b";
  a << "vmov.fp32 " + dDYO + ", " + dTm + ", async=3, done=activate:4" << "addi r12, r12, 1" << "exit";
  a << "dysent:" << "li r13, " + S(batch) << "beq r12, r13, ds_u" << arm_dx << "exit";
  a << "ds_u:";
  emit_update(a, sum, sum_dsd, dGB, dB, dVB, h);
  a << "ld32 r9, [r0+nupd]" << "lif r13, 1.0" << "fadd r9, r9, r13" << "st32 [r0+nupd], r9";
  reset();
  a << arm_fwd << arm_dx << "exit";
  return a.text();
}

}  // namespace

ModelState ModelState::from_graph(const KernelGraph& g) {
  ModelState s;
  for (const auto& l : g.layers) {
    s.w.push_back(l.w);
    s.v.emplace_back(l.w.size(), 0.0f);
    s.b.push_back(l.b);
    s.vb.emplace_back(l.b.size(), 0.0f);
    s.lg.push_back(l.ln.on ? l.ln.g : std::vector<float>{});
    s.lb.push_back(l.ln.on ? l.ln.b : std::vector<float>{});
    s.lvg.emplace_back(l.ln.on ? l.ln.g.size() : 0, 0.0f);
    s.lvb.emplace_back(l.ln.on ? l.ln.b.size() : 0, 0.0f);
  }
  return s;
}

std::string out_w(int l, int a, int b) { return "w." + S(l) + "." + S(a) + "." + S(b); }
std::string out_v(int l, int a, int b) { return "v." + S(l) + "." + S(a) + "." + S(b); }
std::string out_b(int l, int b) { return "b." + S(l) + "." + S(b); }
std::string out_vb(int l, int b) { return "vb." + S(l) + "." + S(b); }
std::string out_ln(const char* what, int l) { return std::string("ln") + what + "." + S(l); }
std::string out_updates(int x, int y) { return "nupd." + S(x) + "." + S(y); }

Compiled generate(const KernelGraph& g, const Plan& plan, const Routing& r, const ModelState& s, const TrainHyper& h,
                  const AsmTarget& t) {
  Compiled out;
  out.plan = plan;
  out.routing = r;
  FabricProgram& prog = out.program;
  prog.name = "train";
  const int L = static_cast<int>(plan.layers.size());
  const int R = plan.replicas;
  // With replicas: each weight PE's segment of its column's gradient sum (copy 0's positions).
  const std::map<std::pair<int, int>, long> seg = weight_elements(plan);
  std::map<std::pair<int, int>, std::pair<long, long>> around;  // copy 0's PE -> (before, after)
  if (R > 1) {
    for (const auto& [x, rows] : weight_columns(plan)) {
      long total = 0;
      for (int y : rows) total += seg.at({x, y});
      long before = 0;
      for (int y : rows) {
        const long own = seg.at({x, y});
        around[{x, y}] = {before, total - before - own};
        before += own;
      }
    }
  }
  auto sum_spec = [&](std::pair<int, int> xy0, int rep) {
    SumSpec sp;
    sp.steps = sum_steps(rep, R);
    sp.own = seg.at(xy0);
    sp.before = around.at(xy0).first;
    sp.after = around.at(xy0).second;
    const SumNets& n = r.sum.at(plan.at(xy0, rep));
    sp.nin = r.color(n.nin);
    sp.nout = r.color(n.nout);
    sp.sin = r.color(n.sin);
    sp.sout = r.color(n.sout);
    sp.dist = r.color(n.dist);
    sp.pos = rep < R / 2 ? sp.before : sp.after;
    return sp;
  };
  for (int rep = 0; rep < R; ++rep) {
    const std::vector<LayerNets>& nets = r.copies[static_cast<size_t>(rep)].layers;
    const int batch = plan.samples_of(rep);
    // Copy 0's state is the model's outputs; the others' carry their copy's prefix.
    const std::string opre = rep > 0 ? "r" + S(rep) + "." : "";
    for (int l = 0; l < L; ++l) {
      const LayerPlan& lp = plan.layers[static_cast<size_t>(l)];
      const LayerNets& n = nets[static_cast<size_t>(l)];
      const bool last = l + 1 == L;
      const std::string tag = "L" + S(l);
      for (int a = 0; a < lp.p_in; ++a) {
        for (int b = 0; b < lp.p_out; ++b) {
          TileColors c;
          c.x = r.color(n.xin[static_cast<size_t>(a)]);
          c.fout = r.color(n.fchain[static_cast<size_t>(a)][static_cast<size_t>(b)]);
          if (a > 0) c.fin = r.color(n.fchain[static_cast<size_t>(a) - 1][static_cast<size_t>(b)]);
          c.dy = r.color(n.dy[static_cast<size_t>(b)]);
          if (lp.dx) {
            c.dxout = r.color(n.dxchain[static_cast<size_t>(a)][static_cast<size_t>(b)]);
            if (b + 1 < lp.p_out) c.dxin = r.color(n.dxchain[static_cast<size_t>(a)][static_cast<size_t>(b) + 1]);
          }
          const int ni = lp.in_len(a), no = lp.out_len(b);
          SumSpec sp;
          if (R > 1) sp = sum_spec(lp.tile_xy(a, b), rep);
          std::string src;
          long n = static_cast<long>(ni) * no;
          if (lp.conv.on) {
            ConvParams cs = lp.conv;
            cs.c = lp.in_ch(a);
            src = conv_tile_source(cs, lp.out_ch(b), lp.dx, c, batch, plan.ring_depth, h, R > 1 ? &sp : nullptr, plan.sram_align);
            n = static_cast<long>(lp.out_ch(b)) * cs.taps();
          } else {
            src = tile_source(ni, no, lp.dx, c, batch, plan.ring_depth, plan.lookahead(l), h, R > 1 ? &sp : nullptr);
          }
          const int img = intern_fitting(prog, tag + "_tile", src, t, "layer " + g.layers[static_cast<size_t>(l)].name + "'s tiles");
          const auto [x, y] = plan.at(lp.tile_xy(a, b), rep);
          prog.place(x, y, img);
          std::vector<float> wt(static_cast<size_t>(n)), vt(wt.size());
          const auto& W = s.w[static_cast<size_t>(l)];
          const auto& V = s.v[static_cast<size_t>(l)];
          for (long i = 0; i < n; ++i) {
            wt[static_cast<size_t>(i)] = W[lp.weight_index(a, b, i)];
            vt[static_cast<size_t>(i)] = V[lp.weight_index(a, b, i)];
          }
          prog.set_data(x, y, "W", f32_bytes(wt));
          prog.set_data(x, y, "V", f32_bytes(vt));
          prog.output(opre + out_w(l, a, b), x, y, "W");
          prog.output(opre + out_v(l, a, b), x, y, "V");
          prog.output(out_updates(x, y), x, y, "nupd");
        }
      }
      for (int b = 0; b < lp.p_out; ++b) {
        RootColors c;
        c.fin = r.color(n.fchain[static_cast<size_t>(lp.p_in) - 1][static_cast<size_t>(b)]);
        c.dyout = r.color(n.dy[static_cast<size_t>(b)]);
        if (!last) {
          const LayerNets& nn = nets[static_cast<size_t>(l) + 1];
          c.yout = r.color(nn.xin[static_cast<size_t>(b)]);
          c.dxin = r.color(nn.dxchain[static_cast<size_t>(b)][0]);
        } else {
          c.label = r.color(r.copies[static_cast<size_t>(rep)].label);
          c.loss = r.color(r.copies[static_cast<size_t>(rep)].loss);
        }
        if (lp.residual >= 1) {
          c.skin = r.color(n.skip[static_cast<size_t>(b)]);
          c.sgout = r.color(n.skip_grad[static_cast<size_t>(b)]);
          c.skip_pre = lp.residual_pre;
        }
        if (const int t = plan.residual_target(l + 1); t >= 0) {
          const LayerNets& tn = nets[static_cast<size_t>(t)];
          c.skout = r.color(tn.skip[static_cast<size_t>(b)]);
          c.sgin = r.color(tn.skip_grad[static_cast<size_t>(b)]);
        }
        c.skip_depth = plan.ring_depth + 4;
        const int no = lp.out_len(b);
        const Activation act = g.layers[static_cast<size_t>(l)].act;
        const ActParams alpha = g.layers[static_cast<size_t>(l)].act_par;
        SumSpec sp;
        if (R > 1) sp = sum_spec(lp.root_xy(b), rep);
        const std::string src =
            lp.conv.on ? conv_root_source(lp.conv, lp.pool, lp.out_ch(b), act, alpha, c, batch, plan.ring_depth, h, R > 1 ? &sp : nullptr)
                       : root_source(no, act, alpha, last, c, batch, plan.ring_depth, plan.lookahead(l), h, plan.batch,
                                     R > 1 ? &sp : nullptr,
                                     g.layers[static_cast<size_t>(l)].ln.on ? &g.layers[static_cast<size_t>(l)].ln : nullptr);
        const int img = intern_fitting(prog, tag + "_root", src, t, "layer " + g.layers[static_cast<size_t>(l)].name + "'s roots");
        const auto [x, y] = plan.at(lp.root_xy(b), rep);
        prog.place(x, y, img);
        const auto off = static_cast<std::ptrdiff_t>(lp.bias_first(b)), nb = static_cast<std::ptrdiff_t>(lp.bias_count(b));
        prog.set_data(x, y, "b", f32_bytes(std::vector<float>(s.b[static_cast<size_t>(l)].begin() + off,
                                                              s.b[static_cast<size_t>(l)].begin() + off + nb)));
        prog.set_data(x, y, "vb", f32_bytes(std::vector<float>(s.vb[static_cast<size_t>(l)].begin() + off,
                                                               s.vb[static_cast<size_t>(l)].begin() + off + nb)));
        prog.output(opre + out_b(l, b), x, y, "b");
        prog.output(opre + out_vb(l, b), x, y, "vb");
        if (g.layers[static_cast<size_t>(l)].ln.on) {
          prog.set_data(x, y, "lng", f32_bytes(s.lg[static_cast<size_t>(l)]));
          prog.set_data(x, y, "lnb", f32_bytes(s.lb[static_cast<size_t>(l)]));
          prog.set_data(x, y, "lnvg", f32_bytes(s.lvg[static_cast<size_t>(l)]));
          prog.set_data(x, y, "lnvb", f32_bytes(s.lvb[static_cast<size_t>(l)]));
          prog.output(opre + out_ln("g", l), x, y, "lng");
          prog.output(opre + out_ln("b", l), x, y, "lnb");
          prog.output(opre + out_ln("vg", l), x, y, "lnvg");
          prog.output(opre + out_ln("vb", l), x, y, "lnvb");
        }
        prog.output(out_updates(x, y), x, y, "nupd");
      }
    }
  }
  for (const Net& net : r.nets) {
    for (const Hop& hop : net.hops) {
      prog.route(hop.x, hop.y, net.color, hop.rx, hop.tx);
      prog.cover(hop.x, hop.y);
    }
  }
  return out;
}

}  // namespace wafersim::compiler
