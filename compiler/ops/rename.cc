// Ops that move no element: Flatten, Reshape, Squeeze, Unsqueeze, Identity, Dropout (as training on the wafer runs
// it: an identity), and ReshapeAs, the gradient given back the input's shape.
#include "compiler/ops/op_class.h"

namespace wafersim::compiler::ops {
namespace {

class Rename : public OpClass {
 public:
  const char* name() const override { return "rename"; }
  std::vector<std::string> kinds() const override { return {"Flatten", "Reshape", "Squeeze", "Unsqueeze", "Identity", "Dropout", "ReshapeAs"}; }

  void gradient(const ir::Op& o, GradContext& c) const override {
    if (o.kind == "ReshapeAs") return c.no_rule(o.kind);
    if (c.wants(o.inputs[0])) c.give(o.inputs[0], c.emit("ReshapeAs", {c.dy()}, c.shape(o.inputs[0])));
  }

  void evaluate(const ir::Op& o, EvalContext& c) const override {
    c.val[static_cast<size_t>(o.outputs[0])] = c.val[static_cast<size_t>(o.inputs[0])];
  }
};

}  // namespace

std::unique_ptr<OpClass> make_rename() { return std::make_unique<Rename>(); }

}  // namespace wafersim::compiler::ops
