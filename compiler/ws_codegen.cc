#include "compiler/ws_codegen.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>

#include "compiler/codegen_util.h"
#include "compiler/onnx_model.h"
#include "firmware/isa.h"
#include "firmware/kernels/kernel_util.h"
#include "hw/wavelet.h"

namespace wafersim::compiler {
namespace {

using kernels::PeAsm;

std::string S(long long v) { return std::to_string(v); }

// A feature-row PE's tasks: 0 init, 1 a minibatch's start, 2 a return read is in; phase ph's
// work is task kFirstPhaseTask + ph (row_source).
constexpr int kFirstPhaseTask = 4;

std::vector<uint8_t> i32_bytes(const std::vector<int>& v) {
  std::vector<uint8_t> out(v.size() * 4);
  if (!v.empty()) std::memcpy(out.data(), v.data(), out.size());
  return out;
}

bool needs_ones(Activation a, const ActParams& p) { return act_uses_ones(a, p); }
bool needs_tmp(Activation a, const ActParams& p) {
  const ActivationDef& d = activation(a);
  return d.fwd(p).uses(Slot::kT0) || d.bwd(p).uses(Slot::kT0);
}

// fp32 elements of padding after a buffer of `words` 16-bit words so that a 2-element step
// reading it and one reading the next buffer at the same index touch different banks: their
// distance d in words must leave 4 words' room on both sides modulo `banks` (none with < 8).
int apart_pad(long long words, int banks) {
  if (banks < 8) return 0;
  for (int pad = 0; pad < banks; ++pad) {
    const long long d = (words + 2LL * pad) % banks;
    if (d >= 4 && d <= banks - 4) return pad;
  }
  return 0;
}


// Reads and drops the number of wavelets in cfg word `word` from fabric descriptor `from` into
// the stride-0 `sink` (the other columns' part of a row's input stream). When the count can
// exceed one descriptor (`most`, the largest over the row's PEs), it goes in chunks of 65,535;
// otherwise one read, as before chunks were needed (the same instructions and cycles).
void skip_stream(PeAsm& as, int word, long long most, const std::string& from, const std::string& sink,
                 const std::string& tag) {
  as << (word == 0 ? std::string("ld32 r13, [r0+cfg]") : "ld32 r13, [r0+cfg+" + S(4LL * word) + "]") << "beq r13, r0, " + tag;
  if (most > kMaxDsdLength) {
    as << "li r14, " + S(kMaxDsdLength) << tag + "_c:" << "bge r14, r13, " + tag + "_l" << "dlen " + from + ", r14"
       << "dlen " + sink + ", r14" << "vmov.fp32 " + sink + ", " + from << "sub r13, r13, r14" << "jmp " + tag + "_c"
       << tag + "_l:";
  }
  as << "dlen " + from + ", r13" << "dlen " + sink + ", r13" << "vmov.fp32 " + sink + ", " + from << tag + ":";
}

// A feature-row PE: row a, column c. Per-PE numbers that differ along a row (how much of the
// input stream belongs to the columns before and after this one) are data, so a row's PEs share
// images. Tasks: 0 init, 1 start of a minibatch (reads its inputs), 2 a return read is complete,
// kFirstPhaseTask + ph one output's work in phase ph (it re-activates itself until the pass is
// done; a model of more phases than task IDs has one work task, 3, that dispatches on r1).
// Layouts: X{l} and dx sample-major ([s][k], the row's slice), dy output-major ([o][s], whole).
// Per output of a pass the row's weights w[o][K_a] arrive as one vector (wbuf):
//   forward:  acc[s] = sum_k wbuf[k] * X[s][k]  (vmul + vsum per sample), chained south;
//   backward: dx[s][:] += dy[o][s] * wbuf and dwrow += dy[o][s] * X[s][:] (vaxpy per sample),
//             dwrow reduced west along the row.
// A slice shorter than the samples (WsPlan::by_feature) runs feature by feature instead, each
// op over the m samples, with the same roundings in the same order:
//   forward:  acc = 0, then per k: t = X[:][k] * wbuf[k] (vmuls), acc += t (vadd);
//   backward: per k: dx[:][k] += wbuf[k] * dy[o][:] (vaxpy) and dwrow[k] += dy[o][s] * X[s][k]
//             for s in order (vfmac into a stride-0 destination: one fused multiply-add after
//             another, as the per-sample vaxpys do).
// Double buffering: while output o computes, microthread 2 reads output o+1's weights into the
// other wbuf, and its completion starts o+1's work (the first output of a pass reads its own);
// in backward passes microthread 3 sends output o's dW row west from one dwrow while o+1
// accumulates into the other (issuing a send waits for the previous one). Buffers, in one block
// `wbdw` of 4 x the longest slice: wbuf 0, wbuf 1, dwrow 0, dwrow 1 (also the forward scratch t).
// With dW blocks (WsPlan::dw_block = K > 1) the rows go into two blocks of K by turns, a block
// sent whole once full, so a send waits for the one before it only once every K outputs.
// Registers: r0 0, r1 phase (0..L-1 forward layer l, L + i backward layer L-1-i), r2 sample,
// r3 output, r4 dy pointer (backward), r10 slice length (set_layer; with dW blocks, then the
// next dW row in the backward pass), r11 outputs, r9 the pending return read,
// r12 this output's wbuf, r15 the other, r5-r8 r13 r14 scratch.
std::string row_source(const WsPlan& p, const WsColors& col, int a, int c) {
  const int L = p.layers, m = p.col_m(c), C = p.cols;
  PeAsm as;
  as.inq(col.in);
  as.inq(col.w);
  as.task("0, init, active");
  as.task("1, stepstart");
  as.task("2, rdone");
  // Each phase's work is a task of its own that starts at its code (no dispatch on r1 per
  // output) where the task IDs allow; else task 3 dispatches on the phase.
  const int nphase = 2 * L;
  const bool phase_tasks = kFirstPhaseTask + nphase <= kMaxTasks;
  auto work_task = [&](int ph) { return S(phase_tasks ? kFirstPhaseTask + ph : 3); };
  if (phase_tasks) {
    for (int ph = 0; ph < nphase; ++ph) as.task(S(kFirstPhaseTask + ph) + ", ph_" + S(ph));
  } else {
    as.task("3, work");
  }
  int maxdx = 0, maxdy = 0, maxni = 1;
  bool ones = false;
  for (int l = 0; l < L; ++l) {
    as.data(".align 16");  // sample rows start at 0 mod 16: see wbdw
    as.data(".space X" + S(l) + ", fp32, " + S(std::max(1LL, static_cast<long long>(p.len(l, a)) * m)));
    if (l > 0) maxdx = std::max(maxdx, p.len(l, a) * m);
    // A convolution's dz (not the last layer's) comes output by output into two buffers, and this
    // row's slice of its outputs at the buffer's start.
    maxdy = std::max(maxdy, (p.dz_streamed(l) ? 2 : p.outs[static_cast<size_t>(l)]) * p.oplane(l) * m);
    if (p.is_conv(l) && l + 1 < L) maxdy = std::max(maxdy, p.chans(l + 1, a) * p.ret_unit(l) * m);
    maxni = std::max(maxni, p.wlen(l, a));  // the weight and dW rows' (a dense layer's slice)
    if (l + 1 < L && (needs_ones(p.act[static_cast<size_t>(l)], p.act_par[static_cast<size_t>(l)]) || p.rows_act(l)) && p.len(l + 1, a) > 0) ones = true;
  }
  // Residual connections (WsPlan::residual): into boundary t the row keeps the activated output
  // R{t} apart from the sum X{t} = X{k} + R{t}, for the activation's derivative; G{k} holds the
  // sum's gradient for its source k (k > 0: the model input needs none). Same slices (same width).
  bool residual = false, gelu = false;
  // A GELU's boundary t: the row keeps z (Z{t}) for the derivative and applies the GELU itself
  // (the root returns z), with four scratch vectors (gsc).
  for (int t = 1; t < L; ++t) {
    if (!p.rows_act(t - 1) || p.len(t, a) == 0) continue;
    gelu = true;
    as.data(".align 16");
    as.data(".space Z" + S(t) + ", fp32, " + S(static_cast<long long>(p.len(t, a)) * m));
  }
  for (int t = 1; t < L; ++t) {
    const int k = p.residual_source(t);
    if (k < 0 || p.len(t, a) == 0 || p.root_sum(t)) continue;  // around convolutions: at the roots
    residual = true;
    as.data(".align 16");
    // Not where the sum comes before the activation: the derivative is taken at Z{t}, the sum.
    if (!p.res_pre(t - 1)) as.data(".space R" + S(t) + ", fp32, " + S(static_cast<long long>(p.len(t, a)) * m));
  }
  // Boundary k's gradient from its readers other than layer k (a branch, the join it feeds),
  // kept until its turn (WsPlan::has_g).
  for (int k = 1; k < L; ++k) {
    if (!p.has_g(k) || p.len(k, a) == 0) continue;
    residual = true;
    as.data(".align 16");
    as.data(".space G" + S(k) + ", fp32, " + S(static_cast<long long>(p.len(k, a)) * m));
  }
  as.data(".space acc, fp32, " + S(m));
  // Convolutions (conv_forward, conv_backward below): per layer a table of its taps, 4 words
  // each: the byte offset of its first input element in a sample's planes (and of its dx), that
  // of its first output in the plane of sums, the elements of an output row, all its elements;
  // one plane of sums; the current sample's X and dx and the current dW element.
  int cplane = 0;
  bool conv_keep = false;
  for (int l = 0; l < L; ++l) {
    if (!p.is_conv(l)) continue;
    cplane = std::max(cplane, p.oplane(l));
    // This row's channels of the convolution's output: per channel its pooled gradient, then
    // the plane the backward pass needs, of every sample ([c][dq: s][Pq] [kept: s][P]), sent
    // down whole at the start of the convolution's backward pass (WsPlan::ret_unit).
    if (l + 1 < L && p.chans(l + 1, a) > 0) {
      conv_keep = true;
      as.data(".space YR" + S(l + 1) + ", fp32, " + S(static_cast<long long>(p.chans(l + 1, a)) * p.ret_unit(l) * m));
    }
    // This row's channels of the input (their taps, channels from 0 of its slice).
    if (p.chans(l, a) > 0) as.data(conv_tap_table(p.conv_slice(l, a), "ct" + S(l)));
  }
  if (cplane) {
    as.data(".align 16");  // the plane of sums WsPlan::cacc_pad elements past a multiple of the banks
    if (p.cacc_pad) as.data(".space cpad, fp32, " + S(p.cacc_pad));
    as.data(".space cacc, fp32, " + S(cplane));
    as.data(".space xbase, i32, 1");
    as.data(".space dxbase, i32, 1");
    as.data(".space dwp, i32, 1");
  }
  bool by_feature = false;
  for (int l = 0; l < L; ++l) by_feature = by_feature || (p.len(p.in(l), a) > 0 && p.by_feature(l, a));
  if (by_feature) {
    // acc += t reads two elements of each a step (8 bytes, 4 banks' words): t starts a number
    // of words past acc that puts their reads in different banks, else every step would take a
    // second cycle (docs/core.md).
    if (const int pad = apart_pad(2LL * m, p.sram_banks)) as.data(".space fpad, fp32, " + S(pad));
    as.data(".space ftm, fp32, " + S(m));
  }
  as.data(".space dy, fp32, " + S(maxdy));
  if (maxdx) as.data(".align 16");
  if (maxdx) as.data(".space dx, fp32, " + S(maxdx));
  if (ones) as.data(".space ones, fp32, " + S(maxdx));
  if (gelu) as.data(".space gsc, fp32, " + S(4LL * maxdx));
  // The weight and dW rows 4 bytes past a 16-byte line and 16-byte multiples long: a per-sample
  // op pairs one of them with a sample row (X, dx: s rows of the slice length past a 16-byte
  // line), and their one-element reads never meet in a bank unless that row starts 4 bytes past
  // a line too (odd slice lengths, a quarter of the samples; WsPlan's estimate counts them).
  const long long B4 = 16LL * ((maxni + 3) / 4);  // bytes of one buffer in wbdw
  as.data(".align 16");
  as.data(".space wpad, fp32, 1");
  as.data(".space wbdw, fp32, " + S(B4));
  as.data(".space dummy, fp32, 1");
  as.data(".space cfg, i32, 2");
  as.data(".space nupd, fp32, 1");
  as.data(".space joinf, i32, 1");  // 1: the next forward pass's input slice is in, its start waits
  as.data(".space rbase, i32, 1");  // exact windows: the return stream's count at this minibatch's start
  as.data(".space dzb, i32, 1");    // a convolution's dz by outputs: the buffer of the current output's
  // dW blocks (WsPlan::dw_block): two blocks of K rows, each row as long as the layer's slice,
  // 4 bytes past a 16-byte line as the weight rows; the next row's address, the rows in this
  // block and which block.
  const int K = p.dw_block;
  if (K > 1) {
    as.data(".align 16");
    as.data(".space dwpad, fp32, 1");
    as.data(".space dwblk, fp32, " + S(2LL * K * maxni));
  }

  const int chout = col.chain[a % 2], chin = a > 0 ? col.chain[(a - 1) % 2] : -1;
  // The dW rows reduce along the row toward the edge that feeds it: West, from the last column;
  // in an East band of the grid, East from column 0.
  const bool ef = p.east_fed(a), has_ein = ef ? c > 0 : c + 1 < C;
  const int eout = col.east[c % 2], ein = has_ein ? col.east[(ef ? c - 1 : c + 1) % 2] : -1;
  const uint32_t um = static_cast<uint32_t>(m);
  as << "init:";
  // The input stream's ramp filter (below) first of all: the stream may reach the row while init
  // still runs (its descriptors, a vector of ones filled in hundreds of cycles), and a wavelet
  // that arrives before the filter is set enters unfiltered.
  const long long nin = static_cast<long long>(p.len(0, a)) * m;
  auto in_window = [&] { as << "ld32 r13, [r0+cfg]" << "li r14, " + S(nin) << "add r14, r13, r14" << "filt " + S(col.in) + ", r13, r14"; };
  as << "li r0, 0";
  if (nin > 0) in_window();
  const std::string dW = as.fin(col.w, 1), dWb = as.mem("wbdw", 1), dXs = as.mem("X0", 1), dT = as.mem("wbdw", 1);
  const std::string dWs = as.fin(col.w, 1), dWa = as.mem("wbdw", 1);  // the prefetch: source, destination
  const std::string dAcc = as.mem("acc", um), dChO = as.fout(chout, um), dChI = a > 0 ? as.fin(chin, um) : "";
  const std::string dDxs = maxdx ? as.mem("dx", 1) : "", dDwr = as.mem("wbdw", 1), dEO = as.fout(eout, 1);
  const std::string dEI = has_ein ? as.fin(ein, 1) : "";
  const std::string dIn = as.fin(col.in, 1), dTake = as.mem("X0", 1);
  const std::string dRet = as.fin(col.ret, 1), dRetBuf = as.mem("dy", 1);
  const std::string dTr = as.mem("dy", um), dTrD = as.mem("X0", um);
  const std::string dGI = a > 0 ? as.fin(chin, 1) : "", dGO = as.fout(chout, 1), dGx = maxdx ? as.mem("dx", um) : "";
  const std::string dAll = maxdx ? as.mem("dx", 1) : "", dAllY = as.mem("X0", 1);
  const std::string dTmp = as.mem("dy", 1), dOnes = ones ? as.mem("ones", 1) : "";
  const std::string dFence = as.mem("dummy", 1);
  // A residual connection's sum (X{t} = X{k} + R{t}) and the sum's gradient kept (G{k}).
  // Also a GELU's scratch (with dG1..dG3): set before each use.
  const std::string dRx = residual || gelu ? as.mem("X0", 1) : "", dRs = residual || gelu ? as.mem("X0", 1) : "";
  const std::string dRr = residual || gelu ? as.mem("X0", 1) : "";
  const std::string dG1 = gelu ? as.mem("gsc", 1) : "", dG2 = gelu ? as.mem("gsc", 1) : "", dG3 = gelu ? as.mem("gsc", 1) : "";
  // Boundary j's values once its slice is in: a GELU's y = gelu(z) into X{j}, and a residual
  // connection's sum X{j} = X{k} + (R{j}, or X{j} after a GELU).
  std::function<void(int)> boundary_prelude;
  // The GELU's scratch over n elements: four vectors of gsc, their lengths n.
  auto gelu_scratch = [&](long long n, const std::string (&d)[4]) {
    as << "li r13, " + S(n);
    for (int i = 0; i < 4; ++i) as << "dlen " + d[i] + ", r13" << "li r14, gsc+" + S(4LL * i * maxdx) << "dbase " + d[i] + ", r14";
    as << "dlen " + dOnes + ", r13";
  };
  boundary_prelude = [&](int j) {
    const long long n = static_cast<long long>(p.len(j, a)) * m;
    const Activation jact = p.act[static_cast<size_t>(j) - 1];
    const bool jgelu = p.rows_act(j - 1);
    const int src = p.residual_source(j);
    const bool pre_sum = src >= 0 && p.res_pre(j - 1);
    if (pre_sum) {
      // The sum before the activation: Z{j} = X{k} + Z{j}, then y = act(Z{j}) into X{j}.
      as << "li r13, " + S(n) << "dlen " + dRx + ", r13" << "dlen " + dRs + ", r13" << "li r13, Z" + S(j) << "dbase " + dRx + ", r13"
         << "li r13, X" + S(src) << "dbase " + dRs + ", r13" << "vadd.fp32 " + dRx + ", " + dRs + ", " + dRx;
    }
    // A gated join keeps the activated output apart (R{j}) for its gradient.
    const bool mul = src >= 0 && p.mul_join(j - 1);
    if (jgelu) {
      const std::string sc[4] = {dRs, dRr, dG1, dG2};
      gelu_scratch(n, sc);
      as << "li r13, " + S(n) << "dlen " + dRx + ", r13" << "dlen " + dG3 + ", r13" << std::string("li r13, ") + (mul ? "R" : "X") + S(j)
         << "dbase " + dRx + ", r13" << "li r13, Z" + S(j) << "dbase " + dG3 + ", r13";
      emit_pre_act_fwd(as, jact, p.act_par[static_cast<size_t>(j) - 1], dRx, dG3, sc, dOnes);
    }
    if (src >= 0 && !pre_sum) {
      as << "li r13, " + S(n) << "dlen " + dRx + ", r13" << "dlen " + dRs + ", r13" << "dlen " + dRr + ", r13" << "li r13, X" + S(j)
         << "dbase " + dRx + ", r13" << "li r13, X" + S(src) << "dbase " + dRs + ", r13"
         << std::string("li r13, ") + (jgelu && !mul ? "X" : "R") + S(j) << "dbase " + dRr + ", r13";
      const int sub = p.sub_join(j - 1);  // a difference, either order
      as << (mul ? "vmul.fp32 " + dRx + ", " + dRr + ", " + dRs
             : sub == 1 ? "vsub.fp32 " + dRx + ", " + dRr + ", " + dRs
             : sub == 2 ? "vsub.fp32 " + dRx + ", " + dRs + ", " + dRr
                        : "vadd.fp32 " + dRx + ", " + dRs + ", " + dRr);
    }
  };
  // The second block's send (the first's is dEO, dEI).
  const std::string dBlkA = K > 1 ? as.mem("dwblk", 1) : "", dBlkB = K > 1 ? as.mem("dwblk", 1, 1) : "";
  const std::string dEO2 = K > 1 ? as.fout(eout, 1) : "", dEI2 = K > 1 && has_ein ? as.fin(ein, 1) : "";
  // Feature by feature: a column of a sample-major slice (stride: the slice length), the
  // product scratch, a row of dy, one dW element as the accumulator of m fused multiply-adds.
  const std::string dXk = by_feature ? as.mem("X0", um) : "", dFt = by_feature ? as.mem("ftm", um) : "";
  const std::string dDxk = by_feature && maxdx ? as.mem("dx", um) : "", dDyo = by_feature ? as.mem("dy", um) : "";
  const std::string dDw0 = by_feature ? as.mem("wbdw", um, 0) : "";
  // A convolution's operands: an input row (stride: the convolution's), a row of the plane of
  // sums, the plane, the plane down the column; backward a dx row (strided), a dz row, the dW
  // element (stride 0: the accumulator of a row's fused multiply-adds).
  const std::string dCx = cplane ? as.mem("cacc", 1) : "", dCa = cplane ? as.mem("cacc", 1) : "";
  const std::string dCacc = cplane ? as.mem("cacc", 1) : "", dChP = cplane ? as.fout(chout, 1) : "";
  const std::string dChPI = cplane && a > 0 ? as.fin(chin, 1) : "";  // the plane of sums from the row above
  const std::string dCdx = cplane && maxdx ? as.mem("cacc", 1) : "", dCz = cplane ? as.mem("cacc", 1) : "";
  const std::string dCw0 = cplane ? as.mem("cacc", 1, 0) : "";
  const std::string dYR = conv_keep ? as.mem("dy", 1) : "";  // a channel's kept planes, or the own part's send
  as << "li r1, 0" << "li r3, 0" << "li r13, wbdw+" + S(3 * B4) << "dbase " + dT + ", r13";
  if (K > 1) as << "li r13, dwblk+" + S(4LL * K * maxni) << "dbase " + dBlkB + ", r13";
  if (ones) as << "li r13, " + S(maxdx) << "dlen " + dOnes + ", r13" << "lif r13, 1.0" << "vfill.fp32 " + dOnes + ", r13";
  // The input stream's ramp filter: wavelets of the row's stream are numbered from 0 at reset,
  // minibatch after minibatch (cfg[1] of them each: every column's part); this column's part
  // of the minibatch starts at cfg[0], nin long. The rest never reaches the core. The window
  // moves to the next minibatch as soon as this one's part is in (stepstart), so the next
  // minibatch's part waits in the queue however early it comes.
  // Sections of the return stream, each read before the phase after it (section s serves phase
  // s + 1): s < L-1 this row's slice of layer s's outputs, s >= L-1 the dy of layer 2L-2-s
  // (whole). In the grid a row's slice of a layer can be empty: it reads no section it does
  // not need, and its ramp filter then takes exact windows per section counted from rbase (not
  // from an fcnt at the minibatch's start: a row that needs no dy of layer 0 starts the next
  // minibatch while that dy still passes it).
  auto need = [&](int sct) {
    return sct < L - 1 ? p.len(sct + 1, a) > 0 : p.len(2 * L - 2 - sct, a) > 0;
  };
  // A section read output by output (a convolution's dz, WsPlan::dz_streamed): its pass starts
  // at once and each output waits for its own dz (at the start of its work, below).
  auto streamed = [&](int sct) { return sct >= L && p.dz_streamed(2 * L - 2 - sct); };
  bool exact = false;
  for (int sct = L - 1; sct <= 2 * L - 2; ++sct) exact = exact || !need(sct);
  bool any_need = false;
  for (int sct = 0; sct <= 2 * L - 2; ++sct) any_need = any_need || need(sct);
  as << "activate 1" << "exit";

  // Loop bounds and vector lengths of layer l's passes.
  // dW blocks: block B's start, and the block each backward pass starts in (startb[l]: B where
  // the pass before it, the backward pass of layer l+1, ended in A, whose send may still be on
  // its way: a pass's last block leaves asynchronously but for layer 0's).
  const long long blkb = 4LL * K * maxni;
  std::vector<char> startb(static_cast<size_t>(L), 0);
  // Does the backward pass of layer l end in block B? (Its outputs' blocks alternate from startb[l].)
  auto ends_in_b = [&](int l) { return (startb[static_cast<size_t>(l)] + (p.width[static_cast<size_t>(l) + 1] - 1) / K) % 2 == 1; };
  for (int l = L - 1; l >= 1 && K > 1; --l) {
    startb[static_cast<size_t>(l) - 1] = p.len(p.in(l), a) > 0 ? !ends_in_b(l) : startb[static_cast<size_t>(l)];
  }
  auto set_layer = [&](int l) {
    as << "li r10, " + S(p.wlen(l, a)) << "li r11, " + S(p.outs[static_cast<size_t>(l)]) << "li r3, 0" << "li r4, dy";
    if (p.len(p.in(l), a) == 0) return;  // an empty slice (grid): no op of the layer reads these
    if (p.is_conv(l)) {
      const ConvParams& cv = p.conv[static_cast<size_t>(l)];
      as << "li r13, " + S(cv.sw) << "dstride " + dCx + ", r13";
      if (!dCdx.empty()) as << "dstride " + dCdx + ", r13";
      as << "li r13, " + S(p.oplane(l)) << "dlen " + dCacc + ", r13" << "dlen " + dChP + ", r13";
      if (a > 0) as << "dlen " + dChPI + ", r13";
    }
    for (const std::string& d : {dW, dWs, dWb, dWa, dXs, dT, dDwr, dEO}) as << "dlen " + d + ", r10";
    if (maxdx) as << "dlen " + dDxs + ", r10";
    if (has_ein) as << "dlen " + dEI + ", r10";
    if (K > 1) {  // a block's sends, K rows; the rows from the first block's start
      as << "li r13, " + S(static_cast<long long>(K) * p.len(p.in(l), a));
      for (const std::string& d : {dEO, dEI, dEO2, dEI2, dBlkA, dBlkB}) {
        if (!d.empty()) as << "dlen " + d + ", r13";
      }
      // The next dW row: r10 from here to the pass's end.
      as << (startb[static_cast<size_t>(l)] ? "li r10, dwblk+" + S(blkb) : std::string("li r10, dwblk"));
    }
  };
  // The q-th read of the return stream in a minibatch into the dy buffer: q < L-1 layer q's
  // outputs, of which the ramp filter lets in only this row's slice (layer q+1's input), at its
  // place in dy; then the dy of layers L-1 .. 0, whole.
  auto issue = [&](int q) {
    const int j = q < L - 1 ? q + 1 : L - (q - (L - 1));  // the boundary whose values come back
    // (A convolution's outputs: at dy's start; its rows' dz may take less than the layer's width.)
    const long long at = q < L - 1 && !p.is_conv(q) ? 4LL * p.off[static_cast<size_t>(j)][static_cast<size_t>(a)] * m : 0;
    const long long n = q < L - 1 ? static_cast<long long>(p.is_conv(q) ? p.chans(j, a) * p.ret_unit(q) : p.len(j, a)) * m
                                  : static_cast<long long>(p.outs[static_cast<size_t>(j) - 1]) * p.oplane(j - 1) * m;
    as << "li r9, " + S(q) << "li r13, dy+" + S(at) << "dbase " + dRetBuf + ", r13" << "li r13, " + S(n)
       << "dlen " + dRetBuf + ", r13" << "dlen " + dRet + ", r13" << "vmov.fp32 " + dRetBuf + ", " + dRet + ", async=1, done=activate:2";
  };
  // The return stream's ramp filter (docs/isa.md): the wavelets of a minibatch are numbered from
  // 0 (fcnt at its start); layer q's outputs (q < L-1) are numbers B_q .. B_{q+1}-1, output by
  // output, m samples each (B_q: the outputs of the layers before q, times m); then come the dy.
  // While layer q's outputs come back only this row's slice passes; after them, everything.
  // Each window is set before the values it passes can arrive: a layer's outputs need this
  // row's part of it, which starts after the previous read (rdone).
  std::vector<long long> B(static_cast<size_t>(L), 0);
  for (int q = 1; q < L; ++q) {
    const int l = q - 1;  // a convolution's outputs come with their kept planes (ret_unit)
    B[static_cast<size_t>(q)] = B[static_cast<size_t>(l)] +
                               (p.is_conv(l) ? static_cast<long long>(p.outs[static_cast<size_t>(l)]) * p.ret_unit(l) : p.width[static_cast<size_t>(q)]) * m;
  }
  // Exact windows: section s >= L-1 (dy of layer 2L-2-s) starts at D[s - (L-1)].
  std::vector<long long> D(static_cast<size_t>(L) + 1, B[static_cast<size_t>(L) - 1]);
  for (int i = 0; i < L; ++i) D[static_cast<size_t>(i) + 1] = D[static_cast<size_t>(i)] + static_cast<long long>(p.outs[static_cast<size_t>(L - i - 1)]) * p.oplane(L - i - 1) * m;
  // This row's part of layer q's outputs in the stream: its slice, or its channels' (each with
  // its kept planes).
  auto part = [&](int q, bool start) {
    const int j = q + 1;
    if (p.is_conv(q)) return static_cast<long long>(start ? p.ch0(j, a) : p.chans(j, a)) * p.ret_unit(q) * m;
    return static_cast<long long>(start ? p.off[static_cast<size_t>(j)][static_cast<size_t>(a)] : p.len(j, a)) * m;
  };
  auto window = [&](int q) {
    const long long lo = q < L - 1 ? B[static_cast<size_t>(q)] + part(q, true)
                                   : exact ? D[static_cast<size_t>(q - (L - 1))] : B[static_cast<size_t>(L) - 1];
    const long long hi = q < L - 1 ? lo + part(q, false)
                                   : exact ? D[static_cast<size_t>(q - (L - 1)) + 1] : 0xffffffffLL;
    if (!exact) {
      as << "li r13, " + S(lo) << "li r14, " + S(hi) << "filt " + S(col.ret) + ", r13, r14";
    } else {
      as << "ld32 r13, [r0+rbase]" << "li r14, " + S(hi) << "add r14, r13, r14" << "li r5, " + S(lo) << "add r13, r13, r5"
         << "filt " + S(col.ret) + ", r13, r14";
    }
  };
  // The first section after q (up to the first dy, L-1) that this row reads, or -1.
  auto next_read = [&](int q) {
    for (int sct = q + 1; sct <= L - 1; ++sct) {
      if (need(sct)) return sct;
    }
    return -1;
  };
  // At the end of minibatch: an exact row moves rbase past the minibatch's return stream.
  auto end_minibatch = [&] {
    if (exact) as << "ld32 r13, [r0+rbase]" << "li r14, " + S(D[static_cast<size_t>(L)]) << "add r13, r13, r14" << "st32 [r0+rbase], r13";
  };

  // Start of a minibatch: this column's samples of the row's input slice (the only part of the
  // stream the filter lets in), the filter moved on to the next minibatch, then the first read.
  as << "stepstart:";
  if (nin > 0) {
    as << "li r13, " + S(nin) << "dlen " + dIn + ", r13" << "li r14, X0" << "dbase " + dTake + ", r14" << "dlen " + dTake + ", r13"
       << "vmov.fp32 " + dTake + ", " + dIn;
    as << "ld32 r13, [r0+cfg]" << "ld32 r14, [r0+cfg+4]" << "add r13, r13, r14" << "st32 [r0+cfg], r13";
    in_window();
  }
  if (!exact) as << "fcnt " + S(col.ret) + ", r0";
  if (const int first = need(0) ? 0 : next_read(0); first >= 0) {
    window(first);
    issue(first);
  } else {
    as << "filt " + S(col.ret) + ", r0, r0";  // nothing until a dy this row needs (read_next)
  }
  as << "li r1, 0";
  set_layer(0);
  as << "activate " + work_task(0) << "exit";

  // A return read is in: a layer's outputs are transposed into this row's next input (its
  // slice, [s][k]) and the next read starts; the work of the next pass may begin.
  as << "rdone:";
  for (int q = 0; q + 1 < L; ++q) {
    if (need(q)) as << "li r13, " + S(q) << "beq r9, r13, rd_" + S(q);
  }
  // A read that only lets a phase start: that of r1.
  if (phase_tasks) {
    for (int ph = 1; ph < nphase; ++ph) as << "li r13, " + S(ph) << "beq r1, r13, ra_" + S(ph);
    as << "activate " + work_task(0) << "exit";
    for (int ph = 1; ph < nphase; ++ph) as << "ra_" + S(ph) + ":" << "activate " + work_task(ph) << "exit";
  } else {
    as << "activate 3" << "exit";
  }
  for (int q = 0; q + 1 < L; ++q) {
    if (!need(q)) continue;
    const int j = q + 1, nO = p.len(j, a), src = p.residual_source(j);
    const bool jgelu = p.rows_act(q);
    as << "rd_" + S(q) + ":";
    if (p.is_conv(q)) {
      // A convolution's pooled outputs come output by output, sample by sample ([co][s][plane]):
      // each plane to its sample's place ([s][co][plane]).
      // This row's channels of them (its slice, at dy's start).
      // Each channel's kept planes (y or z of its m samples) follow its pooled ones: into
      // YR{j}'s second part of the channel (r5).
      const int Pq = p.qplane(q), co = p.len(j, a) / Pq;
      const long long kp = static_cast<long long>(p.oplane(q)) * m, unitb = 4LL * p.ret_unit(q) * m;
      as << "li r13, " + S(Pq) << "dlen " + dTr + ", r13" << "dlen " + dTrD + ", r13" << "li r13, 1" << "dstride " + dTrD + ", r13"
         << "li r5, dy" << "dbase " + dTr + ", r5" << "li r6, X" + S(j) << "li r5, YR" + S(j) + "+" + S(4LL * Pq * m)
         << "li r13, " + S(kp) << "dlen " + dYR + ", r13"
         << "li r8, 0" << "tc_" + S(q) + ":" << "mov r7, r6" << "li r14, 0"
         << "tcs_" + S(q) + ":" << "dbase " + dTrD + ", r7" << "vmov.fp32 " + dTrD + ", " + dTr << "daddb " + dTr + ", " + S(4LL * Pq)
         << "addi r7, r7, " + S(4LL * p.len(j, a)) << "addi r14, r14, 1" << "li r13, " + S(m) << "bne r14, r13, tcs_" + S(q)
         << "li r13, " + S(kp) << "dlen " + dTr + ", r13" << "dbase " + dYR + ", r5" << "vmov.fp32 " + dYR + ", " + dTr
         << "daddb " + dTr + ", " + S(4 * kp) << "li r13, " + S(Pq) << "dlen " + dTr + ", r13" << "addi r5, r5, " + S(unitb)
         << "addi r6, r6, " + S(4LL * Pq) << "addi r8, r8, 1" << "li r13, " + S(co) << "bne r8, r13, tc_" + S(q);
      // The dense transposition's lengths again.
      as << "li r13, " + S(m) << "dlen " + dTr + ", r13" << "dlen " + dTrD + ", r13";
    } else {
      as << "li r5, dy+" + S(4LL * p.off[static_cast<size_t>(j)][static_cast<size_t>(a)] * m) << "dbase " + dTr + ", r5"
       << std::string("li r6, ") + (jgelu ? "Z" : src >= 0 ? "R" : "X") + S(j) << "dbase " + dTrD + ", r6" << "li r13, " + S(nO) << "dstride " + dTrD + ", r13";
      // One op: the destination in rows of the m samples of a feature (stride: the slice
      // length), a row per feature; then one-dimensional, m long, again.
      as << "li r13, " + S(static_cast<long long>(nO) * m) << "dlen " + dTr + ", r13" << "dlen " + dTrD + ", r13" << "li r13, " + S(m)
         << "li r14, 1" << "drows " + dTrD + ", r13, r14" << "vmov.fp32 " + dTrD + ", " + dTr << "dlen " + dTr + ", r13" << "dlen " + dTrD + ", r13"
         << "drows " + dTrD + ", r0, r0";
      // A GELU's boundary waits for the start of the next pass (boundary_prelude): the read may
      // end while this row still works on layer q, and a long handler here would hold up every
      // output's chain through this row, row after row.
      if (!jgelu) boundary_prelude(j);
    }
    if (const int nx = next_read(q); nx >= 0) {
      window(nx);
      issue(nx);
    }
    // The filtered read ends as soon as this row's slice is in, maybe before the row's own part
    // of layer q is done (r1 still q): then the pass's last output starts layer q+1 (joinf).
    as << "li r13, " + S(q + 1) << "beq r1, r13, rj_" + S(q) << "li r13, 1" << "st32 [r0+joinf], r13" << "exit"
       << "rj_" + S(q) + ":" << "activate " + work_task(q + 1) << "exit";
  }

  // This output's weights: the first of a pass reads them into wbuf 0, later ones were
  // prefetched into r12's buffer; then the next output's prefetch starts (none after the last).
  auto weights = [&](const std::string& tag, int ph) {
    as << "bne r3, r0, wh_" + tag << "li r12, wbdw" << "li r15, wbdw+" + S(B4) << "dbase " + dWb + ", r12"
       << "vmov.fp32 " + dWb + ", " + dW << "wh_" + tag + ":" << "addi r13, r3, 1" << "beq r13, r11, wn_" + tag
       << "dbase " + dWa + ", r15" << "vmov.fp32 " + dWa + ", " + dWs + ", async=2, done=activate:" + work_task(ph) << "wn_" + tag + ":"
       << "dbase " + dWb + ", r12";
  };

  // A convolution's work for one output (its weights w[co][c kh kw] in r12's buffer), sample by
  // sample from X{l} ([s][c][h][w]): the plane of sums cleared, then per tap (the table ct{l},
  // in the order of ConvTap) one vaxpy of the tap's weight times its window of the input (a
  // two-dimensional operand: drows, rows of the valid outputs' inputs) into the valid part of
  // the plane; the plane goes down the column to the root. Registers: r2 sample, r5 the tap's
  // weight, r6 its table entry, r7 tap, r13 r14 scratch.
  auto tap_shape = [&](const ConvParams& cv, const std::vector<std::string>& win, const std::vector<std::string>& out) {
    as << "ld32 r13, [r6+8]" << "li r14, " + S(static_cast<long long>(cv.sh) * cv.w);
    for (const std::string& d : win) as << "drows " + d + ", r13, r14";
    as << "li r14, " + S(cv.wo);
    for (const std::string& d : out) as << "drows " + d + ", r13, r14";
  };
  auto conv_forward = [&](int l) {
    const ConvParams cv = p.conv_slice(l, a);
    const std::string L_ = S(l);
    as << "li r2, 0" << "li r13, X" + L_ << "st32 [r0+xbase], r13";
    as << "cs_" + L_ + ":" << "vfill.fp32 " + dCacc + ", r0" << "mov r5, r12" << "li r6, ct" + L_ << "li r7, 0";
    as << "ct_" + L_ + ":" << "ld32 r13, [r6+12]" << "beq r13, r0, cn_" + L_ << "dlen " + dCx + ", r13" << "dlen " + dCa + ", r13";
    tap_shape(cv, {dCx}, {dCa});
    as << "ld32 r13, [r6]" << "ld32 r14, [r0+xbase]" << "add r13, r13, r14" << "dbase " + dCx + ", r13" << "ld32 r13, [r6+4]"
       << "li r14, cacc" << "add r13, r13, r14" << "dbase " + dCa + ", r13" << "ld32 r14, [r5]"
       << "vaxpy.fp32 " + dCa + ", " + dCx + ", r14";
    as << "cn_" + L_ + ":" << "addi r5, r5, 4" << "addi r6, r6, 16" << "addi r7, r7, 1" << "li r13, " + S(cv.taps())
       << "bne r7, r13, ct_" + L_;
    // Down the column: the row above's partial plane plus this row's (rows in order, as dense).
    as << (a > 0 ? "vadd.fp32 " + dChP + ", " + dChPI + ", " + dCacc : "vmov.fp32 " + dChP + ", " + dCacc);
    as << "ld32 r13, [r0+xbase]" << "addi r13, r13, " + S(4LL * p.len(l, a)) << "st32 [r0+xbase], r13"
       << "addi r2, r2, 1" << "li r14, " + S(m) << "bne r2, r14, cs_" + L_;
  };
  // Its backward work for one output: dz of the output is at r4 ([s][plane], the root's), and
  // per sample and tap a vaxpy of the weight times the tap's dz into its window of dx (not in
  // the first layer) and a vfmac of that dz and the input window into the tap's dW element
  // (dwp; the dW row starts at 0), row after row of the window. r4 moves past the output's dz.
  auto conv_backward = [&](int l) {
    const ConvParams cv = p.conv_slice(l, a);
    const std::string P_ = S(2 * L - 1 - l);
    as << "li r2, 0" << "li r13, X" + S(l) << "st32 [r0+xbase], r13";
    if (l > 0) as << "li r13, dx" << "st32 [r0+dxbase], r13";
    as << "cbs_" + P_ + ":" << "mov r5, r12" << "li r6, ct" + S(l) << "li r7, 0" << "addi r13, r12, " + S(2 * B4) << "st32 [r0+dwp], r13";
    as << "cbt_" + P_ + ":" << "ld32 r13, [r6+12]" << "beq r13, r0, cbn_" + P_ << "dlen " + dCx + ", r13" << "dlen " + dCz + ", r13"
       << "dlen " + dCw0 + ", r13";
    if (l > 0) as << "dlen " + dCdx + ", r13";
    tap_shape(cv, l > 0 ? std::vector<std::string>{dCx, dCdx} : std::vector<std::string>{dCx}, {dCz});
    as << "ld32 r13, [r6]" << "ld32 r14, [r0+xbase]" << "add r14, r13, r14" << "dbase " + dCx + ", r14";
    if (l > 0) as << "ld32 r14, [r0+dxbase]" << "add r14, r13, r14" << "dbase " + dCdx + ", r14";
    as << "ld32 r13, [r6+4]" << "add r13, r13, r4" << "dbase " + dCz + ", r13" << "ld32 r13, [r0+dwp]" << "dbase " + dCw0 + ", r13"
       << "ld32 r14, [r5]";
    if (l > 0) as << "vaxpy.fp32 " + dCdx + ", " + dCz + ", r14";
    as << "vfmac.fp32 " + dCw0 + ", " + dCz + ", " + dCx + ", " + dCw0;
    as << "cbn_" + P_ + ":" << "addi r5, r5, 4" << "addi r6, r6, 16" << "ld32 r13, [r0+dwp]" << "addi r13, r13, 4"
       << "st32 [r0+dwp], r13" << "addi r7, r7, 1" << "li r13, " + S(cv.taps()) << "bne r7, r13, cbt_" + P_;
    const long long xb = 4LL * p.len(l, a);
    as << "ld32 r13, [r0+xbase]" << "addi r13, r13, " + S(xb) << "st32 [r0+xbase], r13";
    if (l > 0) as << "ld32 r13, [r0+dxbase]" << "addi r13, r13, " + S(xb) << "st32 [r0+dxbase], r13";
    as << "addi r4, r4, " + S(4LL * p.oplane(l)) << "addi r2, r2, 1" << "li r14, " + S(m) << "bne r2, r14, cbs_" + P_;
  };

  // One output's work.
  if (!phase_tasks) {
    as << "work:" << "beq r1, r0, ph_0";
    for (int ph = 2 * L - 1; ph >= 1; --ph) {
      if (ph == 1) as << "jmp ph_1";
      else as << "li r13, " + S(ph) << "beq r1, r13, ph_" + S(ph);
    }
  }
  // The start of phase l + 1 at the end of forward phase l: if it reads a section first, when
  // that is in (joinf, or rdone); else at once.
  auto next_forward = [&](int l) {
    if (l + 1 < L) {
      if (need(l)) {
        as << "ld32 r13, [r0+joinf]" << "beq r13, r0, fj_" + S(l) << "st32 [r0+joinf], r0" << "activate " + work_task(l + 1)
           << "fj_" + S(l) + ":";
      } else {
        as << "activate " + work_task(l + 1);
      }
    } else if (!need(L - 1)) {
      as << "activate " + work_task(L);
    }
  };
  for (int l = 0; l < L; ++l) {
    const int li = p.in(l);  // the boundary it reads (a branch: an earlier one than l)
    const long long row4 = 4LL * p.len(li, a);
    const std::string L_ = S(l);
    as << "ph_" + L_ + ":";
    if (p.len(l, a) == 0 && p.is_conv(l)) {
      // An empty slice of a convolution's input (rows past its channels; never row 0): per
      // output the m planes of partial sums pass on down the column.
      if (a == 0) throw std::logic_error("ws_codegen: row 0 has no channels of convolution " + L_);
      const long long n = static_cast<long long>(m) * p.oplane(l);
      as << "li r13, " + S(n) << "dlen " + dChO + ", r13" << "dlen " + dChI + ", r13" << "pe_" + L_ + ":" << "vmov.fp32 " + dChO + ", " + dChI
         << "addi r3, r3, 1" << "bne r3, r11, pe_" + L_ << "li r13, " + S(m) << "dlen " + dChO + ", r13" << "dlen " + dChI + ", r13"
         << "li r1, " + S(l + 1);
      set_layer(l + 1 < L ? l + 1 : L - 1);
      next_forward(l);
      as << "exit";
      continue;
    }
    if (p.len(li, a) == 0) {
      // An empty slice of this layer (grid): per output the partial sums pass on down the
      // column (a vmov, so that -0 stays -0), or the first row starts them at 0.
      if (a == 0) as << "vfill.fp32 " + dAcc + ", r0";
      as << "pe_" + L_ + ":" << (a == 0 ? "vmov.fp32 " + dChO + ", " + dAcc : "vmov.fp32 " + dChO + ", " + dChI) << "addi r3, r3, 1"
         << "bne r3, r11, pe_" + L_ << "li r1, " + S(l + 1);
      set_layer(l + 1 < L ? l + 1 : L - 1);
      next_forward(l);
      as << "exit";
      continue;
    }
    if (l > 0 && p.rows_act(l - 1)) {
      // The start of the pass, all rows at once: the boundary's GELU (and residual sum).
      as << "bne r3, r0, gp_" + L_;
      boundary_prelude(l);
      as << "gp_" + L_ + ":";
    }
    weights("f" + L_, l);
    if (p.is_conv(l)) {
      conv_forward(l);
    } else if (p.by_feature(l, a)) {
      as << "vfill.fp32 " + dAcc + ", r0" << "li r13, X" + S(li) << "dbase " + dXk + ", r13" << "li r13, " + S(p.len(li, a))
         << "dstride " + dXk + ", r13" << "mov r5, r12" << "li r2, 0";
      as << "ff_" + L_ + ":" << "ld32 r13, [r5]" << "vmuls.fp32 " + dFt + ", " + dXk + ", r13"
         << "vadd.fp32 " + dAcc + ", " + dAcc + ", " + dFt << "addi r5, r5, 4" << "daddb " + dXk + ", 4" << "addi r2, r2, 1"
         << "li r14, " + S(p.len(li, a)) << "bne r2, r14, ff_" + L_;
    } else {
      as << "li r13, X" + S(li) << "dbase " + dXs + ", r13";
      if (m <= kWsUnrolledSamples) {
        // A few samples: the loop unrolled (the same ops in the same order, no loop counter).
        for (int s = 0; s < m; ++s) {
          as << "vmul.fp32 " + dT + ", " + dWb + ", " + dXs << "vsum.fp32 r13, " + dT << "st32 [r0+acc+" + S(4LL * s) + "], r13";
          if (s + 1 < m) as << "daddb " + dXs + ", " + S(row4);
        }
      } else {
        as << "li r2, 0" << "li r5, acc";
        as << "fs_" + L_ + ":" << "vmul.fp32 " + dT + ", " + dWb + ", " + dXs << "vsum.fp32 r13, " + dT << "st32 [r5], r13"
           << "addi r5, r5, 4" << "daddb " + dXs + ", " + S(row4) << "addi r2, r2, 1" << "li r14, " + S(m)
           << "bne r2, r14, fs_" + L_;
      }
    }
    if (p.is_conv(l)) {
    } else if (a == 0) {
      as << "vmov.fp32 " + dChO + ", " + dAcc;
    } else {
      as << "vadd.fp32 " + dChO + ", " + dChI + ", " + dAcc;
    }
    as << "mov r13, r12" << "mov r12, r15" << "mov r15, r13";
    as << "addi r3, r3, 1" << "bne r3, r11, fm_" + L_ << "li r1, " + S(l + 1);
    set_layer(l + 1 < L ? l + 1 : L - 1);
    next_forward(l);  // the next layer's slice came in first (rdone): start its pass now
    as << "exit" << "fm_" + L_ + ":" << "exit";  // the prefetch's completion starts the next output
  }
  // The start of convolution l-1's backward pass (boundary l its output): each row sends its
  // channels' pooled gradients and kept planes (YR{l}) down the column after those of the rows
  // above it, which it passes on: on microthread 4, beside the pass, so that no row waits for
  // the roots, which return each output's dz as soon as its planes are in (the rows read the dz
  // output by output). The own part goes once the passing on is done: at once where there is
  // none; else as the pass reaches the row's first channel (conv_own_at: by then the roots have
  // had every channel above it, so the issue does not wait), or, for a row with no slice of the
  // pass's input (it does no work in that pass), at the pass's start, waiting for it.
  auto unit_of = [&](int l) { return static_cast<long long>(p.ret_unit(l - 1)) * m; };
  auto own_send = [&](int l) {
    const long long own = static_cast<long long>(p.chans(l, a)) * unit_of(l);
    as << "li r13, YR" + S(l) << "dbase " + dYR + ", r13" << "li r13, " + S(own) << "dlen " + dYR + ", r13" << "dlen " + dGO + ", r13"
       << "vmov.fp32 " + dGO + ", " + dYR + ", async=4";
  };
  auto conv_send = [&](int l) {
    const long long above = p.ch0(l, a) * unit_of(l), own = static_cast<long long>(p.chans(l, a)) * unit_of(l);
    if (above > 0) {
      as << "li r13, " + S(above) << "dlen " + dGI + ", r13" << "dlen " + dGO + ", r13" << "vmov.fp32 " + dGO + ", " + dGI + ", async=4";
    } else if (own > 0) {
      own_send(l);
    }
  };
  // In pass l (convolution l's backward), before output o's work: where output o is this row's
  // first channel of boundary l + 1 and rows above own channels, its own part.
  auto conv_own_at = [&](int l, const std::string& tag) {
    if (l + 1 >= L || !p.is_conv(l) || p.chans(l + 1, a) == 0 || p.ch0(l + 1, a) == 0) return;
    as << "li r13, " + S(p.ch0(l + 1, a)) << "bne r3, r13, ko_" + tag;
    own_send(l + 1);
    as << "ko_" + tag + ":";
  };
  // Whether a contribution to G{k} at the end of pass l is its first in a minibatch (then it
  // assigns, else it adds): passes from the last layer's down; in a pass a branch's dx (into the
  // boundary it reads) before the join's share (into its source). The reference sums in that order.
  auto g_first = [&](int k, int l, bool join) {
    for (int q = L - 1; q >= l; --q) {
      const bool br = q > 0 && p.in(q) == k && q != k;
      const bool jn = p.residual_source(q) == k && !p.root_sum(q);
      if (q == l) return !join || !br;
      if (br || jn) return false;
    }
    return true;
  };
  for (int l = L - 1; l >= 0; --l) {
    const int ph = 2 * L - 1 - l;
    // The slices of the boundary the layer reads (its dx, its dW's input) and of boundary l,
    // whose gradient goes down at the pass's end: the same but for a branch.
    const int li = p.in(l), nI = p.len(li, a), nB = p.len(l, a);
    const long long row4 = 4LL * nI;
    const std::string P = S(ph);
    as << "ph_" + P + ":";
    // dy of layer l-1 gathers down each column through every row, in row order: the rows
    // above's part, then this row's slice.
    auto gather_above = [&] {
      const long long above = static_cast<long long>(p.off[static_cast<size_t>(l)][static_cast<size_t>(a)]) * m;
      if (a > 0 && above > 0) {
        as << "li r14, " + S(above) << "dlen " + dGI + ", r14" << "dlen " + dGO + ", r14" << "vmov.fp32 " + dGO + ", " + dGI;
      }
    };
    // The read of the next phase's section (if this row needs it) and, if it needs none, its start.
    auto read_next = [&] {
      if (!need(ph)) return;
      if (exact) window(ph);
      if (streamed(ph)) {
        // The next pass's first output's dz into the first buffer (microthread 1, no task).
        const long long n = static_cast<long long>(m) * p.oplane(2 * L - 2 - ph);
        as << "li r13, dy" << "st32 [r0+dzb], r13" << "dbase " + dRetBuf + ", r13" << "li r13, " + S(n) << "dlen " + dRetBuf + ", r13"
           << "dlen " + dRet + ", r13" << "vmov.fp32 " + dRetBuf + ", " + dRet + ", async=1";
        return;
      }
      issue(ph);
    };
    auto starts_now = [&] { return !need(ph) || streamed(ph); };
    if (nI == 0) {
      // An empty slice of this layer (grid): no weights, no dW, no dx; only the gather of layer
      // l-1's dy passes through. No work in this pass: the own part of boundary l + 1 after the
      // passing on (waiting for it).
      if (l + 1 < L && p.is_conv(l) && p.chans(l + 1, a) > 0 && p.ch0(l + 1, a) > 0) own_send(l + 1);
      if (l == 0) {
        end_minibatch();
        as << "ld32 r13, [r0+nupd]" << "lif r14, 1.0" << "fadd r13, r13, r14" << "st32 [r0+nupd], r13" << "li r1, 0"
           << "activate 1" << "exit";
        continue;
      }
      read_next();
      if (p.is_conv(l - 1)) conv_send(l);  // the channels of the rows above pass on
      else gather_above();
      as << "li r1, " + S(ph + 1);
      set_layer(l - 1);
      if (starts_now()) as << "activate " + work_task(ph + 1);
      as << "exit";
      continue;
    }
    if (l > 0) weights("b" + P, ph);  // layer 0's dW needs no weights (WsPlan::streamed_passes)
    if (K > 1) {
      as << "dbase " + dDwr + ", r10" << "vfill.fp32 " + dDwr + ", r0";
    } else {
      as << "addi r13, r12, " + S(2 * B4) << "dbase " + dDwr + ", r13" << "vfill.fp32 " + dDwr + ", r0";
    }
    if (p.is_conv(l)) {
      conv_own_at(l, P);
      if (streamed(ph - 1)) {
        // This output's dz: its read done (a one-element op on microthread 1 waits it out), the
        // next output's read into the other buffer, r4 at this one's.
        const long long n = static_cast<long long>(m) * p.oplane(l);
        as << "vmov.fp32 " + dFence + ", " + dFence + ", async=1" << "ld32 r4, [r0+dzb]" << "li r13, dy" << "bne r4, r13, zb_" + P
           << "li r13, dy+" + S(4 * n) << "zb_" + P + ":" << "st32 [r0+dzb], r13" << "addi r14, r3, 1" << "beq r14, r11, zn_" + P
           << "dbase " + dRetBuf + ", r13" << "li r14, " + S(n) << "dlen " + dRetBuf + ", r14" << "dlen " + dRet + ", r14"
           << "vmov.fp32 " + dRetBuf + ", " + dRet + ", async=1" << "zn_" + P + ":";
      }
      conv_backward(l);
    } else if (p.by_feature(l, a)) {
      as << "li r14, " + S(nI) << "li r13, X" + S(li) << "dbase " + dXk + ", r13" << "dstride " + dXk + ", r14";
      if (li > 0) as << "li r13, dx" << "dbase " + dDxk + ", r13" << "dstride " + dDxk + ", r14";
      as << "dbase " + dDyo + ", r4" << "addi r4, r4, " + S(4LL * m) << "mov r5, r12";
      if (K > 1) as << "mov r6, r10";
      else as << "addi r6, r12, " + S(2 * B4);
      as << "li r2, 0";
      as << "bf_" + P + ":";
      if (li > 0) as << "ld32 r13, [r5]" << "vaxpy.fp32 " + dDxk + ", " + dDyo + ", r13" << "daddb " + dDxk + ", 4";
      as << "dbase " + dDw0 + ", r6" << "vfmac.fp32 " + dDw0 + ", " + dDyo + ", " + dXk + ", " + dDw0 << "addi r5, r5, 4"
         << "addi r6, r6, 4" << "daddb " + dXk + ", 4" << "addi r2, r2, 1" << "li r14, " + S(nI) << "bne r2, r14, bf_" + P;
    } else {
      as << "li r13, X" + S(li) << "dbase " + dXs + ", r13";
      if (li > 0) as << "li r13, dx" << "dbase " + dDxs + ", r13";
      if (m <= kWsUnrolledSamples) {
        for (int s = 0; s < m; ++s) {
          const bool more = s + 1 < m;
          as << "ld32 r13, [r4+" + S(4LL * s) + "]";
          if (li > 0) {
            as << "vaxpy.fp32 " + dDxs + ", " + dWb + ", r13";
            if (more) as << "daddb " + dDxs + ", " + S(row4);
          }
          as << "vaxpy.fp32 " + dDwr + ", " + dXs + ", r13";
          if (more) as << "daddb " + dXs + ", " + S(row4);
        }
        as << "addi r4, r4, " + S(4LL * m);
      } else {
        as << "li r2, 0";
        as << "bs_" + P + ":" << "ld32 r13, [r4]" << "addi r4, r4, 4";
        if (li > 0) as << "vaxpy.fp32 " + dDxs + ", " + dWb + ", r13" << "daddb " + dDxs + ", " + S(row4);
        as << "vaxpy.fp32 " + dDwr + ", " + dXs + ", r13" << "daddb " + dXs + ", " + S(row4) << "addi r2, r2, 1"
           << "li r14, " + S(m) << "bne r2, r14, bs_" + P;
      }
    }
    // The dW row leaves west: asynchronously while outputs follow; the last one synchronously,
    // after a one-element op on microthread 3 has waited out the previous send.
    const std::string send = !has_ein ? "vmov.fp32 " + dEO + ", " + dDwr : "vadd.fp32 " + dEO + ", " + dEI + ", " + dDwr;
    // With dW blocks: a block's rows leave in one send once K are in (the last block, maybe
    // shorter, at the pass's end), from block A or B by turns.
    auto block_send = [&](bool b) {
      return !has_ein ? "vmov.fp32 " + (b ? dEO2 : dEO) + ", " + (b ? dBlkB : dBlkA)
                      : "vadd.fp32 " + (b ? dEO2 : dEO) + ", " + (b ? dEI2 : dEI) + ", " + (b ? dBlkB : dBlkA);
    };
    const int nO = p.width[static_cast<size_t>(l) + 1];
    as << "mov r13, r12" << "mov r12, r15" << "mov r15, r13";
    if (K > 1) {
      as << "addi r10, r10, " + S(row4);
    }
    as << "addi r3, r3, 1" << "bne r3, r11, bm_" + P;
    if (K > 1) {
      // The last block: asynchronously (its wave overlaps the dy's turn through the roots and
      // the next pass's first block, which fills the other block), but in layer 0's pass, the
      // minibatch's last. Its descriptors are not those of the block on its way.
      const int count = nO - (nO - 1) / K * K;
      const bool b = ends_in_b(l);
      if (l == 0) as << "vmov.fp32 " + dFence + ", " + dFence + ", async=3";
      as << "li r13, " + S(static_cast<long long>(count) * nI);
      for (const std::string& d : {b ? dEO2 : dEO, b ? dEI2 : dEI, b ? dBlkB : dBlkA}) {
        if (!d.empty()) as << "dlen " + d + ", r13";
      }
      as << block_send(b) + (l == 0 ? "" : ", async=3");
    } else {
      as << "vmov.fp32 " + dFence + ", " + dFence + ", async=3" << send;
    }
    if (l == 0) {
      end_minibatch();
      as << "ld32 r13, [r0+nupd]" << "lif r14, 1.0" << "fadd r13, r13, r14" << "st32 [r0+nupd], r13" << "li r1, 0"
         << "activate 1" << "exit";
    } else if (p.is_conv(l - 1)) {
      // Boundary l is a convolution's pooled output: this row's channels of its gradient go
      // beside their kept planes (YR{l}: [c][dq: s][plane] [kept]), and the rows send them down
      // to the roots (conv_send), which spread each output's over the pooling windows, take the
      // activation's derivative at the kept planes and return dz to every row, output by output.
      const int Pq = p.qplane(l - 1), co = p.len(l, a) / Pq;  // this row's channels of it
      const long long kp = static_cast<long long>(p.oplane(l - 1)) * m;
      as << "li r13, " + S(Pq) << "dlen " + dYR + ", r13" << "dlen " + dGx + ", r13" << "li r13, 1" << "dstride " + dGx + ", r13"
         << "li r5, YR" + S(l) << "li r6, dx" << "li r8, 0" << "gc_" + P + ":" << "mov r7, r6" << "li r14, 0" << "gcs_" + P + ":"
         << "dbase " + dGx + ", r7" << "dbase " + dYR + ", r5" << "vmov.fp32 " + dYR + ", " + dGx << "addi r5, r5, " + S(4LL * Pq)
         << "addi r7, r7, " + S(row4) << "addi r14, r14, 1" << "li r13, " + S(m) << "bne r14, r13, gcs_" + P << "addi r5, r5, " + S(4 * kp)
         << "addi r6, r6, " + S(4LL * Pq) << "addi r8, r8, 1" << "li r13, " + S(co) << "bne r8, r13, gc_" + P;
      read_next();
      conv_send(l);
      as << "li r13, " + S(static_cast<long long>(nI) * m) << "dlen " + dAll + ", r13" << "vfill.fp32 " + dAll + ", r0" << "li r1, " + S(ph + 1);
      set_layer(l - 1);
      if (starts_now()) as << "activate " + work_task(ph + 1);
      as << "exit";
    } else {
      // dy of layer l-1 for this row's slice: dx times the derivative of layer l-1's activation,
      // taken at its output (this row's input of layer l); then through the root to every row.
      const long long n = static_cast<long long>(nB) * m;
      const int src = p.residual_source(l);
      const Activation act = p.rows_bwd_act(l - 1);
      // A branch: its dx is the gradient of the boundary it reads, into G{li} (then cleared);
      // boundary l's gradient is then what its other readers left in G{l}.
      if (li != l) {
        if (li > 0) {
          as << "li r13, " + S(static_cast<long long>(nI) * m) << "dlen " + dAll + ", r13" << "dlen " + dRs + ", r13" << "li r14, G" + S(li)
             << "dbase " + dRs + ", r14" << (g_first(li, l, false) ? "vmov.fp32 " + dRs + ", " + dAll : "vadd.fp32 " + dRs + ", " + dRs + ", " + dAll)
             << "vfill.fp32 " + dAll + ", r0";
        }
        as << "li r13, " + S(n) << "dlen " + dAll + ", r13" << "dlen " + dRs + ", r13" << "li r14, G" + S(l) << "dbase " + dRs + ", r14"
           << "vmov.fp32 " + dAll + ", " + dRs;
      }
      const bool mul = src >= 0 && p.mul_join(l - 1);
      as << "li r13, " + S(n) << "dlen " + dAll + ", r13" << "dlen " + dAllY + ", r13"
         << std::string("li r14, ") + (act_needs_pre(act) ? "Z" : src >= 0 && !p.res_pre(l - 1) ? "R" : "X") + S(l) << "dbase " + dAllY + ", r14";
      // Boundary l's gradient adds what its other readers left in G{l} (a residual connection's
      // sum, a branch); where boundary l is a join, its source takes its share (into G{src}).
      if (li == l && p.has_g(l)) as << "dlen " + dRs + ", r13" << "li r14, G" + S(l) << "dbase " + dRs + ", r14" << "vadd.fp32 " + dAll + ", " + dAll + ", " + dRs;
      // The source's share: the sum's gradient, before the derivative, or after it where the sum
      // is the activation's input (res_pre); a gated join's: the gradient times the output (R).
      const bool pre_sum = src >= 0 && p.res_pre(l - 1);
      // A difference y - x_k gives the source -dx (a vmuls by -1 into G, or a vsub from it); x_k - y
      // gives it dx, and the layer -dx (below).
      const int sub = src >= 0 ? p.sub_join(l - 1) : 0;
      auto keep_share = [&] {
        if (src > 0) {
          const bool first = g_first(src, l, true);
          as << "li r13, " + S(n) << "dlen " + dRs + ", r13" << "li r14, G" + S(src) << "dbase " + dRs + ", r14";
          if (sub == 1 && first) as << "lif r13, -1.0" << "vmuls.fp32 " + dRs + ", " + dAll + ", r13";
          else if (sub == 1) as << "vsub.fp32 " + dRs + ", " + dRs + ", " + dAll;
          else as << (first ? "vmov.fp32 " + dRs + ", " + dAll : "vadd.fp32 " + dRs + ", " + dRs + ", " + dAll);
        }
        if (sub == 2) as << "lif r13, -1.0" << "vmuls.fp32 " + dAll + ", " + dAll + ", r13";
      };
      if (mul) {
        // The share dx y (y: the output before the join, R{l}), then dx x_src.
        as << "li r13, " + S(n) << "dlen " + dRr + ", r13" << "li r14, R" + S(l) << "dbase " + dRr + ", r14";
        if (src > 0) {
          as << "dlen " + dRs + ", r13" << "li r14, G" + S(src) << "dbase " + dRs + ", r14"
             << (g_first(src, l, true) ? "vmul.fp32 " + dRs + ", " + dAll + ", " + dRr : "vfmac.fp32 " + dRs + ", " + dAll + ", " + dRr + ", " + dRs);
        }
        as << "li r14, X" + S(src) << "dbase " + dRr + ", r14" << "vmul.fp32 " + dAll + ", " + dAll + ", " + dRr;
      } else if (!pre_sum) {
        keep_share();
      }
      if (act_needs_pre(act)) {
        const std::string sc[4] = {dRx, dRs, dRr, dG1};
        gelu_scratch(n, sc);
        emit_pre_act_bwd(as, act, p.act_par[static_cast<size_t>(l) - 1], dAll, dAllY, sc, dOnes);
      } else {
        const ActParams& par = p.act_par[static_cast<size_t>(l) - 1];
        if (needs_tmp(act, par)) as << "dlen " + dTmp + ", r13";
        if (needs_ones(act, par)) as << "dlen " + dOnes + ", r13";
        emit_act_bwd(as, act, p.act_par[static_cast<size_t>(l) - 1], dAll, dAllY, dTmp, dOnes);
      }
      if (pre_sum) keep_share();
      read_next();
      gather_above();
      // This row's slice in output order: feature k of every sample (stride: the slice length).
      // One op: rows of the m samples of a feature (stride: the slice length), a row per feature.
      as << "li r13, " + S(n) << "dlen " + dGO + ", r13" << "dlen " + dGx + ", r13" << "li r13, dx" << "dbase " + dGx + ", r13"
         << "li r13, " + S(nB) << "dstride " + dGx + ", r13" << "li r13, " + S(m) << "li r14, 1" << "drows " + dGx + ", r13, r14"
         << "vmov.fp32 " + dGO + ", " + dGx << "drows " + dGx + ", r0, r0";
      as << "vfill.fp32 " + dAll + ", r0" << "li r1, " + S(ph + 1);
      set_layer(l - 1);
      if (starts_now()) as << "activate " + work_task(ph + 1);
      as << "exit";
    }
    as << "bm_" + P + ":";
    // The next output starts at the prefetch's completion, or at once in layer 0's pass, which
    // reads no weights.
    const std::string next = l == 0 ? "activate " + work_task(ph) : "";
    if (K > 1) {
      // A block is full when r10 reaches its end: its send goes, and the other block fills.
      const long long end = static_cast<long long>(K) * row4;
      as << "li r14, dwblk+" + S(end) << "beq r10, r14, ba_" + P << "li r14, dwblk+" + S(blkb + end) << "beq r10, r14, bb_" + P;
      if (l == 0) as << next;
      as << "exit" << "ba_" + P + ":" << block_send(false) + ", async=3" << "li r10, dwblk+" + S(blkb);
      if (l == 0) as << next;
      as << "exit" << "bb_" + P + ":" << block_send(true) + ", async=3" << "li r10, dwblk";
      if (l == 0) as << next;
    } else {
      as << send + ", async=3";
      if (l == 0) as << next;
    }
    as << "exit";
  }
  return as.text();
}

// A root PE at column c: adds the biases and applies the activations of every layer's outputs,
// computes the loss of its samples, sends the gathered dy back up, and reduces the loss and the
// bias gradients east along the root row. One task; the code runs a minibatch after another.
// Registers: r0 0, r9 label, r10 o, r11 sample, r12 label pointer, r13 r14 scratch.
std::string root_source(const WsPlan& p, const WsColors& col, int c) {
  const int L = p.layers, m = p.col_m(c), nL = p.width.back();
  const long long M4 = 4LL * m;
  const uint32_t um = static_cast<uint32_t>(m), un = static_cast<uint32_t>(nL);
  PeAsm as;
  as.inq(col.in);
  as.task("0, main, active");
  bool ones = false;
  for (int l = 0; l + 1 < L; ++l) ones = ones || needs_ones(p.act[static_cast<size_t>(l)], p.act_par[static_cast<size_t>(l)]);
  // A convolution's outputs are planes: the per-output vectors hold m of the largest; the root
  // keeps each convolution's outputs before (YK) and after (QK) the pooling for the backward
  // pass, and the pooled gradient (gq) and a pooling row's scratch (rr, cm, tt; zw: a zero).
  long long mv = m, gq = 0;
  int wqmax = 0;
  for (int l = 0; l < L; ++l) {
    if (!p.is_conv(l)) continue;
    mv = std::max(mv, static_cast<long long>(m) * p.oplane(l));
    gq = std::max(gq, static_cast<long long>(m) * p.qplane(l));
    wqmax = std::max(wqmax, p.pool[static_cast<size_t>(l)].wq);
    if (p.pool[static_cast<size_t>(l)].kind != PoolParams::kNone) {
      if (const std::string t = pool_div_table(p.conv[static_cast<size_t>(l)], p.pool[static_cast<size_t>(l)], "PDV" + S(l)); !t.empty()) {
        as.data(t);
      }
    }
  }
  // One output's planes of its m samples: before the pooling (YK: y, or z where the derivative
  // is taken at z) and after it (QK); the rows that own the channels keep them between the
  // passes (WsPlan::ret_unit).
  if (p.any_conv()) as.data(".space YK, fp32, " + S(mv) + "\n.space QK, fp32, " + S(std::max(1LL, gq)));
  if (gq) {
    as.data(".space gq, fp32, " + S(gq));
    as.data(".space rr, fp32, " + S(std::max(1, wqmax)));
    as.data(".space cm, fp32, " + S(std::max(1, wqmax)));
    as.data(".space tt, fp32, " + S(std::max(1, wqmax)));
    as.data(".space zw, fp32, 1");
  }
  // A LayerNorm's layer (docs/weight-streaming.md#layernorm): its outputs of the m samples
  // (LZ, [o][s]; backward their gradient), x^ (LX) and r (LR) for the backward pass, gamma (LGM)
  // and beta (LBT) as they stream in, d gamma and d beta (LDG, LDB); scratch of the widest.
  int lnmax = 0;
  for (int l = 0; l < L; ++l) {
    if (!p.has_ln(l)) continue;
    const long long n = p.outs[static_cast<size_t>(l)];
    lnmax = std::max(lnmax, static_cast<int>(n));
    for (const char* b : {"LZ", "LX"}) as.data(".space " + std::string(b) + S(l) + ", fp32, " + S(n * m));
    if (p.has_ln_post(l)) as.data(".space LY" + S(l) + ", fp32, " + S(n * m));  // y (or z) for the derivative
    as.data(".space LR" + S(l) + ", fp32, " + S(m));
    for (const char* b : {"LGM", "LBT", "LDG", "LDB"}) as.data(".space " + std::string(b) + S(l) + ", fp32, " + S(n));
  }
  if (lnmax) {
    for (const char* b : {"lt1", "lt2", "lones"}) as.data(".space " + std::string(b) + ", fp32, " + S(lnmax));
    as.data(".space lsc, fp32, 1");
  }
  // A LayerNorm after an activation whose derivative is taken at z: the activation's fourth
  // scratch vector (m long) at the root (tmp, tm and bb are the first three).
  bool ln_pre_act = false;
  for (int l = 0; l + 1 < L; ++l) ln_pre_act = ln_pre_act || (p.has_ln_post(l) && act_needs_pre(p.act[static_cast<size_t>(l)]));
  if (ln_pre_act) as.data(".space lpt, fp32, " + S(m));
  as.data(".space lab, i32, " + S(m));
  as.data(".space cfg, i32, 2");
  as.data(".space tm, fp32, " + S(mv));
  as.data(".space bb, fp32, " + S(mv));
  as.data(".space ym, fp32, " + S(m));
  as.data(".space tmp, fp32, " + S(mv));
  if (ones) as.data(".space ones, fp32, " + S(mv));
  // A convolution whose activation's derivative is taken at z keeps z in YK: y goes to cpy
  // (pooled or sent from there; backward a max pooling takes it again from z), the programs'
  // scratch in tmp, tm, bb and cpt3 (backward tmp, bb, cpy, cpt3); csv saves r1 meanwhile.
  int cpre_temps = 0;
  for (int l = 0; l < L; ++l) {
    if (!p.is_conv(l) || !act_needs_pre(p.act[static_cast<size_t>(l)])) continue;
    cpre_temps = std::max({cpre_temps, 1, act_temps(p.act[static_cast<size_t>(l)], p.act_par[static_cast<size_t>(l)])});
  }
  // Residual connections around convolutions (WsPlan::root_sum): boundary k's planes as sent
  // (SK{k}, [o][s][plane]) for the sum into boundary t, and the sum's gradient for k (GK{k}).
  bool cres = false;
  for (int k = 1; k < L; ++k) {
    if (!p.root_kept(k)) continue;
    cres = true;
    const long long n = static_cast<long long>(p.outs[static_cast<size_t>(k) - 1]) * m * p.qplane(k - 1);
    as.data(".space SK" + S(k) + ", fp32, " + S(n) + "\n.space GK" + S(k) + ", fp32, " + S(n));
  }
  if (cpre_temps) as.data(".space cpy, fp32, " + S(mv));
  if (cpre_temps || cres) as.data(".space csv, i32, 1");
  if (cpre_temps > 3) as.data(".space cpt3, fp32, " + S(mv));
  as.data(".space zl, fp32, " + S(static_cast<long long>(nL) * m));
  as.data(".space dyl, fp32, " + S(static_cast<long long>(nL) * m));
  as.data(".space zc, fp32, " + S(nL));
  as.data(".space t, fp32, " + S(nL));
  as.data(".space g, fp32, " + S(nL));
  as.data(".space z, fp32, " + S(nL));
  as.data(".space e, fp32, " + S(nL));
  as.data(".space mvec, fp32, " + S(nL));
  as.data(".space s1, fp32, 1");
  as.data(".space l1, fp32, 1");
  as.data(".space q1, fp32, 1");
  as.data(".space lossv, fp32, 1");
  as.data(".space lsum, fp32, 1");
  as.data(".space t1, fp32, 1");
  as.data(".space dummy, fp32, 1");
  as.data(".space nupd, fp32, 1");
  // Every layer's db (its samples' sums) in one buffer, layer 0 first: each layer's part leaves
  // east in one send while the next layer's part fills (dbv_off).
  long long db_total = 0;
  std::vector<long long> dbv_off;
  for (int l = 0; l < L; ++l) {
    dbv_off.push_back(db_total);
    db_total += p.root_params(l);  // db, then a LayerNorm's d gamma and d beta
  }
  const bool batched = p.root_db_buffer;
  if (batched) as.data(".space dbv, fp32, " + S(db_total));
  const int chin = col.chain[(p.rows - 1) % 2];
  const int C = p.cols;
  const int eout = col.east[c % 2], ein = c + 1 < C ? col.east[(c + 1) % 2] : -1;
  as << "main:";
  const std::string dInL = as.fin(col.in, 1), dDisc = as.mem("dummy", 1, 0), dLab = as.mem("lab", um);
  const std::string dB1 = as.fin(col.in, 1), dT1 = as.mem("t1", 1), dBB = as.mem("bb", um), dTm = as.mem("tm", um);
  const std::string dChI = as.fin(chin, um), dY = as.mem("ym", um), dRetO = as.fout(col.ret, um), dTmp = as.mem("tmp", um);
  const std::string dOnes = ones ? as.mem("ones", um) : "";
  const std::string dZo = as.mem("zl", um), dZs = as.mem("zl", un, m), dZc = as.mem("zc", un), dG = as.mem("g", un);
  const std::string dT = as.mem("t", un), dGs = as.mem("dyl", un, m);
  const std::string dRetAll = as.fout(col.ret, static_cast<uint32_t>(nL * m)), dDyl = as.mem("dyl", static_cast<uint32_t>(nL * m));
  const std::string dDyo = as.mem("dyl", um), dEO = as.fout(eout, 1), dEI = c + 1 < C ? as.fin(ein, 1) : "";
  // The loss sum and each layer's db reduce west along the root row (each root adds its own to
  // what comes from the east) on microthread 1, so that no root waits for the roots east of it
  // before it returns the logit gradients or the next output's dy north: a send is issued once
  // the one before it is through (an async issue waits for its microthread; the one-element
  // fence lets the descriptors change meanwhile), and the sums are added in the same order as
  // one send per value would add them.
  // Where SRAM does not hold dbv, each value is sent as it is summed, synchronously (each root
  // then waits for the roots east of it once per output).
  auto east = [&](const std::string& src) {
    if (c + 1 == C) as << "vmov.fp32 " + dEO + ", " + src;
    else as << "vadd.fp32 " + dEO + ", " + dEI + ", " + src;
  };
  const std::string dFence = batched ? as.mem("dummy", 1) : "", dSB = batched ? as.mem("dbv", 1) : "";
  auto send_east = [&](const std::string& sym, long long off, long long n) {
    as << "vmov.fp32 " + dFence + ", " + dFence + ", async=1" << "li r13, " + sym;
    if (off) as << "addi r13, r13, " + S(4 * off);
    as << "dbase " + dSB + ", r13" << "li r13, " + S(n) << "dlen " + dSB + ", r13" << "dlen " + dEO + ", r13";
    if (c + 1 < C) as << "dlen " + dEI + ", r13";
    if (c + 1 == C) as << "vmov.fp32 " + dEO + ", " + dSB + ", async=1";
    else as << "vadd.fp32 " + dEO + ", " + dEI + ", " + dSB + ", async=1";
  };
  // A convolution's: its outputs' plane (Y), the pooled one (Q), a pooling row and a window tap's
  // row (strided), the pooled gradient, the plane of dz, a row's scratch and the zero.
  const bool conv = gq > 0 || mv > m;
  // The root has 44 descriptor registers: a convolution's and a LayerNorm's share a pool (their
  // layers never run at once), each section setting every one it uses first (conv_reset,
  // ln_reset: dmem, so base, length, stride and rows are known).
  const bool lnr = lnmax > 0;
  std::vector<std::string> pool;
  const int ipy = 11, ipt3 = ipy + (cpre_temps ? 1 : 0), ires = ipt3 + (cpre_temps > 3 ? 1 : 0);  // the optional ones' places
  for (int i = 0; i < std::max(conv ? ires + (cres ? 2 : 0) : 0, lnr ? 9 : 0); ++i) pool.push_back(as.dsd());
  auto pd = [&](size_t i, bool on) { return on ? pool[i] : std::string(); };
  const std::string dCY = pd(0, conv), dCQ = pd(1, conv), dPq = pd(2, conv), dPy = pd(3, conv), dGq = pd(4, conv), dDt = pd(5, conv);
  const std::string dRr = pd(6, gq > 0), dCm = pd(7, gq > 0), dTt = pd(8, gq > 0), dZero = pd(9, gq > 0), dZp = pd(10, conv);
  const std::string dCpy = pd(ipy, conv && cpre_temps > 0), dCpt3 = pd(ipt3, conv && cpre_temps > 3);
  // A residual connection's planes: the source's kept (SK) or their gradient (GK) of the target,
  // and of the source (dRa, dRb), one output's m planes, moved on output by output.
  const std::string dRa = pd(ires, conv && cres), dRb = pd(ires + 1, conv && cres);
  auto pre_lengths = [&](long long n) {  // cpy and cpt3 n long (r13 = n after)
    as << "li r13, " + S(n) << "dlen " + dCpy + ", r13";
    if (cpre_temps > 3) as << "dlen " + dCpt3 + ", r13";
  };
  auto conv_reset = [&] {
    for (const std::string& d : {dCY, dCQ, dPq, dPy, dGq, dDt, dZp}) as << "dmem " + d + ", tm, 1, 1";
    if (cpre_temps) as << "dmem " + dCpy + ", cpy, 1, 1";
    if (cpre_temps > 3) as << "dmem " + dCpt3 + ", cpt3, 1, 1";
    if (gq) as << "dmem " + dRr + ", rr, 1, 1" << "dmem " + dCm + ", cm, 1, 1" << "dmem " + dTt + ", tt, 1, 1" << "dmem " + dZero + ", zw, 1, 0";
  };
  // A LayerNorm's: a sample's outputs and x^ (stride m; an output's m values, stride 1, where
  // per_output says), scratch, r's word, 1.0s, gamma, beta, one element of them as it streams in
  // and d gamma's accumulator (stride 0). The root has 44 descriptor registers: these share.
  const std::string dLz = pd(0, lnr), dLx = pd(1, lnr), dLt1 = pd(2, lnr), dLt2 = pd(3, lnr), dLs = pd(4, lnr), dLones = pd(5, lnr);
  const std::string dLg = pd(6, lnr), dLb = pd(7, lnr), dLw0 = pd(8, lnr);
  auto ln_reset = [&] {
    for (const std::string& d : {dLz, dLx, dLt1, dLg, dLb}) as << "dmem " + d + ", lt1, 1, 1";
    as << "dmem " + dLt2 + ", lt2, 1, 1" << "dmem " + dLs + ", lsc, 1, 1" << "dmem " + dLones + ", lones, 1, 1" << "dmem " + dLw0 + ", lt1, 1, 0";
  };
  const std::string& dLzo = dLz;
  const std::string& dLxo = dLx;
  const std::string& dLo = dLw0;
  // dLz and dLx over one output's m values (contiguous), and dLw0 `n` long.
  auto per_output = [&](int n) {
    as << "li r13, " + S(m) << "dlen " + dLz + ", r13" << "dlen " + dLx + ", r13" << "li r13, 1" << "dstride " + dLz + ", r13"
       << "dstride " + dLx + ", r13" << "li r13, " + S(n) << "dlen " + dLw0 + ", r13";
  };
  as << "li r0, 0";
  if (lnr) {
    ln_reset();
    as << "li r13, " + S(lnmax) << "dlen " + dLones + ", r13" << "lif r13, 1.0" << "vfill.fp32 " + dLones + ", r13";
  }
  // A LayerNorm layer l's per-sample vectors: n long, the sample's outputs m apart.
  auto ln_lengths = [&](int l) {
    as << "li r13, " + S(p.outs[static_cast<size_t>(l)]);
    for (const std::string& d : {dLz, dLx, dLt1, dLt2, dLones, dLg, dLb}) as << "dlen " + d + ", r13";
    as << "li r13, " + S(m) << "dstride " + dLz + ", r13" << "dstride " + dLx + ", r13" << "li r13, LGM" + S(l) << "dbase " + dLg + ", r13"
       << "li r13, LBT" + S(l) << "dbase " + dLb + ", r13";
  };
  if (ones) {
    as << "li r13, " + S(mv) << "dlen " + dOnes + ", r13" << "lif r13, 1.0" << "vfill.fp32 " + dOnes + ", r13";
  }
  // The per-output vectors' lengths for layer l: m, or m planes of a convolution's.
  auto out_lengths = [&](long long n) {
    as << "li r13, " + S(n);
    for (const std::string& d : {dBB, dTm, dChI, dY, dTmp, dRetO}) as << "dlen " + d + ", r13";
    if (ones) as << "dlen " + dOnes + ", r13";
  };
  // Pooling of the m planes of one output, from r1 (Y, [s][ho wo]) into r2 (Q, [s][hq wq]), and
  // backward from gq into tm (codegen_util.h emit_pool_fwd, emit_pool_bwd).
  const PoolDsd pdsd{dPy, dPq, dGq, dDt, dRr, dCm, dTt, dZero, dZp};
  auto pool_dsd = [&](int l) {
    PoolDsd d = pdsd;
    d.dv = "PDV" + S(l);  // used only where a table was written
    return d;
  };
  auto pool_fwd = [&](int l, const std::string& tag = "") {
    emit_pool_fwd(as, p.conv[static_cast<size_t>(l)], p.pool[static_cast<size_t>(l)], m, pool_dsd(l), tag + S(l));
  };
  auto pool_bwd = [&](int l) {
    emit_pool_bwd(as, p.conv[static_cast<size_t>(l)], p.pool[static_cast<size_t>(l)], m, pool_dsd(l), "tm", "gq", S(l));
  };
  as << "step:";
  skip_stream(as, 0, static_cast<long long>(p.shard) - m, dInL, dDisc, "rs_a");
  as << "li r13, " + S(m) << "dlen " + dInL + ", r13" << "vmov.fp32 " + dLab + ", " + dInL;
  skip_stream(as, 1, static_cast<long long>(p.shard) - m, dInL, dDisc, "rs_b");
  as << "li r13, zl" << "dbase " + dZo + ", r13";
  for (int l = 0; l < L; ++l) {
    const int nO = p.outs[static_cast<size_t>(l)];
    if (p.is_conv(l)) {
      // A convolution: per output its m planes of sums, the bias, the activation into YK, the
      // pooling into QK, the pooled planes back up (r1, r2: this output's part of YK, QK).
      const long long P = p.oplane(l), Pq = p.qplane(l);
      const bool pooled = p.pool[static_cast<size_t>(l)].kind != PoolParams::kNone;
      conv_reset();
      out_lengths(m * P);
      // A residual connection into this output (root_sum: SK{k}'s planes added before the
      // activation, or after it into tmp, which is then pooled or sent), or from it (what is
      // sent kept in SK{l + 1}).
      const int rk = p.root_sum(l + 1) ? p.residual_source(l + 1) : -1;
      const bool pre_sum = rk >= 0 && p.res_pre(l), post_sum = rk >= 0 && !pre_sum, keep = p.root_kept(l + 1);
      if (rk >= 0) as << "dmem " + dRa + ", SK" + S(rk) + ", " + S(m * P) + ", 1";
      if (keep) as << "dmem " + dRb + ", SK" + S(l + 1) + ", " + S(m * Pq) + ", 1";
      as << "li r13, " + S(m * Pq) << "dlen " + dRetO + ", r13" << "dlen " + dCQ + ", r13" << "li r13, " + S(m * P) << "dlen " + dCY + ", r13"
         << "li r1, YK" << "li r2, " + std::string(pooled ? "QK" : "YK") << "li r10, 0" << "lay_" + S(l) + ":";
      const bool pre = act_needs_pre(p.act[static_cast<size_t>(l)]);
      if (pre) pre_lengths(m * P);
      as << "vmov.fp32 " + dT1 + ", " + dB1 << "ld32 r13, [r0+t1]" << "vfill.fp32 " + dBB + ", r13"
         << "vadd.fp32 " + dTm + ", " + dChI + ", " + dBB << "dbase " + dCY + ", r1";
      if (pre_sum) as << "vadd.fp32 " + dTm + ", " + dRa + ", " + dTm;
      std::string ysym, dYsrc = dCY;  // the activated planes: YK at r1, or cpy, or tmp (the sum)
      if (pre) {  // z kept in YK, y into cpy
        const std::string t[4] = {dTmp, dTm, dBB, dCpt3};
        as << "vmov.fp32 " + dCY + ", " + dTm;
        emit_pre_act_fwd(as, p.act[static_cast<size_t>(l)], p.act_par[static_cast<size_t>(l)], dCpy, dCY, t, dOnes);
        ysym = "cpy", dYsrc = dCpy;
      } else {
        emit_act_fwd(as, p.act[static_cast<size_t>(l)], p.act_par[static_cast<size_t>(l)], dCY, dTm, dTmp, dOnes);
      }
      if (post_sum) {
        as << "vadd.fp32 " + dTmp + ", " + dRa + ", " + dYsrc;
        ysym = "tmp", dYsrc = dTmp;
      }
      if (pooled && !ysym.empty()) {
        as << "st32 [r0+csv], r1" << "li r1, " + ysym;
        pool_fwd(l);
        as << "ld32 r1, [r0+csv]";
      } else if (pooled) {
        pool_fwd(l);
      }
      as << "dbase " + dCQ + ", r2";
      const std::string sent = pooled || ysym.empty() ? dCQ : dYsrc;
      as << "vmov.fp32 " + dRetO + ", " + sent;
      if (keep) as << "vmov.fp32 " + dRb + ", " + sent << "daddb " + dRb + ", " + S(4 * m * Pq);
      if (rk >= 0) as << "daddb " + dRa + ", " + S(4 * m * P);
      // Then the planes the backward pass needs (YK), which the channel's row keeps.
      as << "li r13, " + S(m * P) << "dlen " + dRetO + ", r13" << "vmov.fp32 " + dRetO + ", " + dCY << "li r13, " + S(m * Pq)
         << "dlen " + dRetO + ", r13";
      as << "addi r10, r10, 1" << "li r13, " + S(nO) << "bne r10, r13, lay_" + S(l);
      out_lengths(m);
      continue;
    }
    if (p.has_ln(l)) {
      // A LayerNorm: every output's z (the bias added) kept, with gamma and beta as they stream
      // in after the bias; then each sample's outputs normalised (stride m), then per output the
      // activation and the values back up, in output order as without it.
      const std::string L_ = S(l);
      ln_reset();
      per_output(1);
      as << "li r1, LGM" + L_ << "li r2, LBT" + L_ << "li r3, LZ" + L_ << "li r10, 0" << "lay_" + L_ + ":";
      as << "vmov.fp32 " + dT1 + ", " + dB1 << "ld32 r13, [r0+t1]" << "vfill.fp32 " + dBB + ", r13" << "dbase " + dLo + ", r1"
         << "vmov.fp32 " + dLo + ", " + dB1 << "dbase " + dLo + ", r2" << "vmov.fp32 " + dLo + ", " + dB1 << "dbase " + dLzo + ", r3"
         << "vadd.fp32 " + dLzo + ", " + dChI + ", " + dBB << "addi r1, r1, 4" << "addi r2, r2, 4" << "addi r3, r3, " + S(M4)
         << "addi r10, r10, 1" << "li r13, " + S(nO) << "bne r10, r13, lay_" + L_;
      const bool post = p.has_ln_post(l), pre = act_needs_pre(p.act[static_cast<size_t>(l)]);
      const Activation lact = p.act[static_cast<size_t>(l)];
      const ActParams& lpar = p.act_par[static_cast<size_t>(l)];
      if (post) {
        // The activation first, per output: y into LZ (normalised next), and into LY for the
        // derivative, or z there where the derivative is taken at z.
        per_output(1);
        if (pre) as << "dmem " + dLt2 + ", lpt, " + S(m) + ", 1";
        as << "li r3, LZ" + L_ << "li r4, LY" + L_ << "li r10, 0" << "lpa_" + L_ + ":" << "dbase " + dLzo + ", r3" << "dbase " + dLxo + ", r4";
        if (pre) {
          const std::string t[4] = {dTmp, dTm, dBB, dLt2};
          as << "vmov.fp32 " + dLxo + ", " + dLzo;
          emit_pre_act_fwd(as, lact, lpar, dLzo, dLxo, t, dOnes);
        } else {
          emit_act_fwd(as, lact, lpar, dLxo, dLzo, dTmp, dOnes);
          as << "vmov.fp32 " + dLzo + ", " + dLxo;
        }
        as << "addi r3, r3, " + S(M4) << "addi r4, r4, " + S(M4) << "addi r10, r10, 1" << "li r13, " + S(nO) << "bne r10, r13, lpa_" + L_;
        if (pre) as << "dmem " + dLt2 + ", lt2, 1, 1";
      }
      ln_lengths(l);
      as << "li r11, 0" << "li r15, 0" << "lns_" + L_ + ":" << "li r13, LZ" + L_ << "add r13, r13, r15" << "dbase " + dLz + ", r13"
         << "li r13, LX" + L_ << "add r13, r13, r15" << "dbase " + dLx + ", r13";
      emit_ln_fwd(as, nO, p.ln_eps[static_cast<size_t>(l)], dLz, dLx, dLt1, dLs, "lsc", dLones, dLg, dLb,
                  [&] { as << "li r14, LR" + L_ << "add r14, r14, r15" << "st32 [r14], r13"; });
      as << "addi r15, r15, 4" << "addi r11, r11, 1" << "li r13, " + S(m) << "bne r11, r13, lns_" + L_;
      const Activation act = l + 1 < L && !p.rows_act(l) && !post ? p.act[static_cast<size_t>(l)] : Activation::kNone;
      per_output(1);
      as << "li r3, LZ" + L_ << "li r10, 0" << "lno_" + L_ + ":" << "dbase " + dLzo + ", r3";
      emit_act_fwd(as, act, p.act_par[static_cast<size_t>(l)], dY, dLzo, dTmp, dOnes);
      as << "vmov.fp32 " + dRetO + ", " + dY << "addi r3, r3, " + S(M4) << "addi r10, r10, 1" << "li r13, " + S(nO) << "bne r10, r13, lno_" + L_;
      continue;
    }
    as << "li r10, 0" << "lay_" + S(l) + ":";
    as << "vmov.fp32 " + dT1 + ", " + dB1 << "ld32 r13, [r0+t1]" << "vfill.fp32 " + dBB + ", r13"
       << "vadd.fp32 " + dTm + ", " + dChI + ", " + dBB;
    if (l + 1 < L) {
      // A GELU's rows take z and apply it themselves (they keep z for the derivative), as do
      // those of a residual sum before the activation (they hold its other term).
      const Activation act = p.rows_act(l) ? Activation::kNone : p.act[static_cast<size_t>(l)];
      emit_act_fwd(as, act, p.act_par[static_cast<size_t>(l)], dY, dTm, dTmp, dOnes);
      as << "vmov.fp32 " + dRetO + ", " + dY;
    } else {
      as << "vmov.fp32 " + dZo + ", " + dTm << "daddb " + dZo + ", " + S(M4);
    }
    as << "addi r10, r10, 1" << "li r13, " + S(nO) << "bne r10, r13, lay_" + S(l);
  }
  // Loss and logit gradients of each sample (logits are stored output-major, [o][sample]).
  as << "li r11, 0" << "li r12, lab" << "li r13, zl" << "dbase " + dZs + ", r13" << "li r13, dyl" << "dbase " + dGs + ", r13"
     << "st32 [r0+lsum], r0";
  as << "ls:" << "vmov.fp32 " + dZc + ", " + dZs << "ld32 r9, [r12]";
  emit_softmax_loss(as, nL, dZc, dT, dG, pool);  // the pool's registers are free here (nine where any)
  as << "ld32 r13, [r0+lsum]" << "ld32 r14, [r0+lossv]" << "fadd r13, r13, r14" << "st32 [r0+lsum], r13";
  emit_softmax_grad(as, p.batch, dG);
  as << "vmov.fp32 " + dGs + ", " + dG << "daddb " + dZs + ", 4" << "daddb " + dGs + ", 4" << "addi r12, r12, 4"
     << "addi r11, r11, 1" << "li r13, " + S(m) << "bne r11, r13, ls";
  as << "vmov.fp32 " + dRetAll + ", " + dDyl;  // the logit gradients north first
  // Each output's db (in r13) into dbv, or east at once; each layer's part of dbv east in one send.
  auto db_out = [&] {
    if (batched) {
      as << "st32 [r12], r13" << "addi r12, r12, 4";
    } else {
      as << "st32 [r0+t1], r13";
      east(dT1);
    }
  };
  auto layer_db = [&](int l) {  // before the layer's outputs: where its db go
    if (!batched) return;
    as << "li r12, dbv";
    if (dbv_off[static_cast<size_t>(l)]) as << "addi r12, r12, " + S(4 * dbv_off[static_cast<size_t>(l)]);
  };
  auto layer_sent = [&](int l) {
    if (batched) send_east("dbv", dbv_off[static_cast<size_t>(l)], p.root_params(l));
  };
  if (batched) {
    send_east("lsum", 0, 1);
  } else {
    const std::string dLs = as.mem("lsum", 1);
    east(dLs);
  }
  layer_db(L - 1);
  as << "li r10, 0" << "li r13, dyl" << "dbase " + dDyo + ", r13" << "dbl:" << "vsum.fp32 r13, " + dDyo;
  db_out();
  as << "daddb " + dDyo + ", " + S(M4) << "addi r10, r10, 1" << "li r13, " + S(nL) << "bne r10, r13, dbl";
  layer_sent(L - 1);
  for (int l = L - 2; l >= 0; --l) {
    layer_db(l);
    if (p.is_conv(l)) {
      // A convolution's pooled gradient, output by output: spread over the windows (or taken
      // as it is without pooling), the derivative at YK, dz back up to every row, its sum db.
      const long long P = p.oplane(l), Pq = p.qplane(l);
      const bool pooled = p.pool[static_cast<size_t>(l)].kind != PoolParams::kNone;
      const std::string L_ = S(l);
      conv_reset();
      // Residual connections: the gradient of the sum this output feeds added to the incoming
      // one (GK{l + 1}); where this output is a sum, its source's share kept (GK{k}) before the
      // derivative, or after it where the sum came before the activation.
      const int rk = p.root_sum(l + 1) ? p.residual_source(l + 1) : -1;
      const bool pre_sum = rk >= 0 && p.res_pre(l), keep = p.root_kept(l + 1);
      if (rk >= 0) as << "dmem " + dRa + ", GK" + S(rk) + ", " + S(m * P) + ", 1";
      if (keep) as << "dmem " + dRb + ", GK" + S(l + 1) + ", " + S(m * Pq) + ", 1";
      as << "li r1, YK" << "li r2, " + std::string(pooled ? "QK" : "YK") << "li r10, 0" << "gb_" + L_ + ":";
      const bool pre = act_needs_pre(p.act[static_cast<size_t>(l)]);
      // Each output's planes come down the column from the row that owns the channel (its
      // conv_send): the pooled gradient, then the kept planes (y, or z), into YK.
      auto kept_in = [&] {
        as << "li r13, " + S(m * P) << "dlen " + dChI + ", r13" << "dlen " + dCY + ", r13" << "dbase " + dCY + ", r1" << "vmov.fp32 " + dCY + ", " + dChI;
      };
      const bool max = p.pool[static_cast<size_t>(l)].kind == PoolParams::kMax;
      if (pooled) {
        as << "li r13, " + S(m * Pq) << "dlen " + dChI + ", r13" << "dlen " + dGq + ", r13" << "li r13, gq" << "dbase " + dGq + ", r13"
           << "li r13, 1" << "dstride " + dGq + ", r13" << "vmov.fp32 " + dGq + ", " + dChI;
        kept_in();
        if (keep) as << "vadd.fp32 " + dGq + ", " + dGq + ", " + dRb;
        // A max pooling's outputs again from y (the forward pass's ops: the same values).
        if (pre && max) {  // y again from the kept z, into cpy
          out_lengths(m * P);
          pre_lengths(m * P);
          as << "dlen " + dCY + ", r13" << "dbase " + dCY + ", r1";
          const std::string t[4] = {dTmp, dBB, dTm, dCpt3};
          emit_pre_act_fwd(as, p.act[static_cast<size_t>(l)], p.act_par[static_cast<size_t>(l)], dCpy, dCY, t, dOnes);
          as << "st32 [r0+csv], r1" << "li r1, cpy";
          pool_fwd(l, "b");
          pool_bwd(l);
          as << "ld32 r1, [r0+csv]";
        } else {
          if (max) pool_fwd(l, "b");
          pool_bwd(l);
        }
      } else {
        as << "li r13, " + S(m * P) << "dlen " + dChI + ", r13" << "dlen " + dZp + ", r13" << "li r13, tm" << "dbase " + dZp + ", r13"
           << "vmov.fp32 " + dZp + ", " + dChI;
        kept_in();
        if (keep) as << "vadd.fp32 " + dZp + ", " + dZp + ", " + dRb;
      }
      out_lengths(m * P);
      as << "li r13, tm" << "dbase " + dZp + ", r13" << "dbase " + dCY + ", r1" << "li r13, " + S(m * P) << "dlen " + dZp + ", r13"
         << "dlen " + dCY + ", r13";
      if (rk >= 0 && !pre_sum) as << "vmov.fp32 " + dRa + ", " + dZp;
      if (pre) {
        pre_lengths(m * P);
        const std::string t[4] = {dTmp, dBB, dCpy, dCpt3};
        emit_pre_act_bwd(as, p.act[static_cast<size_t>(l)], p.act_par[static_cast<size_t>(l)], dZp, dCY, t, dOnes);
      } else {
        emit_act_bwd(as, p.act[static_cast<size_t>(l)], p.act_par[static_cast<size_t>(l)], dZp, dCY, dTmp, dOnes);
      }
      if (pre_sum) as << "vmov.fp32 " + dRa + ", " + dZp;
      if (rk >= 0) as << "daddb " + dRa + ", " + S(4 * m * P);
      if (keep) as << "daddb " + dRb + ", " + S(4 * m * Pq);
      // dz up to every row at once (they read it output by output: WsPlan::dz_streamed).
      as << "vmov.fp32 " + dRetO + ", " + dZp << "vsum.fp32 r13, " + dZp;
      db_out();
      as << "addi r10, r10, 1" << "li r13, " + S(p.outs[static_cast<size_t>(l)]) << "bne r10, r13, gb_" + L_;
      out_lengths(m);
      layer_sent(l);
      continue;
    }
    if (p.has_ln(l)) {
      // A LayerNorm: the whole gradient at u kept (in LZ, [o][s]); per output its column's d gamma
      // (fused multiply-adds over the samples from 0) and d beta (vsum); each sample's gradient
      // through the normalisation (stride m); then per output dz back up and db, then the layer's
      // d gamma and d beta after its db.
      const std::string L_ = S(l);
      const int nO = p.outs[static_cast<size_t>(l)];
      ln_reset();
      per_output(m);
      as << "li r3, LZ" + L_ << "li r10, 0" << "gl_" + L_ + ":" << "dbase " + dLzo + ", r3" << "vmov.fp32 " + dLzo + ", " + dChI
         << "addi r3, r3, " + S(M4) << "addi r10, r10, 1" << "li r13, " + S(nO) << "bne r10, r13, gl_" + L_;
      as << "li r3, LZ" + L_ << "li r4, LX" + L_ << "li r5, LDG" + L_ << "li r6, LDB" + L_ << "li r10, 0" << "gd_" + L_ + ":"
         << "dbase " + dLzo + ", r3" << "dbase " + dLxo + ", r4" << "dbase " + dLw0 + ", r5" << "st32 [r5], r0"
         << "vfmac.fp32 " + dLw0 + ", " + dLzo + ", " + dLxo + ", " + dLw0 << "vsum.fp32 r13, " + dLzo << "st32 [r6], r13"
         << "addi r3, r3, " + S(M4) << "addi r4, r4, " + S(M4) << "addi r5, r5, 4" << "addi r6, r6, 4" << "addi r10, r10, 1"
         << "li r13, " + S(nO) << "bne r10, r13, gd_" + L_;
      ln_lengths(l);
      as << "li r11, 0" << "li r15, 0" << "gs_" + L_ + ":" << "li r13, LZ" + L_ << "add r13, r13, r15" << "dbase " + dLz + ", r13"
         << "li r13, LX" + L_ << "add r13, r13, r15" << "dbase " + dLx + ", r13";
      emit_ln_bwd(as, nO, dLz, dLx, dLt1, dLt2, dLg, dLones, "r7", "r8",
                  [&] { as << "li r14, LR" + L_ << "add r14, r14, r15" << "ld32 r13, [r14]"; });
      as << "addi r15, r15, 4" << "addi r11, r11, 1" << "li r13, " + S(m) << "bne r11, r13, gs_" + L_;
      per_output(m);
      // After the activation (ln_post): its derivative, per output, at y or z (LY).
      const bool post = p.has_ln_post(l), pre = post && act_needs_pre(p.act[static_cast<size_t>(l)]);
      if (pre) as << "dmem " + dLt2 + ", lpt, " + S(m) + ", 1";
      as << "li r3, LZ" + L_ << "li r10, 0";
      if (post) as << "li r4, LY" + L_;
      as << "gz_" + L_ + ":" << "dbase " + dLzo + ", r3";
      if (post) {
        as << "dbase " + dLxo + ", r4";
        const Activation act = p.act[static_cast<size_t>(l)];
        const ActParams& par = p.act_par[static_cast<size_t>(l)];
        if (pre) {
          const std::string t[4] = {dTmp, dTm, dBB, dLt2};
          emit_pre_act_bwd(as, act, par, dLzo, dLxo, t, dOnes);
        } else {
          emit_act_bwd(as, act, par, dLzo, dLxo, dTmp, dOnes);
        }
      }
      as << "vmov.fp32 " + dRetO + ", " + dLzo << "vsum.fp32 r13, " + dLzo;
      db_out();
      as << "addi r3, r3, " + S(M4);
      if (post) as << "addi r4, r4, " + S(M4);
      as << "addi r10, r10, 1" << "li r13, " + S(nO) << "bne r10, r13, gz_" + L_;
      if (pre) as << "dmem " + dLt2 + ", lt2, 1, 1";
      for (const char* b : {"LDG", "LDB"}) {
        as << "li r3, " + std::string(b) + L_ << "li r10, 0" << std::string(b) + "o_" + L_ + ":" << "ld32 r13, [r3]";
        db_out();
        as << "addi r3, r3, 4" << "addi r10, r10, 1" << "li r13, " + S(nO) << "bne r10, r13, " + std::string(b) + "o_" + L_;
      }
      layer_sent(l);
      continue;
    }
    as << "li r10, 0" << "gb_" + S(l) + ":" << "vmov.fp32 " + dTm + ", " + dChI << "vmov.fp32 " + dRetO + ", " + dTm
       << "vsum.fp32 r13, " + dTm;
    db_out();
    as << "addi r10, r10, 1" << "li r13, " + S(p.width[static_cast<size_t>(l) + 1]) << "bne r10, r13, gb_" + S(l);
    layer_sent(l);
  }
  // The sends are through before the minibatch counts as done (and before lsum and dbv refill).
  if (batched) as << "vmov.fp32 " + dFence + ", " + dFence + ", async=1" << "vmov.fp32 " + dFence + ", " + dFence;
  as << "ld32 r13, [r0+nupd]" << "lif r14, 1.0" << "fadd r13, r13, r14" << "st32 [r0+nupd], r13" << "jmp step";
  return as.text();
}

// Moves n wavelets (n known here) from `src` to `dst` in descriptors of at most 65,535; r8 and
// r13 are scratch.
void move_n(PeAsm& as, const std::string& dst, const std::string& src, long long n, const std::string& tag) {
  if (n <= 0) return;
  const long long full = n / kMaxDsdLength, rest = n % kMaxDsdLength;
  if (full > 0) {
    as << "li r13, " + S(kMaxDsdLength) << "dlen " + dst + ", r13" << "dlen " + src + ", r13" << "li r8, 0" << tag + ":"
       << "vmov.fp32 " + dst + ", " + src << "addi r8, r8, 1" << "li r13, " + S(full) << "bne r8, r13, " + tag;
  }
  if (rest > 0) as << "li r13, " + S(rest) << "dlen " + dst + ", r13" << "dlen " + src + ", r13" << "vmov.fp32 " + dst + ", " + src;
}

// A grid band's stream relay (the outer edge column on the band's side, row a): the band's
// channel stream comes along the column to every relay of the band; each reads all of it and
// passes its row the row's part: the inputs (row by row: the band's rows' whole input streams one after another), then
// per streamed pass, per output, the band's rows' weight slices in row order.
std::string relay_in_source(const WsPlan& p, const WsColors& col, int a) {
  const int L = p.layers, b = p.band_of(a);
  const int first = p.band_first[static_cast<size_t>(b)], last = p.band_first[static_cast<size_t>(b) + 1];
  PeAsm as;
  as.inq(col.gin);
  as.task("0, main, active");
  as.data(".space sink, fp32, 1");
  as << "main:";
  const std::string src = as.fin(col.gin, 1), sink = as.mem("sink", 1, 0), dIn = as.fout(col.in, 1), dW = as.fout(col.w, 1);
  int tag = 0;
  auto T = [&] { return "m" + S(tag++); };
  // Layer l's band slices (of the boundary it reads): before row a, row a's, after.
  auto parts = [&](int l, long long* pre, long long* own, long long* post) {
    *pre = *own = *post = 0;
    for (int r = first; r < last; ++r) (r < a ? *pre : r == a ? *own : *post) += p.len(p.in(l), r);
  };
  as << "li r0, 0" << "step:";
  {
    long long pre, own, post;
    parts(0, &pre, &own, &post);
    const long long sh = p.shard;
    move_n(as, sink, src, pre * sh, T());
    move_n(as, dIn, src, own * sh, T());
    move_n(as, sink, src, post * sh, T());
  }
  for (int ps = 0; ps < p.streamed_passes(); ++ps) {
    const int l = ps < L ? ps : 2 * L - 1 - ps, out = p.width[static_cast<size_t>(l) + 1];
    long long pre, own, post;
    parts(l, &pre, &own, &post);
    const long long total = pre + own + post;
    if (total == 0) continue;
    if (own == 0) {
      move_n(as, sink, src, total * out, T());
    } else if (own == total) {
      move_n(as, dW, src, total * out, T());
    } else {
      const std::string loop = "o" + S(ps);
      as << "li r9, 0" << loop + ":";
      move_n(as, sink, src, pre, T());
      move_n(as, dW, src, own, T());
      move_n(as, sink, src, post, T());
      as << "addi r9, r9, 1" << "li r13, " + S(out) << "bne r9, r13, " + loop;
    }
  }
  as << "jmp step";
  return as.text();
}

// The color a grid row's dW reduction reaches its dW relay on: that of the column next to it.
int ws_relay_dw_color(const WsPlan& p, const WsColors& col, int a) { return col.east[p.east_fed(a) ? (p.cols - 1) % 2 : 0]; }

// The color a grid dW relay at `d` rows from its band's head sends on toward it (d > 0;
// north: the relay is above the channel row), and the one it takes the farther relays' on.
int gout_color(const WsColors& col, int d, bool north) { return d % 2 == 1 ? col.gout[north ? 0 : 1] : col.gout[2]; }

// A grid band's dW relay (the inner edge column on the band's side, row a): per backward pass,
// per output, it passes on toward the band's head its row's dW slice (reduced along the row
// into it), then the farther relays' slices; the head's relay sends them into the channel
// (WsPlan::egress_order: its own first, the others nearest first).
std::string relay_out_source(const WsPlan& p, const WsColors& col, int a) {
  const int L = p.layers, b = p.band_of(a);
  const int first = p.band_first[static_cast<size_t>(b)], last = p.band_first[static_cast<size_t>(b) + 1];
  const int y = p.row_y[static_cast<size_t>(a)], yc = p.row_y[static_cast<size_t>(p.band_head(b))];
  const bool north = y < yc;
  const int d = std::abs(y - yc);
  PeAsm as;
  as.task("0, main, active");
  as << "main:";
  const std::string own = as.fin(ws_relay_dw_color(p, col, a), 1);
  const std::string out = as.fout(d == 0 ? col.gout[2] : gout_color(col, d, north), 1);
  // The farther relays' streams: from the north and the south at the channel row, else from
  // the far side.
  std::string far_n, far_s;
  if (d == 0 || north) far_n = a > first ? as.fin(d == 0 ? col.gout[0] : gout_color(col, d + 1, true), 1) : "";
  if (d == 0 || !north) far_s = a + 1 < last ? as.fin(d == 0 ? col.gout[1] : gout_color(col, d + 1, false), 1) : "";
  int tag = 0;
  auto T = [&] { return "m" + S(tag++); };
  as << "li r0, 0" << "step:";
  for (int l = L - 1; l >= 0; --l) {
    const int li = p.in(l);  // its dW rows follow the boundary it reads
    long long n_own = p.len(li, a), n_north = 0, n_south = 0;
    if (d == 0 || north) {
      for (int r = first; r < a; ++r) n_north += p.len(li, r);
    }
    if (d == 0 || !north) {
      for (int r = a + 1; r < last; ++r) n_south += p.len(li, r);
    }
    if (n_own + n_north + n_south == 0) continue;
    const std::string loop = "o" + S(l);
    as << "li r9, 0" << loop + ":";
    move_n(as, out, own, n_own, T());
    if (!far_n.empty()) move_n(as, out, far_n, n_north, T());
    if (!far_s.empty()) move_n(as, out, far_s, n_south, T());
    as << "addi r9, r9, 1" << "li r13, " + S(p.width[static_cast<size_t>(l) + 1]) << "bne r9, r13, " + loop;
  }
  as << "jmp step";
  return as.text();
}

}  // namespace

std::string ws_out_steps(int x, int y) { return "nstep." + S(x) + "." + S(y); }

WsCompiled generate_ws(const WsPlan& p, const AsmTarget& t) {
  WsCompiled out;
  out.plan = p;
  out.inv_batch = 1.0f / static_cast<float>(p.batch);
  const WsColors& col = out.colors;
  if (col.count(p.grid) > t.colors) {
    throw CompileError("weight-streaming mode needs " + S(col.count(p.grid)) + " colors, the fabric has " + S(t.colors) +
                       " (router.colors)");
  }
  FabricProgram& prog = out.program;
  prog.name = "train-ws";
  const int C = p.cols, R = p.rows, X = p.x0;
  for (int a = 0; a < R; ++a) {
    const int y = p.row_y[static_cast<size_t>(a)];
    for (int c = 0; c < C; ++c) {
      const int img = intern_fitting(prog, "ws_row", row_source(p, col, a, c), t, "weight streaming's feature rows");
      prog.place(X + c, y, img);
      const long long len0 = p.len(0, a);
      // The input filter's first window and its stride per minibatch (row_source).
      prog.set_data(X + c, y, "cfg", i32_bytes({static_cast<int>(p.col_start(c) * len0), static_cast<int>(p.shard * len0)}));
      prog.output(ws_out_steps(X + c, y), X + c, y, "nupd");
    }
    if (p.grid) {  // the relays on the band's side: stream in (outer), dW out (inner)
      const int W = p.fabric_width;
      const bool ef = p.east_fed(a);
      prog.place(ef ? W - 1 : 0, y, kernels::intern_image(prog, "ws_relay_in", relay_in_source(p, col, a), t));
      prog.place(ef ? W - 2 : 1, y, kernels::intern_image(prog, "ws_relay_out", relay_out_source(p, col, a), t));
    }
  }
  for (int c = 0; c < C; ++c) {
    const int img = intern_fitting(prog, "ws_root", root_source(p, col, c), t, "weight streaming's roots");
    prog.place(X + c, p.root_y, img);
    prog.set_data(X + c, p.root_y, "cfg", i32_bytes({p.col_start(c), p.shard - p.col_start(c) - p.col_m(c)}));
    prog.output(ws_out_steps(X + c, p.root_y), X + c, p.root_y, "nupd");
  }

  kernels::RouteTable rt;
  const uint8_t N = port_bit(kNorth), Sb = port_bit(kSouth), E = port_bit(kEast), Wb = port_bit(kWest), Rp = port_bit(kRamp);
  const int W = p.fabric_width;
  std::vector<int> rows_y = p.row_y;
  rows_y.push_back(p.root_y);
  for (size_t i = 0; i < rows_y.size(); ++i) {
    const int y = rows_y[i];
    const bool feature = i < static_cast<size_t>(R);
    const bool ef = feature && p.east_fed(static_cast<int>(i));
    // The stream's direction along the row (from the edge that feeds it) and its way back.
    const uint8_t from = ef ? E : Wb, on = ef ? Wb : E;
    auto xc = [&](int c) { return X + c; };
    if (p.grid) {
      // The relays: a feature row's inputs and weights leave its outer relay toward the sample
      // columns, past the inner relay and any unused columns between; the root row's stream
      // comes straight from its West channel past the West relays' places.
      const int outer = ef ? W - 1 : 0, inner = ef ? W - 2 : 1, step = ef ? -1 : 1;
      const int edge_col = ef ? xc(C - 1) : xc(0);  // the sample column next to the relays
      if (feature) {
        for (int color : {col.in, col.w}) {
          rt.add(outer, y, color, Rp, on);
          for (int x = inner; x != edge_col; x += step) rt.add(x, y, color, from, on);
        }
        // The dW reduction from the sample column next to the relays into the inner relay.
        const int dwc = ws_relay_dw_color(p, col, static_cast<int>(i));
        for (int x = edge_col - step; x != inner; x -= step) rt.add(x, y, dwc, ef ? Wb : E, ef ? E : Wb);
        rt.add(inner, y, dwc, ef ? Wb : E, Rp);
      } else {
        rt.add(0, y, col.in, Wb, E);
        rt.add(1, y, col.in, Wb, E);
        rt.add(1, y, col.east[0], E, Wb);
        rt.add(0, y, col.east[0], E, Wb);
      }
    }
    for (int c = 0; c < C; ++c) {
      // Inputs and weights multicast along the row away from the edge that feeds it.
      const bool more = ef ? c > 0 : c + 1 < C;
      const uint8_t tx = static_cast<uint8_t>(Rp | (more ? on : 0));
      rt.add(xc(c), y, col.in, from, tx);
      if (feature) rt.add(xc(c), y, col.w, from, tx);
      // The reduction along the row runs toward the feeding edge: West, column c sends on
      // east[c % 2] to column c - 1, column 0 into the West channel (right beside it: no long
      // path across the wafer) or in the grid into the row's dW relay; East (grid), column c to
      // column c + 1, the last into the East dW relay.
      const int e = col.east[c % 2];
      rt.add(xc(c), y, e, Rp, from);
      if (!ef && c > 0) rt.add(xc(c - 1), y, e, E, Rp);
      if (ef && c + 1 < C) rt.add(xc(c + 1), y, e, Wb, Rp);
    }
  }
  // The grid's band streams: from the channel along the outer relay column into every relay of
  // the band; the dW relays' chains toward the head and from it into the channel.
  for (int b = 0; p.grid && b < p.bands(); ++b) {
    const bool ef = p.band_east[static_cast<size_t>(b)] != 0;
    const int yc = p.band_y[static_cast<size_t>(b)];
    const int top = p.row_y[static_cast<size_t>(p.band_first[static_cast<size_t>(b)])];
    const int bottom = p.row_y[static_cast<size_t>(p.band_first[static_cast<size_t>(b) + 1]) - 1];
    const int yh = p.row_y[static_cast<size_t>(p.band_head(b))];
    const int outer = ef ? W - 1 : 0, inner = ef ? W - 2 : 1;
    const uint8_t edge = ef ? E : Wb;
    if (!ef) {  // West: the channel row is the band's last row; the stream runs north
      rt.add(outer, yc, col.gin, edge, static_cast<uint8_t>(Rp | (top < yc ? N : 0)));
      for (int y = yc - 1; y >= top; --y) rt.add(outer, y, col.gin, Sb, static_cast<uint8_t>(Rp | (y > top ? N : 0)));
      rt.add(inner, yh, col.gout[2], Rp, edge);
      rt.add(outer, yh, col.gout[2], E, edge);
    } else {  // East: the band starts below the channel row; the stream runs south
      rt.add(outer, yc, col.gin, edge, Sb);
      for (int y = top; y <= bottom; ++y) rt.add(outer, y, col.gin, N, static_cast<uint8_t>(Rp | (y < bottom ? Sb : 0)));
      rt.add(inner, yh, col.gout[2], Rp, N);
      rt.add(inner, yc, col.gout[2], Sb, edge);
      rt.add(outer, yc, col.gout[2], Wb, edge);
    }
    for (int y = top; y <= bottom; ++y) {
      if (y == yh) continue;
      const bool north = y < yh;
      const int d = std::abs(y - yh), k = gout_color(col, d, north);
      rt.add(inner, y, k, Rp, north ? Sb : N);
      rt.add(inner, north ? y + 1 : y - 1, k, north ? N : Sb, Rp);
    }
  }
  std::vector<char> is_row(static_cast<size_t>(p.root_y) + 1, 0);
  for (int y : p.row_y) is_row[static_cast<size_t>(y)] = 1;
  for (int c = 0; c < C; ++c) {
    const int x = X + c;
    for (int a = 0; a < R; ++a) {
      const int ch = col.chain[a % 2];
      const int y0 = p.row_y[static_cast<size_t>(a)], y1 = a + 1 < R ? p.row_y[static_cast<size_t>(a) + 1] : p.root_y;
      rt.add(x, y0, ch, Rp, Sb);
      for (int y = y0 + 1; y < y1; ++y) rt.add(x, y, ch, N, Sb);
      rt.add(x, y1, ch, N, Rp);
    }
    rt.add(x, p.root_y, col.ret, Rp, N);
    for (int y = p.root_y - 1; y >= p.row_y[0]; --y) {
      if (!is_row[static_cast<size_t>(y)]) rt.add(x, y, col.ret, Sb, N);
      else rt.add(x, y, col.ret, Sb, static_cast<uint8_t>(Rp | (y > p.row_y[0] ? N : 0)));
    }
  }
  rt.emit(prog);
  return out;
}

}  // namespace wafersim::compiler
