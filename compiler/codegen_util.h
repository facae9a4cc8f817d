// Code pieces shared by the layer-pipelined and weight-streaming generators.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "compiler/activation.h"
#include "compiler/kernel_graph.h"
#include "firmware/kernels/kernel_util.h"

namespace wafersim::compiler {

// Softmax cross-entropy over `n` logits in dLogits, the label's index in r9: z = logits - max,
// p = e^z / sum, loss = log(sum) - z[label] into `lossv`, p into `g` (through dG). dT and dG are
// descriptors of the data symbols t and g (n elements each); the program must also declare z, e,
// mvec (n elements) and s1, l1, q1, lossv (1 each). Clobbers r10, r13, r14 and leaves 4 * label
// in r10 for emit_softmax_grad. Returns a descriptor of lossv.
// `scratch`: nine descriptor registers to use (set here), or none: fresh ones.
std::string emit_softmax_loss(kernels::PeAsm& a, int n, const std::string& dLogits, const std::string& dT,
                              const std::string& dG, const std::vector<std::string>& scratch = {});
// Then g = (p - onehot(label)) / batch, in place.
void emit_softmax_grad(kernels::PeAsm& a, int batch, const std::string& dG);

// y = act(pre) (dY from dPre), and the derivative applied in place to the gradient dG given the
// output dY, as every root and row computes them (compiler/activation.h: the activation's
// programs, which the host references evaluate too), for the activations whose derivative is
// taken at the output. dTmp is scratch and dOnes a vector of 1.0s of the same length (or "" when
// act_uses_ones is false).
void emit_act_fwd(kernels::PeAsm& a, Activation act, const ActParams& p, const std::string& dY, const std::string& dPre,
                  const std::string& dTmp, const std::string& dOnes);
void emit_act_bwd(kernels::PeAsm& a, Activation act, const ActParams& p, const std::string& dG, const std::string& dY,
                  const std::string& dTmp, const std::string& dOnes);

// The activations whose derivative is taken at the pre-activation (act_needs_pre: the GELUs):
// y = act(z) into dY, and the derivative at z applied in place to dG; t[0..3] are scratch vectors
// and dOnes a vector of 1.0s, all of the same length as dZ.
void emit_pre_act_fwd(kernels::PeAsm& a, Activation act, const ActParams& p, const std::string& dY, const std::string& dZ,
                      const std::string (&t)[4], const std::string& dOnes);
void emit_pre_act_bwd(kernels::PeAsm& a, Activation act, const ActParams& p, const std::string& dG, const std::string& dZ,
                      const std::string (&t)[4], const std::string& dOnes);

// LayerNorm over one sample's n values, as reference.cc layer_norm and layer_norm_grad compute it
// (the same operations in the same order), for both modes' roots. Forward: dZ (the values after
// the bias) in place to u = gamma x^ + beta, x^ into dXh, dT scratch; r = 1 / sqrt(var + eps) is
// e^(-0.5 log(.)) on the one-element dLs over the word `lsc`, and is in r13 when `keep_r` runs
// (which stores it). dG/dB: gamma and beta; dOnes: 1.0s. Uses r13 and r14.
void emit_ln_fwd(kernels::PeAsm& a, int n, float eps, const std::string& dZ, const std::string& dXh, const std::string& dT,
                 const std::string& dLs, const std::string& lsc, const std::string& dOnes, const std::string& dG,
                 const std::string& dB, const std::function<void()>& keep_r);
// Backward of its input, given dG the gradient at u (in place to the gradient at z): dL1 = dG
// gamma, then r (dL1 - mean(dL1) - x^ mean(dL1 x^)) with r loaded into r13 by `load_r`; dL2
// scratch; ra1 and ra2 two scratch registers besides r13.
void emit_ln_bwd(kernels::PeAsm& a, int n, const std::string& dG, const std::string& dXh, const std::string& dL1,
                 const std::string& dL2, const std::string& dGam, const std::string& dOnes, const std::string& ra1,
                 const std::string& ra2, const std::function<void()>& load_r);

// A convolution's tap table as both modes' PEs read it (ws_plan.h conv_taps, in that order): per
// tap 4 words, the byte offset of its first input element in a sample's planes of c's channels
// (and of its dx), that of its first output in a plane of sums, the elements of an output row,
// all its elements (0: the tap reads only padding). `sym` names the table.
std::string conv_tap_table(const ConvParams& c, const std::string& sym);

// A pooling's descriptor registers (both modes' roots): the pooled row, an input row of a window
// tap (strided), the pooled gradient's row, dz's row of the tap (strided), a max's scratch rows
// (rr, cm, tt: wq elements) and its zero (zw, stride 0), and dz whole. The caller points rr,
// cm, tt and zero at their symbols (dmem) before the first use; these set lengths and bases.
// A padded average whose counts differ (pool_uniform false) also takes `dv`, the symbol of its
// table of each window's fp32 1 / count (pool_div_table), read through cm.
// kernels::intern_image for a kernel's generated program: an image that does not fit the core's
// SRAM (its unrolled code and data, say a pooling window of hundreds of taps) is a CompileError
// (exit 2) naming the kernel `what` and the options that change it, not an internal error.
int intern_fitting(FabricProgram& prog, const std::string& prefix, const std::string& source, const AsmTarget& t,
                   const std::string& what);

struct PoolDsd {
  std::string py, pq, gq, dt, rr, cm, tt, zero, zp;
  std::string dv = "";
};
// The `.data` line of a padded average's table of 1 / count per pooled element ([hq][wq], fp32
// bits), or "" where pool_uniform holds.
std::string pool_div_table(const ConvParams& c, const PoolParams& q, const std::string& sym);
// Pooling of `planes` planes of c's outputs from r1 (Y, [plane][ho wo]) into r2 (Q, [plane][hq
// wq]), as ws_plan.h pool_forward computes it. Scratch r3-r8, r13, r14; `tag` makes the labels.
void emit_pool_fwd(kernels::PeAsm& a, const ConvParams& c, const PoolParams& q, long long planes, const PoolDsd& d,
                   const std::string& tag);
// Backward, as pool_backward: the pooled gradient (at gq_sym, [plane][hq wq]) spread over the
// windows into dz (at dz_sym, [plane][ho wo], cleared first), Y at r1 and Q at r2 (kept).
// Scratch r3-r9, r11, r13-r15.
void emit_pool_bwd(kernels::PeAsm& a, const ConvParams& c, const PoolParams& q, long long planes, const PoolDsd& d,
                   const std::string& dz_sym, const std::string& gq_sym, const std::string& tag);

}  // namespace wafersim::compiler
