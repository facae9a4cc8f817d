// 2-D convolution and pooling over NCHW tensors (host reference and gradient rules; the wafer's
// kernels are step 7 of the plan): Conv2d (fuse_dense's op: Conv + bias + activation; group 1,
// explicit pads), MaxPool, AveragePool, GlobalAveragePool, and their backward ops. Order:
//   Conv2d: per sample, output channel, output row and column, a sum of fused multiply-adds
//     over input channel, kernel row, kernel column (padding skipped), then + bias, then the
//     activation;
//   Conv2dGradInput: per sample, output channel, row and column, each input it read gets
//     dz w added by a fused multiply-add (input channel, kernel row, kernel column);
//   Conv2dGradWeight / Conv2dGradBias: into the momentum, in the same order (dz x, dz);
//   MaxPool: the first largest element of each window (row by row); MaxPoolGrad adds dy there;
//   AveragePool: the window's sum in order / the count (count_include_pad: the padded size);
//   AveragePoolGrad adds dy / count to each element of the window; GlobalAveragePool: the sum
//   over H x W in order / (H W), its gradient dy / (H W) everywhere.
#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>

#include "compiler/ops/op_class.h"

namespace wafersim::compiler::ops {
namespace {

std::vector<int64_t> ints(const ir::Op& o, const char* key, size_t n, int64_t dflt) {
  const OnnxAttr* a = o.attr(key);
  std::vector<int64_t> v = a && a->kind == OnnxAttr::kInts ? a->ints : std::vector<int64_t>{};
  v.resize(n, dflt);
  return v;
}

// The geometry of a window op: input [N, C, H, W], output [N, Co, Ho, Wo], kernel kh x kw.
struct Geo {
  int64_t N = 0, C = 0, H = 0, W = 0, Co = 0, Ho = 0, Wo = 0, kh = 1, kw = 1, sh = 1, sw = 1, pt = 0, pl = 0, pb = 0, pr = 0, dh = 1, dw = 1;
  size_t x(int64_t n, int64_t c, int64_t i, int64_t j) const { return static_cast<size_t>(((n * C + c) * H + i) * W + j); }
  size_t y(int64_t n, int64_t c, int64_t i, int64_t j) const { return static_cast<size_t>(((n * Co + c) * Ho + i) * Wo + j); }
  size_t w(int64_t co, int64_t c, int64_t i, int64_t j) const { return static_cast<size_t>(((co * C + c) * kh + i) * kw + j); }
};

Geo geo(const ir::Op& o, const std::vector<int64_t>& xs, const std::vector<int64_t>& ys, const std::vector<int64_t>* ws) {
  if (xs.size() != 4 || ys.size() != 4) throw std::invalid_argument("graph reference: " + o.kind + " takes 4-D NCHW tensors");
  const OnnxAttr* ap = o.attr("auto_pad");
  if ((ap && !ap->s.empty() && ap->s != "NOTSET") || (o.attr("group") && o.attr("group")->i != 1)) {
    throw std::invalid_argument("graph reference: " + o.kind + " with auto_pad or groups is not interpreted yet");
  }
  Geo g;
  g.N = xs[0], g.C = xs[1], g.H = xs[2], g.W = xs[3], g.Co = ys[1], g.Ho = ys[2], g.Wo = ys[3];
  const std::vector<int64_t> k = ws ? std::vector<int64_t>{(*ws)[2], (*ws)[3]} : ints(o, "kernel_shape", 2, 1);
  const auto s = ints(o, "strides", 2, 1), p = ints(o, "pads", 4, 0), d = ints(o, "dilations", 2, 1);
  g.kh = k[0], g.kw = k[1], g.sh = s[0], g.sw = s[1], g.pt = p[0], g.pl = p[1], g.pb = p[2], g.pr = p[3], g.dh = d[0], g.dw = d[1];
  return g;
}

// Calls f(iy, ix) for each input element of output (oy, ox)'s window, row by row.
template <typename F>
void window(const Geo& g, int64_t oy, int64_t ox, F f) {
  for (int64_t ky = 0; ky < g.kh; ++ky) {
    const int64_t iy = oy * g.sh - g.pt + ky * g.dh;
    if (iy < 0 || iy >= g.H) continue;
    for (int64_t kx = 0; kx < g.kw; ++kx) {
      const int64_t ix = ox * g.sw - g.pl + kx * g.dw;
      if (ix >= 0 && ix < g.W) f(ky, kx, iy, ix);
    }
  }
}

// Calls f(d, w index, x index) for every product of a convolution's backward pass: per sample,
// output channel, row and column (d: its dz), per input channel and window element.
template <typename F>
void each_tap(const Geo& g, const std::vector<float>& dz, F f) {
  for (int64_t n = 0; n < g.N; ++n) {
    for (int64_t co = 0; co < g.Co; ++co) {
      for (int64_t oy = 0; oy < g.Ho; ++oy) {
        for (int64_t ox = 0; ox < g.Wo; ++ox) {
          const float d = dz[g.y(n, co, oy, ox)];
          for (int64_t ci = 0; ci < g.C; ++ci) {
            window(g, oy, ox, [&](int64_t ky, int64_t kx, int64_t iy, int64_t ix) { f(d, g.w(co, ci, ky, kx), g.x(n, ci, iy, ix)); });
          }
        }
      }
    }
  }
}

// AveragePool's divisor for output (oy, ox): the window's size within the padded plane (all of
// it but where ceil_mode lets a window run past the padding), or the inputs in it.
float avg_count(const ir::Op& o, const Geo& g, int64_t oy, int64_t ox) {
  const OnnxAttr* cip = o.attr("count_include_pad");
  if (cip && cip->i != 0) {
    const int64_t y0 = oy * g.sh - g.pt, x0 = ox * g.sw - g.pl;
    return static_cast<float>((std::min(y0 + g.kh, g.H + g.pb) - y0) * (std::min(x0 + g.kw, g.W + g.pr) - x0));
  }
  int n = 0;
  window(g, oy, ox, [&](int64_t, int64_t, int64_t, int64_t) { ++n; });
  return static_cast<float>(n);
}

class Conv : public OpClass {
 public:
  const char* name() const override { return "conv"; }
  std::vector<std::string> kinds() const override {
    return {"Conv2d",  "Conv2dGradInput", "Conv2dGradWeight", "Conv2dGradBias",       "MaxPool",
            "MaxPoolGrad", "AveragePool",  "AveragePoolGrad",  "GlobalAveragePool", "GlobalAveragePoolGrad"};
  }

  void gradient(const ir::Op& o, GradContext& c) const override {
    const int x = o.inputs[0];
    Attrs at;
    for (const char* k : {"kernel_shape", "strides", "pads", "dilations", "group", "auto_pad", "count_include_pad"}) {
      if (const OnnxAttr* v = o.attr(k)) at[k] = *v;
    }
    if (o.kind == "Conv2d") {
      const int dz = fused_activation_grad(o, c);
      const int w = o.inputs[1], b = o.inputs.size() > 2 ? o.inputs[2] : -1;
      if (c.wants(x)) c.give(x, c.emit("Conv2dGradInput", {dz, w}, c.shape(x), at));
      if (c.is_param(w)) c.param_grad(w, "Conv2dGradWeight", {dz, x}, at);
      if (c.is_param(b)) c.param_grad(b, "Conv2dGradBias", {dz});
    } else if (o.kind == "MaxPool") {
      if (o.outputs.size() > 1 && o.outputs[1] >= 0) return c.no_rule("MaxPool with its Indices output");
      if (c.wants(x)) c.give(x, c.emit("MaxPoolGrad", {x, c.dy()}, c.shape(x), at));
    } else if (o.kind == "AveragePool" || o.kind == "GlobalAveragePool") {
      if (c.wants(x)) c.give(x, c.emit(o.kind + "Grad", {c.dy()}, c.shape(x), at));
    } else {
      c.no_rule(o.kind);
    }
  }

  void evaluate(const ir::Op& o, EvalContext& c) const override {
    auto V = [&](int t) -> std::vector<float>& { return c.val[static_cast<size_t>(t)]; };
    auto S = [&](int t) -> const std::vector<int64_t>& { return c.shape[static_cast<size_t>(t)]; };
    const std::string& k = o.kind;
    const int y = o.outputs[0];
    auto& out = V(y);
    if (k == "Conv2d" || k == "Conv2dGradWeight") {
      const bool fwd = k == "Conv2d";
      const int xi = fwd ? o.inputs[0] : o.inputs[1], dzi = fwd ? -1 : o.inputs[0];
      const auto& ws = fwd ? S(o.inputs[1]) : S(y);
      const Geo g = geo(o, S(xi), fwd ? S(y) : S(dzi), &ws);
      const auto& x = V(xi);
      if (fwd) {
        const auto& w = V(o.inputs[1]);
        const std::vector<float>* b = o.inputs.size() > 2 && o.inputs[2] >= 0 ? &V(o.inputs[2]) : nullptr;
        const std::string act = attr_s(o, "activation", "none");
        const ActParams alpha = act_params(o);
        auto& pre = c.pre[y];
        pre.assign(out.size(), 0.0f);
        for (int64_t n = 0; n < g.N; ++n) {
          for (int64_t co = 0; co < g.Co; ++co) {
            for (int64_t oy = 0; oy < g.Ho; ++oy) {
              for (int64_t ox = 0; ox < g.Wo; ++ox) {
                float s = 0;
                for (int64_t ci = 0; ci < g.C; ++ci) {
                  window(g, oy, ox, [&](int64_t ky, int64_t kx, int64_t iy, int64_t ix) { s = std::fma(x[g.x(n, ci, iy, ix)], w[g.w(co, ci, ky, kx)], s); });
                }
                const float z = s + (b ? (*b)[static_cast<size_t>(co)] : 0.0f);
                pre[g.y(n, co, oy, ox)] = z;
                out[g.y(n, co, oy, ox)] = act_forward(act, z, alpha);
              }
            }
          }
        }
        return;
      }
      out = V(o.inputs[2]);
      each_tap(g, V(dzi), [&](float d, size_t wi, size_t xa) { out[wi] = std::fma(d, x[xa], out[wi]); });
    } else if (k == "Conv2dGradInput") {
      const auto &dz = V(o.inputs[0]), &w = V(o.inputs[1]);
      const Geo g = geo(o, S(y), S(o.inputs[0]), &S(o.inputs[1]));
      each_tap(g, dz, [&](float d, size_t wi, size_t xa) { out[xa] = std::fma(d, w[wi], out[xa]); });
    } else if (k == "Conv2dGradBias") {
      const auto& dz = V(o.inputs[0]);
      out = V(o.inputs[1]);
      const auto& ds = S(o.inputs[0]);
      const int64_t plane = ds[2] * ds[3];
      for (int64_t n = 0; n < ds[0]; ++n) {
        for (int64_t co = 0; co < ds[1]; ++co) {
          for (int64_t e = 0; e < plane; ++e) out[static_cast<size_t>(co)] = out[static_cast<size_t>(co)] + dz[static_cast<size_t>((n * ds[1] + co) * plane + e)];
        }
      }
    } else if (k == "GlobalAveragePool" || k == "GlobalAveragePoolGrad") {
      const bool fwd = k == "GlobalAveragePool";
      const auto& xs = fwd ? S(o.inputs[0]) : S(y);
      const int64_t plane = xs[2] * xs[3];
      const auto& in = V(o.inputs[0]);
      const auto count = static_cast<float>(plane);
      for (int64_t nc = 0; nc < xs[0] * xs[1]; ++nc) {
        if (fwd) {
          float s = 0;
          for (int64_t e = 0; e < plane; ++e) s += in[static_cast<size_t>(nc * plane + e)];
          out[static_cast<size_t>(nc)] = s / count;
        } else {
          const float d = in[static_cast<size_t>(nc)] / count;
          for (int64_t e = 0; e < plane; ++e) out[static_cast<size_t>(nc * plane + e)] = d;
        }
      }
    } else {  // MaxPool, MaxPoolGrad, AveragePool, AveragePoolGrad
      const bool grad = k == "MaxPoolGrad" || k == "AveragePoolGrad";
      const bool max = k == "MaxPool" || k == "MaxPoolGrad";
      const Geo g = geo(o, grad ? S(y) : S(o.inputs[0]), k == "MaxPoolGrad" ? S(o.inputs[1]) : grad ? S(o.inputs[0]) : S(y), nullptr);
      const auto& x = V(o.inputs[0]);  // MaxPoolGrad: x; AveragePoolGrad: dy; forward: x
      const std::vector<float>* dy = k == "MaxPoolGrad" ? &V(o.inputs[1]) : nullptr;
      for (int64_t n = 0; n < g.N; ++n) {
        for (int64_t ch = 0; ch < g.C; ++ch) {
          for (int64_t oy = 0; oy < g.Ho; ++oy) {
            for (int64_t ox = 0; ox < g.Wo; ++ox) {
              const size_t at = g.y(n, ch, oy, ox);
              if (max) {
                float best = -std::numeric_limits<float>::infinity();
                size_t arg = std::numeric_limits<size_t>::max();
                window(g, oy, ox, [&](int64_t, int64_t, int64_t iy, int64_t ix) {
                  const float v = x[g.x(n, ch, iy, ix)];
                  if (arg == std::numeric_limits<size_t>::max() || v > best) best = v, arg = g.x(n, ch, iy, ix);
                });
                if (!grad) out[at] = best;
                else if (arg != std::numeric_limits<size_t>::max()) out[arg] = out[arg] + (*dy)[at];
              } else {
                const float count = avg_count(o, g, oy, ox);
                if (!grad) {
                  float s = 0;
                  window(g, oy, ox, [&](int64_t, int64_t, int64_t iy, int64_t ix) { s += x[g.x(n, ch, iy, ix)]; });
                  out[at] = s / count;
                } else {
                  const float d = x[at] / count;
                  window(g, oy, ox, [&](int64_t, int64_t, int64_t iy, int64_t ix) { out[g.x(n, ch, iy, ix)] += d; });
                }
              }
            }
          }
        }
      }
    }
  }
};

}  // namespace

std::unique_ptr<OpClass> make_conv() { return std::make_unique<Conv>(); }

}  // namespace wafersim::compiler::ops
