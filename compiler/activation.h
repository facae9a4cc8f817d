// Activations as elementwise programs (docs/compiler.md, "How to add an activation"): each
// activation is written once, in compiler/activations/NAME.cc, as two short programs of the core's
// vector ops over the vectors of one slice (forward: Z -> Y; backward: G -> G, reading Y, or Z when
// `pre`). The same program is emitted as firmware for every root and row of both modes
// (emit_act_fwd / emit_act_bwd) and evaluated on the host, element by element with the core's own
// arithmetic (hw/vector_math.h), by every reference (act_fwd / act_bwd / act_bwd_pre, the graph
// reference): the wafer and its references agree bit for bit by construction.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "compiler/kernel_graph.h"
#include "firmware/isa.h"

namespace wafersim::kernels {
class PeAsm;
}

namespace wafersim::compiler {

// The vectors a program works on: the pre-activation Z, the output Y, the gradient G, a vector of
// 1.0s, and scratch T0..T3 (a program without `pre` may use T0 only: the dense kernels' roots
// and rows give those one scratch vector).
enum class Slot : uint8_t { kZ, kY, kG, kOnes, kT0, kT1, kT2, kT3 };
constexpr int kSlots = 8;

// What an activation's parameters are read from: an ONNX node (kernel_graph.cc) or an IR op.
struct ActInputs {
  std::function<const OnnxAttr*(const char* key)> attr;
  std::function<const std::vector<float>*(size_t i)> input;
  int64_t opset = 17;
  std::function<bool(size_t i)> given;  // the input is there (a constant or not)
};

class ActProgram {
 public:
  struct Step {
    Op op;
    Slot d, a, b, c;
    int nsrc;
    float s;  // the scalar of vmuls, vfmacs, vfill
  };
  // d = a + b, a - b, a b, max(a, b), a b + c, (a > 0 or NaN ? a : 0), (a > 0 ? b : 0), e^a, 1 / a,
  // ln a, (a > b ? 1 : 0), (a != 0 ? b : c); a s; a + b s; s.
  ActProgram& add(Slot d, Slot a, Slot b) { return op(Op::kVadd, d, {a, b}); }
  ActProgram& sub(Slot d, Slot a, Slot b) { return op(Op::kVsub, d, {a, b}); }
  ActProgram& mul(Slot d, Slot a, Slot b) { return op(Op::kVmul, d, {a, b}); }
  ActProgram& max(Slot d, Slot a, Slot b) { return op(Op::kVmax, d, {a, b}); }
  ActProgram& fmac(Slot d, Slot a, Slot b, Slot c) { return op(Op::kVfmac, d, {a, b, c}); }
  ActProgram& relu(Slot d, Slot a) { return op(Op::kVrelu, d, {a}); }
  ActProgram& drelu(Slot d, Slot a, Slot b) { return op(Op::kVdrelu, d, {a, b}); }
  ActProgram& exp(Slot d, Slot a) { return op(Op::kVexp, d, {a}); }
  ActProgram& recip(Slot d, Slot a) { return op(Op::kVrecip, d, {a}); }
  ActProgram& log(Slot d, Slot a) { return op(Op::kVlog, d, {a}); }
  ActProgram& cmpgt(Slot d, Slot a, Slot b) { return op(Op::kVcmpgt, d, {a, b}); }
  ActProgram& sel(Slot d, Slot a, Slot b, Slot c) { return op(Op::kVsel, d, {a, b, c}); }
  ActProgram& mov(Slot d, Slot a) { return op(Op::kVmov, d, {a}); }
  ActProgram& muls(Slot d, Slot a, float s) { return op(Op::kVmuls, d, {a}, s); }
  ActProgram& fmacs(Slot d, Slot a, Slot b, float s) { return op(Op::kVfmacs, d, {a, b}, s); }
  ActProgram& fill(Slot d, float s) { return op(Op::kVfill, d, {}, s); }

  // Every step of `other` with its slots renamed by `to` (to[s] for slot s).
  ActProgram& append(const ActProgram& other, const std::array<Slot, kSlots>& to);

  const std::vector<Step>& steps() const { return m_steps; }
  bool uses(Slot s) const;  // read or written by a step
  int temps() const;        // scratch vectors used (T0.. in order)
  // The value of slot `out` after the program, given Z, Y and G of one element.
  float run(float z, float y, float g, Slot out) const;

 private:
  // Throws std::logic_error for a step that writes the 1.0s or reads a scratch vector no step
  // has written yet (the builder's checks: a program that breaks them never reaches a PE).
  ActProgram& op(Op o, Slot d, std::initializer_list<Slot> src, float s = 0);
  std::vector<Step> m_steps;
  uint8_t m_written = 0;  // scratch vectors T0..T3 written so far
};

struct ActivationDef {
  Activation act = Activation::kNone;
  const char* name = "none";  // as the reports and the graph IR's `activation` attribute name it
  const char* onnx = "";      // the ONNX op it is (empty: a pattern the passes fuse)
  const char* kind = "";      // the graph IR's op kind (the ONNX op's, or the fused pattern's; the GELUs: "")
  bool pre = false;           // backward reads Z (the roots keep it), else Y
  // Vector ops per element the layer-pipelined roots' estimate charges forward and backward.
  double cost = 1;
  ActProgram (*fwd)(const ActParams&) = nullptr;  // Z -> Y
  ActProgram (*bwd)(const ActParams&) = nullptr;  // G -> G (reads Y, or Z when pre)
  // Its parameters from the node's attributes and constant inputs (`attr(key)`: nullptr when
  // absent; `input(i)`: a constant input's values, nullptr when absent or not constant), or why
  // the kernels cannot take them (`why` set). nullptr: no parameters.
  ActParams (*params)(const ActInputs& in, std::string* why) = nullptr;
};

// Every activation (compiler/activations/registry.cc lists them, one line each).
const std::vector<const ActivationDef*>& activations();
const ActivationDef& activation(Activation a);
const ActivationDef* activation_by_onnx(const std::string& op_type);
const ActivationDef* activation_by_kind(const std::string& ir_kind);
const ActivationDef* activation_by_name(const std::string& name);
// The scratch vectors the forward or backward program needs, the more of the two.
inline int act_temps(Activation a, const ActParams& p) {
  const ActivationDef& d = activation(a);
  return std::max(d.fwd(p).temps(), d.bwd(p).temps());
}
inline bool act_uses_ones(Activation a, const ActParams& p) {
  const ActivationDef& d = activation(a);
  return d.fwd(p).uses(Slot::kOnes) || d.bwd(p).uses(Slot::kOnes);
}

// The activation as the PEs compute it, on one element (hw/vector_math.h's arithmetic).
float act_fwd(Activation a, float z, const ActParams& p = {});
float act_bwd(Activation a, float y, float g, const ActParams& p = {});  // the derivative at the output y
float act_bwd_pre(Activation a, float z, float g, const ActParams& p = {});  // at the pre-activation z (pre)
inline float act_grad(Activation a, float y, float z, float g, const ActParams& p) {
  return activation(a).pre ? act_bwd_pre(a, z, g, p) : act_bwd(a, y, g, p);
}

// The programs as firmware over descriptors (one per slot the program uses; the caller's
// vectors of the slice), scalars through r13. A slot the program uses without a descriptor is a
// compile error (std::logic_error naming the activation and the slot), never a run-time fault.
using ActDsds = std::array<std::string, kSlots>;
void emit_act_fwd(kernels::PeAsm& a, Activation act, const ActParams& p, const ActDsds& d);
void emit_act_bwd(kernels::PeAsm& a, Activation act, const ActParams& p, const ActDsds& d);

}  // namespace wafersim::compiler
