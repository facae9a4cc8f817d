// An activation followed by scalar steps (ActParams::base, posts): y = act(z), then per step
// y = y mul + add, as the kernel graph fuses a Mul, Div, Add, Sub or Neg of a layer's activated
// output by a constant (0.5 * relu(fc(h)); 2 * sigmoid(z) - 1; -tanh(z)). Its derivative is
// taken at z (the roots and rows keep z, as for the GELUs): backward the steps' factors, in
// reverse, then the activation's derivative, at y computed again from z into T3 where the
// activation takes it at y (its own scratch is T0), or at z. A Div is a multiplication by the
// constant's fp32 reciprocal (within an ulp of torch's division); a step y mul + add is vmuls,
// then vfmacs with the vector of 1.0s (1.0 add is exact, so y + add rounds once, as torch's).
#include <array>

#include "compiler/activation.h"

namespace wafersim::compiler::act_defs {

using S = Slot;

namespace {

ActParams base_params(const ActParams& p) {
  ActParams q;
  q.a = p.a, q.b = p.b;
  return q;
}

std::array<Slot, kSlots> identity() {
  std::array<Slot, kSlots> to{};
  for (int i = 0; i < kSlots; ++i) to[static_cast<size_t>(i)] = static_cast<Slot>(i);
  return to;
}

ActProgram chain_fwd(const ActParams& p) {
  ActProgram prog;
  prog.append(activation(p.base).fwd(base_params(p)), identity());
  for (int i = 0; i < p.posts; ++i) {
    if (p.mul[i] != 1.0f) prog.muls(S::kY, S::kY, p.mul[i]);
    if (p.add[i] != 0.0f) prog.fmacs(S::kY, S::kY, S::kOnes, p.add[i]);
  }
  return prog;
}

ActProgram chain_bwd(const ActParams& p) {
  ActProgram prog;
  for (int i = p.posts - 1; i >= 0; --i) {
    if (p.mul[i] != 1.0f) prog.muls(S::kG, S::kG, p.mul[i]);
  }
  const ActivationDef& d = activation(p.base);
  const ActParams bp = base_params(p);
  if (d.pre || p.base == Activation::kNone) {
    prog.append(d.bwd(bp), identity());  // at z, or nothing
  } else {
    std::array<Slot, kSlots> to = identity();
    to[static_cast<size_t>(S::kY)] = S::kT3;  // y again from z, into T3
    prog.append(d.fwd(bp), to).append(d.bwd(bp), to);
  }
  return prog;
}

}  // namespace

extern const ActivationDef kChain{Activation::kChain, "chain", "", "", true, 4, chain_fwd, chain_bwd, nullptr};

}  // namespace wafersim::compiler::act_defs
