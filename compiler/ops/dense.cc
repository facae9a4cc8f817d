// Dense: y = act(x W + b) along x's last axis (fuse_dense's op: Gemm or MatMul against trained
// weights, its bias, the activation after it), with its backward ops.
//   Dense: per row and output, per input tile (attribute in_tiles, the offsets of the wafer's
//     tiles; one tile without it) a partial sum of fused multiply-adds in input order, the
//     tiles' sums added in tile order, then + bias (0 without one), then the activation;
//   DenseGradInput: per row and input, per output tile (out_tiles) from the last a sum of fused
//     multiply-adds in output order, the tiles' sums added from the last tile on;
//   DenseGradWeight / DenseGradBias: into the momentum, row after row (sample after sample),
//     each weight by a fused multiply-add, each bias element by an add.
// So a dense chain with a layer-pipelined plan's tiles is compiler/reference.cc bit for bit.
#include <cmath>

#include "compiler/ops/op_class.h"

namespace wafersim::compiler::ops {
namespace {

// Offsets of a tile attribute, or one tile [0, n).
std::vector<int64_t> tiles(const ir::Op& o, const char* key, int64_t n) {
  const OnnxAttr* a = o.attr(key);
  if (a && a->kind == OnnxAttr::kInts && a->ints.size() >= 2 && a->ints.front() == 0 && a->ints.back() == n) return a->ints;
  return {0, n};
}

bool trans_b(const ir::Op& o) { return o.attr("transB") && o.attr("transB")->i != 0; }

class Dense : public OpClass {
 public:
  const char* name() const override { return "dense"; }
  std::vector<std::string> kinds() const override { return {"Dense", "DenseGradInput", "DenseGradWeight", "DenseGradBias"}; }

  void gradient(const ir::Op& o, GradContext& c) const override {
    if (o.kind != "Dense") return c.no_rule(o.kind);
    const OnnxAttr* al = o.attr("alpha");
    const OnnxAttr* be = o.attr("beta");
    if ((al && al->f != 1) || (be && be->f != 1 && o.inputs[2] >= 0)) {
      return c.no_rule("Dense with Gemm's alpha or beta other than 1");
    }
    const int dz = fused_activation_grad(o, c);
    const int x = o.inputs[0], w = o.inputs[1], bias = o.inputs[2];
    Attrs at;
    for (const char* k : {"transB", "in_tiles", "out_tiles"}) {
      if (const OnnxAttr* v = o.attr(k)) at[k] = *v;
    }
    if (c.wants(x)) c.give(x, c.emit("DenseGradInput", {dz, w}, c.shape(x), at));
    if (c.is_param(w)) c.param_grad(w, "DenseGradWeight", {dz, x}, at);
    if (c.is_param(bias)) c.param_grad(bias, "DenseGradBias", {dz});
  }

  void evaluate(const ir::Op& o, EvalContext& c) const override {
    auto V = [&](int t) -> std::vector<float>& { return c.val[static_cast<size_t>(t)]; };
    auto S = [&](int t) -> const std::vector<int64_t>& { return c.shape[static_cast<size_t>(t)]; };
    const int y = o.outputs[0];
    auto& out = V(y);
    if (o.kind == "Dense") {
      const auto &x = V(o.inputs[0]), &w = V(o.inputs[1]);
      const std::vector<float>* bias = o.inputs[2] >= 0 ? &V(o.inputs[2]) : nullptr;
      const bool tb = trans_b(o);
      const auto& ws = S(o.inputs[1]);
      const int64_t K = tb ? ws[1] : ws[0], N = tb ? ws[0] : ws[1], rows = numel(S(o.inputs[0])) / K;
      const auto it = tiles(o, "in_tiles", K);
      const std::string act = attr_s(o, "activation", "none");
      const ActParams alpha = act_params(o);
      auto& pre = c.pre[y];
      pre.assign(out.size(), 0.0f);
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t n = 0; n < N; ++n) {
          float sum = 0;
          for (size_t a = 0; a + 1 < it.size(); ++a) {
            float p = 0;
            for (int64_t q = it[a]; q < it[a + 1]; ++q) p = std::fma(x[static_cast<size_t>(r * K + q)], w[static_cast<size_t>(tb ? n * K + q : q * N + n)], p);
            sum = a == 0 ? p : sum + p;
          }
          const float z = sum + (bias ? (*bias)[static_cast<size_t>(n)] : 0.0f);
          pre[static_cast<size_t>(r * N + n)] = z;
          out[static_cast<size_t>(r * N + n)] = act_forward(act, z, alpha);
        }
      }
    } else if (o.kind == "DenseGradInput") {
      const auto &dz = V(o.inputs[0]), &w = V(o.inputs[1]);
      const bool tb = trans_b(o);
      const auto& ws = S(o.inputs[1]);
      const int64_t K = tb ? ws[1] : ws[0], N = tb ? ws[0] : ws[1], rows = numel(S(o.inputs[0])) / N;
      const auto ot = tiles(o, "out_tiles", N);
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t q = 0; q < K; ++q) {
          float sum = 0;
          for (size_t bt = ot.size() - 1; bt-- > 0;) {
            float s = 0;
            for (int64_t n = ot[bt]; n < ot[bt + 1]; ++n) s = std::fma(dz[static_cast<size_t>(r * N + n)], w[static_cast<size_t>(tb ? n * K + q : q * N + n)], s);
            sum = bt + 2 == ot.size() ? s : sum + s;
          }
          out[static_cast<size_t>(r * K + q)] = sum;
        }
      }
    } else if (o.kind == "DenseGradWeight") {
      const auto &dz = V(o.inputs[0]), &x = V(o.inputs[1]);
      out = V(o.inputs[2]);
      const bool tb = trans_b(o);
      const auto& ws = S(y);
      const int64_t K = tb ? ws[1] : ws[0], N = tb ? ws[0] : ws[1], rows = numel(S(o.inputs[0])) / N;
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t n = 0; n < N; ++n) {
          for (int64_t q = 0; q < K; ++q) {
            float& v = out[static_cast<size_t>(tb ? n * K + q : q * N + n)];
            v = std::fma(dz[static_cast<size_t>(r * N + n)], x[static_cast<size_t>(r * K + q)], v);
          }
        }
      }
    } else {  // DenseGradBias
      const auto& dz = V(o.inputs[0]);
      out = V(o.inputs[1]);
      const auto N = static_cast<int64_t>(out.size());
      const int64_t rows = numel(S(o.inputs[0])) / N;
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t n = 0; n < N; ++n) out[static_cast<size_t>(n)] = out[static_cast<size_t>(n)] + dz[static_cast<size_t>(r * N + n)];
      }
    }
  }
};

}  // namespace

std::unique_ptr<OpClass> make_dense() { return std::make_unique<Dense>(); }

}  // namespace wafersim::compiler::ops
