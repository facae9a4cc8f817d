// MatMul of two activations (attention's Q K^T and its weights times V; a MatMul against trained
// weights is fuse_dense's Dense): numpy's semantics, the leading dimensions broadcast, operands of
// rank 2 or more. Per output element a sum of fused multiply-adds in k order from 0. Gradient as
// ordinary ops: dA = MatMul(dY, B^T) and dB = MatMul(A^T, dY) (Transpose of the last two axes),
// each summed over the dimensions its operand was broadcast along, or into a parameter's momentum.
#include <cmath>

#include "compiler/ops/op_class.h"

namespace wafersim::compiler::ops {
namespace {

std::vector<int64_t> swap_last(size_t r) {
  std::vector<int64_t> p(r);
  for (size_t k = 0; k < r; ++k) p[k] = static_cast<int64_t>(k);
  std::swap(p[r - 1], p[r - 2]);
  return p;
}

class MatMul : public OpClass {
 public:
  const char* name() const override { return "matmul"; }
  std::vector<std::string> kinds() const override { return {"MatMul"}; }

  void gradient(const ir::Op& o, GradContext& c) const override {
    const int a = o.inputs[0], b = o.inputs[1], dy = c.dy();
    const auto &sa = c.shape(a), &sb = c.shape(b), &sy = c.shape(o.outputs[0]);
    if (sa.size() < 2 || sb.size() < 2) return c.no_rule("MatMul of a vector");
    auto t = [&](int v) {
      std::vector<int64_t> s = c.shape(v);
      std::swap(s[s.size() - 1], s[s.size() - 2]);
      return c.emit("Transpose", {v}, s, {{"perm", ir::attr_ints(swap_last(s.size()))}});
    };
    auto batch = [&](int64_t r, int64_t q) {  // dY's leading dimensions with [r, q] after them
      std::vector<int64_t> s(sy.begin(), sy.end() - 2);
      s.push_back(r);
      s.push_back(q);
      return s;
    };
    if (c.wants(a) || c.is_param(a)) give_broadcast(c, a, c.emit("MatMul", {dy, t(b)}, batch(sa[sa.size() - 2], sa.back())));
    if (c.wants(b) || c.is_param(b)) give_broadcast(c, b, c.emit("MatMul", {t(a), dy}, batch(sb[sb.size() - 2], sb.back())));
  }

  void evaluate(const ir::Op& o, EvalContext& c) const override {
    std::vector<int64_t> sa = c.shape[static_cast<size_t>(o.inputs[0])], sb = c.shape[static_cast<size_t>(o.inputs[1])];
    const auto &A = c.val[static_cast<size_t>(o.inputs[0])], &B = c.val[static_cast<size_t>(o.inputs[1])];
    auto& out = c.val[static_cast<size_t>(o.outputs[0])];
    if (sa.size() == 1) sa.insert(sa.begin(), 1);
    if (sb.size() == 1) sb.push_back(1);
    const int64_t M = sa[sa.size() - 2], K = sa.back(), P = sb.back();
    if (sb[sb.size() - 2] != K) throw CompileError("graph reference: MatMul of [.., " + std::to_string(K) + "] by [" + std::to_string(sb[sb.size() - 2]) + ", ..]");
    const std::vector<int64_t> ba(sa.begin(), sa.end() - 2), bb(sb.begin(), sb.end() - 2);
    std::vector<int64_t> by = ba.size() >= bb.size() ? ba : bb;  // the broadcast leading dimensions
    for (size_t k = 0; k < by.size(); ++k) {
      const size_t ia = k + ba.size() - by.size(), ib = k + bb.size() - by.size();
      if (k + ba.size() >= by.size() && ba[ia] != 1) by[k] = ba[ia];
      if (k + bb.size() >= by.size() && bb[ib] != 1) by[k] = bb[ib];
    }
    const int64_t nb = numel(by);
    for (int64_t i = 0; i < nb; ++i) {
      const auto oa = static_cast<int64_t>(bcast_at(static_cast<size_t>(i), by, ba)) * M * K;
      const auto ob = static_cast<int64_t>(bcast_at(static_cast<size_t>(i), by, bb)) * K * P;
      for (int64_t m = 0; m < M; ++m) {
        for (int64_t p = 0; p < P; ++p) {
          float s = 0;
          for (int64_t k = 0; k < K; ++k) s = std::fma(A[static_cast<size_t>(oa + m * K + k)], B[static_cast<size_t>(ob + k * P + p)], s);
          out[static_cast<size_t>((i * M + m) * P + p)] = s;
        }
      }
    }
  }
};

}  // namespace

std::unique_ptr<OpClass> make_matmul() { return std::make_unique<MatMul>(); }

}  // namespace wafersim::compiler::ops
