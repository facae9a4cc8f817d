// Op classes of the graph compiler (docs/graph-compiler.md, "Kernels"; docs/compiler.md, "How
// to add an op"): each file of compiler/ops/ holds the ops of one class, each op with its
// gradient rule (what autodiff adds for it) and its host reference (how GraphReference
// evaluates it, in a fixed order of operations that the wafer's kernels share bit for bit), and
// registry.cc lists the classes, one line each. The wafer's kernels (firmware, cost model, SRAM)
// join them class by class (steps 4-8 of the plan); until then the dense chain's are in
// placement.cc, codegen.cc and ws_*.cc.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "compiler/activation.h"
#include "compiler/codegen.h"
#include "compiler/ir/graph.h"

namespace wafersim::compiler::ops {

using Attrs = std::map<std::string, OnnxAttr>;

// What a gradient rule may do (autodiff.cc implements it) for one forward op.
class GradContext {
 public:
  virtual ~GradContext() = default;
  virtual const ir::Graph& graph() const = 0;
  virtual int dy() const = 0;                         // the gradient of the op's output 0 (-1: none)
  virtual int dy_at(size_t k) const = 0;              // the gradient of output k (-1: nothing flows back through it)
  virtual bool wants(int t) const = 0;                // a value whose gradient the loss needs
  virtual bool is_param(int t) const = 0;
  virtual std::vector<int64_t> shape(int t) const = 0;
  // A backward op with one output of `shape`; returns the output.
  virtual int emit(const std::string& kind, std::vector<int> inputs, const std::vector<int64_t>& shape, Attrs attrs = {}) = 0;
  virtual void give(int t, int grad) = 0;             // a contribution to value t's gradient
  // An op that adds this op's contribution into parameter p's momentum (its inputs, then the
  // momentum so far): autodiff emits it after the backward pass, in forward order.
  virtual void param_grad(int p, const std::string& kind, std::vector<int> inputs, Attrs attrs = {}) = 0;
  virtual void no_rule(const std::string& what) = 0;  // no gradient for this op (yet): named in autodiff's error
};

// What an evaluation may touch (graph_reference.cc implements it): every tensor's values and
// shape (the batch a number), the outputs already sized and zeroed.
struct EvalContext {
  std::vector<std::vector<float>>& val;
  const std::vector<std::vector<int64_t>>& shape;
  std::map<int, std::vector<float>>& pre;  // Dense outputs' pre-activations, for their gradients
  const TrainHyper& hyper;
  int batch = 0;
  int64_t step = 0;  // minibatches done before this one
  const ir::Graph* graph = nullptr;  // for constant integer operands (Slice's ends, a reduction's axes)
};

class OpClass {
 public:
  virtual ~OpClass() = default;
  virtual const char* name() const = 0;                // "dense", for messages and docs
  virtual std::vector<std::string> kinds() const = 0;  // the IR op kinds it evaluates
  // Adds the backward ops of forward op `o` through `c` (or calls c.no_rule).
  virtual void gradient(const ir::Op& o, GradContext& c) const;
  virtual void evaluate(const ir::Op& o, EvalContext& c) const = 0;
};

const OpClass* find(const std::string& kind);  // nullptr when no class takes the kind
std::vector<const OpClass*> all();

// Helpers the classes share.
int64_t numel(const std::vector<int64_t>& s);
// The element of `in` (shape si) that element i of shape so reads under broadcasting.
size_t bcast_at(size_t i, const std::vector<int64_t>& so, const std::vector<int64_t>& si);
// A contribution `full` (of the op's output shape) to input x's gradient: summed over the
// dimensions x was broadcast along (SumTo) when its shape differs; into the momentum when x is a
// parameter (SumToGrad).
void give_broadcast(GradContext& c, int x, int full);
// An integer operand of op `o`: its attribute `key` (older opsets) or constant input `input`.
std::vector<int64_t> ints_operand(const ir::Graph& g, const ir::Op& o, const char* key, size_t input, bool* given = nullptr);
// Axis `a` of rank `r`, negative counted from the end; throws when outside.
size_t axis_of(int64_t a, size_t r, const ir::Op& o);
std::string attr_s(const ir::Op& o, const char* key, const char* dflt);
float attr_f(const ir::Op& o, const char* key, float dflt);
// y = act(z) and dz from (z, y, dy) for the activations of Dense and of the standalone ops
// (ops/activation.cc), with a fused activation's parameters (attributes activation_alpha and
// activation_beta) and an op's parameter reader for the kernels' definitions.
float act_forward(const std::string& act, float z, const ActParams& p);
float act_backward(const std::string& act, float z, float y, float g, const ActParams& p);
ActParams act_params(const ir::Op& o);
ActInputs act_inputs(const ir::Graph& g, const ir::Op& o);
// The gradient before a fused activation (attributes activation, activation_alpha) of op `o`
// (Dense, Conv2d) with output 0 and its gradient c.dy(): an ActivationGrad, or dy itself.
int fused_activation_grad(const ir::Op& o, GradContext& c);

}  // namespace wafersim::compiler::ops
