#include "compiler/graph_reference.h"

#include <cmath>
#include <stdexcept>

#include "compiler/reference.h"

namespace wafersim::compiler {
namespace {

OnnxAttr ints_attr(const std::vector<int>& v) {
  OnnxAttr a;
  a.kind = OnnxAttr::kInts;
  a.ints.assign(v.begin(), v.end());
  return a;
}

int64_t numel(const std::vector<int64_t>& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

std::string attr_s(const ir::Op& o, const char* key, const char* dflt) {
  const OnnxAttr* a = o.attr(key);
  return a ? a->s : dflt;
}

float attr_f(const ir::Op& o, const char* key, float dflt) {
  const OnnxAttr* a = o.attr(key);
  return a && a->kind == OnnxAttr::kFloat ? a->f : dflt;
}

// Offsets of a tile attribute, or one tile [0, n).
std::vector<int64_t> tiles(const ir::Op& o, const char* key, int64_t n) {
  const OnnxAttr* a = o.attr(key);
  if (a && a->kind == OnnxAttr::kInts && a->ints.size() >= 2 && a->ints.front() == 0 && a->ints.back() == n) return a->ints;
  return {0, n};
}

constexpr float kSqrtHalf = 0.70710678118654752f, kGeluC = 0.79788456080286536f, kGeluK = 0.044715f;

// y = act(z) for the activations of Dense and of the standalone ops (the dense chain's three as
// the PEs compute them: reference.cc).
float act_forward(const std::string& a, float z, float alpha) {
  if (a == "relu") return act_fwd(Activation::kRelu, z);
  if (a == "sigmoid") return act_fwd(Activation::kSigmoid, z);
  if (a == "tanh") return act_fwd(Activation::kTanh, z);
  if (a == "leaky_relu") return z > 0 ? z : alpha * z;
  if (a == "gelu") return 0.5f * z * (1.0f + std::erf(z * kSqrtHalf));
  if (a == "gelu_tanh") return 0.5f * z * (1.0f + std::tanh(kGeluC * (z + kGeluK * z * z * z)));
  return z;
}

float act_backward(const std::string& a, float z, float y, float g, float alpha) {
  if (a == "relu") return act_bwd(Activation::kRelu, y, g);
  if (a == "sigmoid") return act_bwd(Activation::kSigmoid, y, g);
  if (a == "tanh") return act_bwd(Activation::kTanh, y, g);
  if (a == "leaky_relu") return z > 0 ? g : alpha * g;
  if (a == "gelu") {
    const float cdf = 0.5f * (1.0f + std::erf(z * kSqrtHalf));
    const float pdf = std::exp(-0.5f * z * z) * 0.39894228040143268f;
    return g * (cdf + z * pdf);
  }
  if (a == "gelu_tanh") {
    const float t = std::tanh(kGeluC * (z + kGeluK * z * z * z));
    return g * (0.5f * (1.0f + t) + 0.5f * z * (1.0f - t * t) * kGeluC * (1.0f + 3.0f * kGeluK * z * z));
  }
  return g;
}

// The element of `in` (shape si) that element i of shape so reads under broadcasting.
size_t bcast_at(size_t i, const std::vector<int64_t>& so, const std::vector<int64_t>& si) {
  size_t at = 0, stride = 1;
  int64_t rest = static_cast<int64_t>(i);
  for (size_t k = so.size(); k-- > 0;) {
    const int64_t c = rest % so[k];
    rest /= so[k];
    const size_t off = so.size() - si.size();
    if (k >= off) {
      const int64_t d = si[k - off];
      if (d != 1) at += static_cast<size_t>(c) * stride;
      stride *= static_cast<size_t>(d);
    }
  }
  return at;
}

}  // namespace

void set_dense_tiles(ir::Graph& g, const Plan& plan) {
  size_t l = 0;
  for (ir::Op& o : g.ops) {
    if (o.kind != "Dense") continue;
    if (l >= plan.layers.size()) throw std::logic_error("set_dense_tiles: more Dense ops than the plan's layers");
    o.attrs["in_tiles"] = ints_attr(plan.layers[l].in_off);
    o.attrs["out_tiles"] = ints_attr(plan.layers[l].out_off);
    ++l;
  }
}

GraphReference::GraphReference(const TrainGraph& t, const TrainHyper& h) : m_t(t), m_h(h) {
  const ir::Graph& g = t.g;
  m_val.resize(g.tensors.size());
  m_shape.resize(g.tensors.size());
  for (size_t i = 0; i < g.tensors.size(); ++i) {
    const ir::Tensor& x = g.tensors[i];
    if (x.kind == ir::TensorKind::kState) m_val[i].assign(static_cast<size_t>(numel(x.shape)), 0.0f);
    if ((x.kind == ir::TensorKind::kParameter || x.kind == ir::TensorKind::kConstant) && x.data) {
      if (!x.data->f32.empty()) m_val[i] = x.data->f32;
      else m_val[i].assign(x.data->i64.begin(), x.data->i64.end());
    }
  }
}

const std::vector<float>& GraphReference::param(const std::string& name) const { return m_val[static_cast<size_t>(m_t.g.find(name))]; }

const std::vector<float>& GraphReference::momentum(const std::string& name) const {
  return m_val[static_cast<size_t>(m_t.g.find("momentum:" + name))];
}

std::vector<float> GraphReference::logits(const std::vector<const float*>& xs) {
  run(xs, nullptr, m_t.forward_ops);
  return m_val[static_cast<size_t>(m_t.logits)];
}

std::vector<float> GraphReference::step(const std::vector<const float*>& xs, const std::vector<int>& labels) {
  run(xs, &labels, static_cast<int>(m_t.g.ops.size()));
  for (const auto& p : m_t.params) {
    m_val[static_cast<size_t>(p.value)] = m_val[static_cast<size_t>(p.new_value)];
    m_val[static_cast<size_t>(p.state)] = m_val[static_cast<size_t>(p.new_state)];
  }
  return m_val[static_cast<size_t>(m_t.loss)];
}

// Each op, in fp32, in this order of operations:
//   Dense: per row and output, per input tile a partial sum of fused multiply-adds in input
//     order, the tiles' sums added in tile order, then + bias (0 without one), then the
//     activation (reference.cc's formulas for relu, sigmoid, tanh);
//   DenseGradInput: per row and input, per output tile from the last a sum of fused
//     multiply-adds in output order, the tiles' sums added from the last tile;
//   DenseGradWeight / DenseGradBias: into the momentum, row after row (sample after sample),
//     W's element by fused multiply-add, the bias's by an add;
//   Add: elementwise with broadcasting; SumTo / SumToGrad: the broadcast elements added in
//     element order;
//   LayerNorm: per row, mean = (sum in order) / D, var = (sum of squares of x - mean) / D,
//     n = (x - mean) / sqrt(var + eps) as (x - mean) * (1 / sqrt), y = n * scale + bias;
//     LayerNormGrad: dx = rstd (dn - mean(dn) - n mean(dn n)), dn = dy * scale;
//   SoftmaxXent: reference.cc's softmax_xent per row (the gradient divided by the batch);
//   SgdMomentum: W' = fma(-lr, V, W), V' = V * momentum.
void GraphReference::run(const std::vector<const float*>& xs, const std::vector<int>* labels, int until) {
  const ir::Graph& g = m_t.g;
  const int B = static_cast<int>(xs.size());
  if (B < 1) throw std::invalid_argument("GraphReference: an empty minibatch");
  m_batch = B;
  for (size_t i = 0; i < g.tensors.size(); ++i) {
    m_shape[i] = g.tensors[i].shape;
    for (int64_t& d : m_shape[i]) d = d < 0 ? -d * B : d;
  }
  {
    const size_t per = static_cast<size_t>(numel(m_shape[static_cast<size_t>(m_t.data)]) / B);
    auto& x = m_val[static_cast<size_t>(m_t.data)];
    x.clear();
    for (const float* s : xs) x.insert(x.end(), s, s + per);
  }
  if (labels) {
    auto& l = m_val[static_cast<size_t>(m_t.labels)];
    l.assign(labels->begin(), labels->end());
  }
  auto V = [&](int t) -> std::vector<float>& { return m_val[static_cast<size_t>(t)]; };
  auto S = [&](int t) -> const std::vector<int64_t>& { return m_shape[static_cast<size_t>(t)]; };
  for (int i = 0; i < until; ++i) {
    const ir::Op& o = g.ops[static_cast<size_t>(i)];
    const std::string& k = o.kind;
    const int y = o.outputs.empty() ? -1 : o.outputs[0];
    auto& out = V(y);
    out.assign(static_cast<size_t>(numel(S(y))), 0.0f);
    if (k == "Dense") {
      const auto &x = V(o.inputs[0]), &w = V(o.inputs[1]);
      const std::vector<float>* bias = o.inputs[2] >= 0 ? &V(o.inputs[2]) : nullptr;
      const bool tb = o.attr("transB") && o.attr("transB")->i != 0;
      const auto& ws = S(o.inputs[1]);
      const int64_t K = tb ? ws[1] : ws[0], N = tb ? ws[0] : ws[1], rows = numel(S(o.inputs[0])) / K;
      const auto it = tiles(o, "in_tiles", K);
      const std::string act = attr_s(o, "activation", "none");
      const float alpha = attr_f(o, "activation_alpha", 0.01f);
      auto& pre = m_pre[y];
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
    } else if (k == "ActivationGrad") {
      const std::string act = attr_s(o, "activation", "none");
      const float alpha = attr_f(o, "activation_alpha", 0.01f);
      const auto& z = o.inputs[0] >= 0 ? V(o.inputs[0]) : m_pre[o.inputs[1]];
      const auto &yv = V(o.inputs[1]), &dy = V(o.inputs[2]);
      for (size_t e = 0; e < out.size(); ++e) out[e] = act_backward(act, z[e], yv[e], dy[e], alpha);
    } else if (k == "Relu" || k == "Sigmoid" || k == "Tanh" || k == "LeakyRelu" || k == "Gelu") {
      std::string act = k == "Relu" ? "relu" : k == "Sigmoid" ? "sigmoid" : k == "Tanh" ? "tanh" : k == "LeakyRelu" ? "leaky_relu" : "gelu";
      if (k == "Gelu" && attr_s(o, "approximate", "none") == "tanh") act = "gelu_tanh";
      const auto& x = V(o.inputs[0]);
      const float alpha = attr_f(o, "alpha", 0.01f);
      for (size_t e = 0; e < out.size(); ++e) out[e] = act_forward(act, x[e], alpha);
    } else if (k == "DenseGradInput") {
      const auto &dz = V(o.inputs[0]), &w = V(o.inputs[1]);
      const bool tb = o.attr("transB") && o.attr("transB")->i != 0;
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
    } else if (k == "DenseGradWeight") {
      const auto &dz = V(o.inputs[0]), &x = V(o.inputs[1]);
      out = V(o.inputs[2]);
      const bool tb = o.attr("transB") && o.attr("transB")->i != 0;
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
    } else if (k == "DenseGradBias") {
      const auto& dz = V(o.inputs[0]);
      out = V(o.inputs[1]);
      const int64_t N = static_cast<int64_t>(out.size()), rows = numel(S(o.inputs[0])) / N;
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t n = 0; n < N; ++n) out[static_cast<size_t>(n)] = out[static_cast<size_t>(n)] + dz[static_cast<size_t>(r * N + n)];
      }
    } else if (k == "Add") {
      const auto &a = V(o.inputs[0]), &b = V(o.inputs[1]);
      for (size_t e = 0; e < out.size(); ++e) out[e] = a[bcast_at(e, S(y), S(o.inputs[0]))] + b[bcast_at(e, S(y), S(o.inputs[1]))];
    } else if (k == "SumTo" || k == "SumToGrad") {
      const auto& dy = V(o.inputs[0]);
      if (k == "SumToGrad") out = V(o.inputs[1]);
      for (size_t e = 0; e < dy.size(); ++e) {
        float& v = out[bcast_at(e, S(o.inputs[0]), S(y))];
        v = v + dy[e];
      }
    } else if (k == "LayerNorm" || k == "LayerNormGrad" || k == "LayerNormGradScale" || k == "LayerNormGradBias") {
      const int xi = k == "LayerNormGradBias" ? -1 : o.inputs[0];
      const auto& shape = S(k == "LayerNormGradBias" ? o.inputs[0] : xi);
      const int64_t axis = o.attr("axis")->i + static_cast<int64_t>(shape.size());
      int64_t D = 1;
      for (size_t d = static_cast<size_t>(axis); d < shape.size(); ++d) D *= shape[d];
      const int64_t rows = numel(shape) / D;
      const float eps = o.attr("epsilon")->f;
      if (k == "LayerNormGradScale" || k == "LayerNormGradBias") out = V(o.inputs.back());
      const int scale = k == "LayerNorm" || k == "LayerNormGrad" ? o.inputs[1] : -1;
      const int dyi = k == "LayerNormGrad" ? o.inputs[2] : k == "LayerNormGradScale" ? o.inputs[1] : k == "LayerNormGradBias" ? o.inputs[0] : -1;
      std::vector<float> n(static_cast<size_t>(D)), dn(static_cast<size_t>(D));
      for (int64_t r = 0; r < rows; ++r) {
        const size_t base = static_cast<size_t>(r * D);
        float rstd = 0;
        if (xi >= 0) {
          const auto& x = V(xi);
          float s = 0;
          for (int64_t e = 0; e < D; ++e) s += x[base + static_cast<size_t>(e)];
          const float mean = s / static_cast<float>(D);
          float s2 = 0;
          for (int64_t e = 0; e < D; ++e) {
            const float d = x[base + static_cast<size_t>(e)] - mean;
            n[static_cast<size_t>(e)] = d;
            s2 = std::fma(d, d, s2);
          }
          rstd = 1.0f / std::sqrt(s2 / static_cast<float>(D) + eps);
          for (float& v : n) v = v * rstd;
        }
        if (k == "LayerNorm") {
          const std::vector<float>* sc = scale >= 0 ? &V(scale) : nullptr;
          const std::vector<float>* bi = o.inputs[2] >= 0 ? &V(o.inputs[2]) : nullptr;
          for (int64_t e = 0; e < D; ++e) {
            float v = n[static_cast<size_t>(e)];
            if (sc) v = v * (*sc)[static_cast<size_t>(e)];
            if (bi) v = v + (*bi)[static_cast<size_t>(e)];
            out[base + static_cast<size_t>(e)] = v;
          }
        } else if (k == "LayerNormGrad") {
          const auto& dy = V(dyi);
          const std::vector<float>* sc = scale >= 0 ? &V(scale) : nullptr;
          float m1 = 0, m2 = 0;
          for (int64_t e = 0; e < D; ++e) {
            const float v = dy[base + static_cast<size_t>(e)] * (sc ? (*sc)[static_cast<size_t>(e)] : 1.0f);
            dn[static_cast<size_t>(e)] = v;
            m1 += v;
            m2 = std::fma(v, n[static_cast<size_t>(e)], m2);
          }
          m1 = m1 / static_cast<float>(D);
          m2 = m2 / static_cast<float>(D);
          for (int64_t e = 0; e < D; ++e) {
            out[base + static_cast<size_t>(e)] = rstd * (dn[static_cast<size_t>(e)] - m1 - n[static_cast<size_t>(e)] * m2);
          }
        } else if (k == "LayerNormGradScale") {
          const auto& dy = V(dyi);
          for (int64_t e = 0; e < D; ++e) {
            float& v = out[static_cast<size_t>(e)];
            v = std::fma(dy[base + static_cast<size_t>(e)], n[static_cast<size_t>(e)], v);
          }
        } else {
          const auto& dy = V(dyi);
          for (int64_t e = 0; e < D; ++e) out[static_cast<size_t>(e)] = out[static_cast<size_t>(e)] + dy[base + static_cast<size_t>(e)];
        }
      }
    } else if (k == "Flatten" || k == "Reshape" || k == "Identity" || k == "Dropout" || k == "ReshapeAs") {
      out = V(o.inputs[0]);
    } else if (k == "Softmax" || k == "LogSoftmax") {
      const auto& x = V(o.inputs[0]);
      const int64_t C = S(y).back(), rows = numel(S(y)) / C;
      for (int64_t r = 0; r < rows; ++r) {
        float mx = x[static_cast<size_t>(r * C)];
        for (int64_t c = 1; c < C; ++c) mx = std::fmax(mx, x[static_cast<size_t>(r * C + c)]);
        float s = 0;
        for (int64_t c = 0; c < C; ++c) s += std::exp(x[static_cast<size_t>(r * C + c)] - mx);
        for (int64_t c = 0; c < C; ++c) {
          const float z = x[static_cast<size_t>(r * C + c)] - mx;
          out[static_cast<size_t>(r * C + c)] = k == "Softmax" ? std::exp(z) / s : z - std::log(s);
        }
      }
    } else if (k == "SoftmaxXent") {
      const auto &x = V(o.inputs[0]), &lab = V(o.inputs[1]);
      const int64_t C = S(o.inputs[0]).back();
      auto& dl = V(o.outputs[1]);
      dl.assign(x.size(), 0.0f);
      for (int r = 0; r < B; ++r) {
        const std::vector<float> row(x.begin() + r * C, x.begin() + (r + 1) * C);
        std::vector<float> gr;
        const int label = static_cast<int>(lab[static_cast<size_t>(r)]);
        if (label < 0 || label >= C) throw std::invalid_argument("GraphReference: label " + std::to_string(label) + " outside the classes");
        out[static_cast<size_t>(r)] = softmax_xent(row, label, B, &gr);
        std::copy(gr.begin(), gr.end(), dl.begin() + r * C);
      }
    } else if (k == "SgdMomentum") {
      const auto &w = V(o.inputs[0]), &v = V(o.inputs[1]);
      auto& nv = V(o.outputs[1]);
      nv.resize(v.size());
      for (size_t e = 0; e < w.size(); ++e) {
        out[e] = std::fma(-m_h.lr, v[e], w[e]);
        nv[e] = v[e] * m_h.momentum;
      }
    } else {
      throw CompileError("graph reference: op " + k + " ('" + (o.sources.empty() ? std::string("?") : o.sources.back()) + "') is not interpreted yet");
    }
  }
}

}  // namespace wafersim::compiler
