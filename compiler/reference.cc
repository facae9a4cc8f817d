#include "compiler/reference.h"

#include <cmath>
#include <stdexcept>

#include "compiler/activation.h"
#include "compiler/ws_plan.h"

namespace wafersim::compiler {

namespace {

// A convolution's taps of input channels [c0, c1) (ws_plan.h conv_taps' order) and, for each,
// its index in the weight row (c kh kw).
struct SliceTap {
  ConvTap t;
  int k;
};
std::vector<SliceTap> slice_taps(const ConvParams& c, int c0, int c1) {
  std::vector<SliceTap> out;
  const std::vector<ConvTap> taps = conv_taps(c);
  for (size_t k = 0; k < taps.size(); ++k) {
    if (taps[k].ci >= c0 && taps[k].ci < c1) out.push_back({taps[k], static_cast<int>(k)});
  }
  return out;
}

// Calls f(input index, output index) over a tap's window, row after row.
template <class F>
void over_window(const ConvParams& c, const ConvTap& t, F f) {
  for (int oy = t.oy0; oy < t.oy1; ++oy) {
    const int x0 = (t.ci * c.h + oy * c.sh - c.pt + t.ky) * c.w - c.pl + t.kx;
    for (int ox = t.ox0; ox < t.ox1; ++ox) f(x0 + ox * c.sw, oy * c.wo + ox);
  }
}

}  // namespace

void layer_norm(std::vector<float>* z, const std::vector<float>& gamma, const std::vector<float>& beta, float eps,
                std::vector<float>* xhat, float* r) {
  const size_t n = z->size();
  const float inv_n = 1.0f / static_cast<float>(n);
  float s = 0;
  for (float v : *z) s += v;  // vsum: in element order
  const float nm = (s * inv_n) * -1.0f;
  xhat->resize(n);
  for (size_t i = 0; i < n; ++i) (*xhat)[i] = std::fma(1.0f, nm, (*z)[i]);
  float q = 0;
  for (size_t i = 0; i < n; ++i) q += (*xhat)[i] * (*xhat)[i];
  float ve = q * inv_n;
  ve = ve + eps;
  float rs = std::log(ve);
  rs = rs * -0.5f;
  rs = std::exp(rs);
  *r = rs;
  for (size_t i = 0; i < n; ++i) {
    (*xhat)[i] = (*xhat)[i] * rs;
    float u = (*xhat)[i] * gamma[i];
    (*z)[i] = u + beta[i];
  }
}

void layer_norm_grad(std::vector<float>* g, const std::vector<float>& xhat, float r, const std::vector<float>& gamma,
                     std::vector<float>* vg, std::vector<float>* vb) {
  const size_t n = g->size();
  const float inv_n = 1.0f / static_cast<float>(n);
  std::vector<float> gx(n);
  for (size_t i = 0; i < n; ++i) {
    (*vg)[i] = std::fma((*g)[i], xhat[i], (*vg)[i]);
    (*vb)[i] = (*vb)[i] + (*g)[i];
    gx[i] = (*g)[i] * gamma[i];
  }
  float s1 = 0, s2 = 0;
  for (size_t i = 0; i < n; ++i) s1 += gx[i];
  for (size_t i = 0; i < n; ++i) s2 += gx[i] * xhat[i];
  const float a1 = (s1 * inv_n) * -1.0f, a2 = (s2 * inv_n) * -1.0f;
  for (size_t i = 0; i < n; ++i) {
    float t = std::fma(1.0f, a1, gx[i]);
    t = std::fma(xhat[i], a2, t);
    (*g)[i] = t * r;
  }
}

float softmax_xent(const std::vector<float>& logits, int label, int batch, std::vector<float>* g) {
  const int c = static_cast<int>(logits.size());
  std::vector<float> t = logits;
  for (int m = c; m > 1;) {
    const int half = m / 2;
    for (int i = 0; i < half; ++i) t[static_cast<size_t>(i)] = std::fmax(t[static_cast<size_t>(i)], t[static_cast<size_t>(m - half + i)]);
    m -= half;
  }
  const float mx = t[0];
  std::vector<float> z(static_cast<size_t>(c)), e(static_cast<size_t>(c));
  float s = 0;
  for (int i = 0; i < c; ++i) {
    z[static_cast<size_t>(i)] = logits[static_cast<size_t>(i)] - mx;
    e[static_cast<size_t>(i)] = std::exp(z[static_cast<size_t>(i)]);
    s += e[static_cast<size_t>(i)];
  }
  const float ls = std::log(s), q = 1.0f / s;
  g->assign(static_cast<size_t>(c), 0.0f);
  for (int i = 0; i < c; ++i) (*g)[static_cast<size_t>(i)] = e[static_cast<size_t>(i)] * q;
  const float loss = ls - z[static_cast<size_t>(label)];
  (*g)[static_cast<size_t>(label)] = (*g)[static_cast<size_t>(label)] - 1.0f;
  const float inv = 1.0f / static_cast<float>(batch);
  for (float& v : *g) v = v * inv;
  return loss;
}

Reference::Reference(const KernelGraph& g, const Plan& plan, const TrainHyper& h, ModelState s)
    : m_g(g), m_plan(plan), m_h(h), m_s(std::move(s)) {}

std::vector<float> Reference::run_forward(const float* x, std::vector<std::vector<float>>* inputs,
                                          std::vector<std::vector<float>>* outputs, int stale_sample,
                                          std::vector<std::vector<float>>* pres, std::vector<std::vector<float>>* xhats,
                                          std::vector<float>* rstds) const {
  std::vector<float> cur(x, x + m_plan.layers.front().in);
  std::vector<std::vector<float>> kept(m_plan.layers.size());  // boundaries a residual connection adds
  for (const LayerPlan& l : m_plan.layers) {
    if (m_plan.residual_target(l.index) >= 0) kept[static_cast<size_t>(l.index)] = cur;
    const ModelState& st = stale_sample >= 0 && stale_sample < m_plan.lookahead(l.index) ? m_before : m_s;
    const auto& W = st.w[static_cast<size_t>(l.index)];
    const auto& B = st.b[static_cast<size_t>(l.index)];
    const bool last = l.index + 1 == static_cast<int>(m_plan.layers.size());
    if (l.conv.on) {
      // A convolution (codegen.cc conv_tile_source, conv_root_source): per output channel, each
      // input slice's tile sums its taps' windows into a plane from 0 (fused), the chain adds the
      // slices' planes in order, the root adds the bias, activates and pools. Kept: the input,
      // the activated planes before the pooling (as the output) and the pooled ones (as `pres`).
      const ConvParams& c = l.conv;
      const int P = l.out_plane(), Pq = l.pooled_plane(), T = c.taps();
      const DenseKernel& dk = m_g.layers[static_cast<size_t>(l.index)];
      std::vector<float> ys(static_cast<size_t>(c.co) * P), q(static_cast<size_t>(l.out));
      std::vector<float> sum(static_cast<size_t>(P)), part(static_cast<size_t>(P)), yplane(static_cast<size_t>(P));
      std::vector<std::vector<SliceTap>> taps;  // each input slice's
      for (int a = 0; a < l.p_in; ++a) taps.push_back(slice_taps(c, l.in_ch0(a), l.in_ch0(a) + l.in_ch(a)));
      // A residual connection (the root's SkipStreams): the source's planes added to z before
      // the activation (residual_pre), or to y after it, the sum then pooled.
      const float* rsrc = l.residual >= 1 ? kept[static_cast<size_t>(l.residual)].data() : nullptr;
      std::vector<float> splane(rsrc ? static_cast<size_t>(P) : 0);
      for (int o = 0; o < c.co; ++o) {
        for (int a = 0; a < l.p_in; ++a) {
          std::fill(part.begin(), part.end(), 0.0f);
          for (const SliceTap& st : taps[static_cast<size_t>(a)]) {
            const float wv = W[static_cast<size_t>(o) * T + st.k];
            over_window(c, st.t, [&](int xi, int yi) { part[static_cast<size_t>(yi)] = std::fma(wv, cur[static_cast<size_t>(xi)], part[static_cast<size_t>(yi)]); });
          }
          for (int i = 0; i < P; ++i) sum[static_cast<size_t>(i)] = a == 0 ? part[static_cast<size_t>(i)] : sum[static_cast<size_t>(i)] + part[static_cast<size_t>(i)];
        }
        // The root keeps y, or z where the derivative is taken there (act_needs_pre).
        float* kept = &ys[static_cast<size_t>(o) * P];
        float* yo = act_needs_pre(dk.act) ? yplane.data() : kept;
        const float* r = rsrc ? rsrc + static_cast<size_t>(o) * P : nullptr;
        for (int i = 0; i < P; ++i) {
          float z = sum[static_cast<size_t>(i)] + B[static_cast<size_t>(o)];
          if (r && l.residual_pre) z = r[i] + z;
          if (yo != kept) kept[i] = z;
          yo[i] = act_fwd(dk.act, z, dk.act_par);
        }
        const float* out = yo;
        if (r && !l.residual_pre) {
          for (int i = 0; i < P; ++i) splane[static_cast<size_t>(i)] = r[i] + yo[i];
          out = splane.data();
        }
        if (l.pool.kind == PoolParams::kNone) std::copy(out, out + P, &q[static_cast<size_t>(o) * Pq]);
        else pool_forward(c, l.pool, out, &q[static_cast<size_t>(o) * Pq]);
      }
      if (xhats) xhats->emplace_back();
      if (rstds) rstds->push_back(0);
      if (inputs) inputs->push_back(cur);
      if (outputs) outputs->push_back(std::move(ys));
      if (pres) pres->push_back(q);
      cur = std::move(q);
      continue;
    }
    std::vector<float> y(static_cast<size_t>(l.out)), z(static_cast<size_t>(l.out));
    for (int b = 0; b < l.p_out; ++b) {
      for (int o = l.out_off[static_cast<size_t>(b)]; o < l.out_off[static_cast<size_t>(b) + 1]; ++o) {
        float sum = 0;
        for (int a = 0; a < l.p_in; ++a) {
          float p = 0;
          for (int k = l.in_off[static_cast<size_t>(a)]; k < l.in_off[static_cast<size_t>(a) + 1]; ++k) {
            p = std::fma(cur[static_cast<size_t>(k)], W[static_cast<size_t>(o) * l.in + k], p);
          }
          sum = a == 0 ? p : sum + p;
        }
        z[static_cast<size_t>(o)] = sum + B[static_cast<size_t>(o)];
      }
    }
    // A LayerNorm (its one root holds every output), then the activation; z becomes its input.
    const DenseKernel& dk = m_g.layers[static_cast<size_t>(l.index)];
    std::vector<float> xh;
    float rs = 0;
    if (dk.ln.on && !dk.ln.post) layer_norm(&z, st.lg[static_cast<size_t>(l.index)], st.lb[static_cast<size_t>(l.index)], dk.ln.eps, &xh, &rs);
    if (l.residual >= 0 && l.residual_pre) {
      // The target root's vadd before the activation: the source's value plus z.
      const auto& src = kept[static_cast<size_t>(l.residual)];
      for (size_t i = 0; i < z.size(); ++i) z[i] = src[i] + z[i];
    }
    for (int o = 0; o < l.out; ++o) y[static_cast<size_t>(o)] = last ? z[static_cast<size_t>(o)] : act_fwd(dk.act, z[static_cast<size_t>(o)], dk.act_par);
    // A LayerNorm after the activation: of a copy of y, which stays for the derivative.
    std::vector<float> u;
    if (dk.ln.on && dk.ln.post) {
      u = y;
      layer_norm(&u, st.lg[static_cast<size_t>(l.index)], st.lb[static_cast<size_t>(l.index)], dk.ln.eps, &xh, &rs);
    }
    if (xhats) xhats->push_back(std::move(xh));
    if (rstds) rstds->push_back(rs);
    if (inputs) inputs->push_back(cur);
    if (outputs) outputs->push_back(y);  // the activated output: its derivative is taken there
    if (pres) pres->push_back(std::move(z));  // the pre-activation: the GELUs' derivatives are taken there
    if (dk.ln.on && dk.ln.post) y = std::move(u);
    if (l.residual >= 0 && !l.residual_pre) {
      // The target root's vadd: the source's value plus the activated output.
      const auto& src = kept[static_cast<size_t>(l.residual)];
      for (size_t i = 0; i < y.size(); ++i) y[i] = src[i] + y[i];
    }
    cur = std::move(y);
  }
  return cur;
}

std::vector<float> Reference::forward(const float* x) const { return run_forward(x, nullptr, nullptr); }

std::vector<float> Reference::step(const std::vector<const float*>& xs, const std::vector<int>& labels, bool after_lookahead) {
  const int batch = static_cast<int>(xs.size());
  if (after_lookahead && m_before.w.empty()) throw std::logic_error("Reference::step: a lookahead before any update");
  const int L = static_cast<int>(m_plan.layers.size());
  const int R = m_plan.replicas;
  // With replicas, copy c's gradients of its samples (c, c + R, ...) add up in its own buffers.
  std::vector<std::vector<std::vector<float>>> G, GB, GLG, GLB;  // [copy][layer]; a LayerNorm's gamma and beta
  if (R > 1) {
    for (auto* buf : {&G, &GB, &GLG, &GLB}) buf->resize(static_cast<size_t>(R));
    for (int c = 0; c < R; ++c) {
      for (int li = 0; li < L; ++li) {
        const size_t n = m_s.lg.empty() ? 0 : m_s.lg[static_cast<size_t>(li)].size();
        G[static_cast<size_t>(c)].emplace_back(m_s.w[static_cast<size_t>(li)].size(), 0.0f);
        GB[static_cast<size_t>(c)].emplace_back(m_s.b[static_cast<size_t>(li)].size(), 0.0f);
        GLG[static_cast<size_t>(c)].emplace_back(n, 0.0f);
        GLB[static_cast<size_t>(c)].emplace_back(n, 0.0f);
      }
    }
  }
  std::vector<float> losses;
  for (int s = 0; s < batch; ++s) {
    std::vector<std::vector<float>> in, out, pre, xhat;
    std::vector<float> rstd;
    std::vector<std::vector<float>> skip(static_cast<size_t>(L) + 1);  // a sum's gradient, by boundary
    const std::vector<float> logits = run_forward(xs[static_cast<size_t>(s)], &in, &out, after_lookahead ? s : -1, &pre, &xhat, &rstd);
    std::vector<float> g;
    losses.push_back(softmax_xent(logits, labels[static_cast<size_t>(s)], m_plan.batch, &g));
    for (int li = L - 1; li >= 0; --li) {
      const LayerPlan& l = m_plan.layers[static_cast<size_t>(li)];
      auto& W = m_s.w[static_cast<size_t>(li)];
      auto& V = R > 1 ? G[static_cast<size_t>(s % R)][static_cast<size_t>(li)] : m_s.v[static_cast<size_t>(li)];
      auto& VB = R > 1 ? GB[static_cast<size_t>(s % R)][static_cast<size_t>(li)] : m_s.vb[static_cast<size_t>(li)];
      const auto& x = in[static_cast<size_t>(li)];
      std::vector<float> dx;
      if (l.conv.on) {
        // g is dz ([co][ho wo]): each plane's sum (vsum) into its bias's momentum; per tile, the
        // taps' momenta take the window's products (fused, in element order), dx the weights
        // times dz from 0 (fused), and the dx chain adds the tiles' from the last output slice.
        const ConvParams& c = l.conv;
        const int P = l.out_plane(), T = c.taps();
        for (int o = 0; o < c.co; ++o) {
          float sb = 0;
          for (int i = 0; i < P; ++i) sb += g[static_cast<size_t>(o) * P + static_cast<size_t>(i)];
          VB[static_cast<size_t>(o)] = VB[static_cast<size_t>(o)] + sb;
        }
        if (l.dx) dx.assign(static_cast<size_t>(l.in), 0.0f);
        std::vector<float> part(static_cast<size_t>(l.in));
        for (int a = 0; a < l.p_in; ++a) {
          const std::vector<SliceTap> taps = slice_taps(c, l.in_ch0(a), l.in_ch0(a) + l.in_ch(a));
          for (int b = l.p_out - 1; b >= 0; --b) {
            std::fill(part.begin(), part.end(), 0.0f);
            for (int o = l.out_ch0(b); o < l.out_ch0(b) + l.out_ch(b); ++o) {
              const float* d = &g[static_cast<size_t>(o) * P];
              for (const SliceTap& st : taps) {
                float& v = V[static_cast<size_t>(o) * T + st.k];
                const float wv = W[static_cast<size_t>(o) * T + st.k];
                over_window(c, st.t, [&](int xi, int yi) {
                  if (l.dx) part[static_cast<size_t>(xi)] = std::fma(wv, d[yi], part[static_cast<size_t>(xi)]);
                  v = std::fma(d[yi], x[static_cast<size_t>(xi)], v);
                });
              }
            }
            if (!l.dx) continue;
            for (int k = l.in_off[static_cast<size_t>(a)]; k < l.in_off[static_cast<size_t>(a) + 1]; ++k) {
              dx[static_cast<size_t>(k)] = b == l.p_out - 1 ? part[static_cast<size_t>(k)] : dx[static_cast<size_t>(k)] + part[static_cast<size_t>(k)];
            }
          }
        }
      } else {
      for (int o = 0; o < l.out; ++o) VB[static_cast<size_t>(o)] = VB[static_cast<size_t>(o)] + g[static_cast<size_t>(o)];
      if (l.dx) {
        dx.assign(static_cast<size_t>(l.in), 0.0f);
        for (int a = 0; a < l.p_in; ++a) {
          for (int k = l.in_off[static_cast<size_t>(a)]; k < l.in_off[static_cast<size_t>(a) + 1]; ++k) {
            float sum = 0;
            for (int b = l.p_out - 1; b >= 0; --b) {
              float q = 0;
              for (int o = l.out_off[static_cast<size_t>(b)]; o < l.out_off[static_cast<size_t>(b) + 1]; ++o) {
                q = std::fma(g[static_cast<size_t>(o)], W[static_cast<size_t>(o) * l.in + k], q);
              }
              sum = b == l.p_out - 1 ? q : sum + q;
            }
            dx[static_cast<size_t>(k)] = sum;
          }
        }
      }
      for (int o = 0; o < l.out; ++o) {
        for (int k = 0; k < l.in; ++k) {
          float& v = V[static_cast<size_t>(o) * l.in + k];
          v = std::fma(g[static_cast<size_t>(o)], x[static_cast<size_t>(k)], v);
        }
      }
      }
      if (li > 0 && m_plan.layers[static_cast<size_t>(li) - 1].conv.on) {
        // Into a convolution's output: its root spreads the pooled gradient over the windows,
        // then takes the activation's derivative at its planes before the pooling.
        const LayerPlan& pl = m_plan.layers[static_cast<size_t>(li) - 1];
        const DenseKernel& pk = m_g.layers[static_cast<size_t>(li) - 1];
        const int P = pl.out_plane(), Pq = pl.pooled_plane();
        const auto& kept = out[static_cast<size_t>(li) - 1];  // y, or z (act_needs_pre): y again from it
        std::vector<float> ys = kept;
        if (act_needs_pre(pk.act)) {
          for (float& v : ys) v = act_fwd(pk.act, v, pk.act_par);
        }
        const auto& qs = pre[static_cast<size_t>(li) - 1];
        // Residual connections (the roots' SkipStreams): the gradient of the sum this output
        // feeds added first; where it is a sum, the source's share after the pooling's spread,
        // before the derivative (or after it, residual_pre).
        if (const int t = m_plan.residual_target(li); t >= 0) {
          const auto& sg = skip[static_cast<size_t>(t) + 1];
          for (size_t k = 0; k < dx.size(); ++k) dx[k] = dx[k] + sg[k];
        }
        g.assign(ys.size(), 0.0f);
        for (int o = 0; o < pl.conv.co; ++o) {
          const size_t po = static_cast<size_t>(o) * P, qo = static_cast<size_t>(o) * Pq;
          if (pl.pool.kind == PoolParams::kNone) std::copy(&dx[qo], &dx[qo] + P, &g[po]);
          else pool_backward(pl.conv, pl.pool, &ys[po], &qs[qo], &dx[qo], &g[po]);
        }
        if (pl.residual >= 0 && !pl.residual_pre) skip[static_cast<size_t>(li)] = g;
        for (size_t i = 0; i < g.size(); ++i) g[i] = act_grad(pk.act, ys[i], kept[i], g[i], pk.act_par);
        if (pl.residual >= 0 && pl.residual_pre) skip[static_cast<size_t>(li)] = g;
      } else if (li > 0) {
        // Residual connections at boundary li: the sum's gradient it feeds is added to dx (the
        // source root's vadd); where li is a sum, dx is also its source's share (the target
        // root's send, before the derivative).
        if (const int t = m_plan.residual_target(li); t >= 0) {
          const auto& sg = skip[static_cast<size_t>(t) + 1];
          for (size_t k = 0; k < dx.size(); ++k) dx[k] = dx[k] + sg[k];
        }
        const LayerPlan& prev = m_plan.layers[static_cast<size_t>(li) - 1];
        if (prev.residual >= 0 && !prev.residual_pre) skip[static_cast<size_t>(li)] = dx;
        const Activation act = m_g.layers[static_cast<size_t>(li) - 1].act;
        const ActParams alpha = m_g.layers[static_cast<size_t>(li) - 1].act_par;
        const auto& yprev = out[static_cast<size_t>(li) - 1];
        const auto& zprev = pre[static_cast<size_t>(li) - 1];
        const LayerNormParams& ln = m_g.layers[static_cast<size_t>(li) - 1].ln;
        auto ln_grad = [&](std::vector<float>* v) {
          const size_t lp = static_cast<size_t>(li) - 1;
          // With replicas the copy's own buffers, summed over the copies before the update.
          auto& vg = R > 1 ? GLG[static_cast<size_t>(s % R)][lp] : m_s.lvg[lp];
          auto& vbeta = R > 1 ? GLB[static_cast<size_t>(s % R)][lp] : m_s.lvb[lp];
          layer_norm_grad(v, xhat[lp], rstd[lp], m_s.lg[lp], &vg, &vbeta);
        };
        if (ln.on && ln.post) ln_grad(&dx);  // after the activation: its gradient first
        g.assign(dx.size(), 0.0f);
        for (size_t k = 0; k < dx.size(); ++k) {
          g[k] = act_grad(act, yprev[k], zprev[k], dx[k], alpha);
        }
        if (ln.on && !ln.post) ln_grad(&g);
        // A sum before the activation: the source's share is the gradient after the derivative.
        if (prev.residual >= 0 && prev.residual_pre) skip[static_cast<size_t>(li)] = g;
      }
    }
  }
  if (m_plan.lookahead() > 0) {  // what a next minibatch's lookahead samples see
    m_before.w = m_s.w;
    m_before.b = m_s.b;
  }
  if (R > 1) {
    // The column streams' order (codegen.cc sum_steps): the copies south of the middle one
    // m = R / 2 add up from the last (R-1, then + R-2, ..., + m+1), those north of it from copy
    // 0 (then + 1, ..., + m-1); m takes north + (south + its own); then V += the sums.
    auto add_sums = [&](std::vector<std::vector<std::vector<float>>>& buf, std::vector<std::vector<float>>& v) {
      const int m = R / 2;
      for (int li = 0; li < L; ++li) {
        auto at = [&](int c) -> const std::vector<float>& { return buf[static_cast<size_t>(c)][static_cast<size_t>(li)]; };
        // One half's stream: from its farthest copy toward m, each copy's added on the way; then
        // onto m's sums.
        auto fold_half = [&](int far, int step, std::vector<float>* tot) {
          std::vector<float> s = at(far);
          for (int c = far + step; c != m; c += step) {
            for (size_t i = 0; i < s.size(); ++i) s[i] = s[i] + at(c)[i];
          }
          for (size_t i = 0; i < tot->size(); ++i) (*tot)[i] = s[i] + (*tot)[i];
        };
        std::vector<float> tot = at(m);
        if (R - 1 > m) fold_half(R - 1, -1, &tot);
        if (m > 0) fold_half(0, 1, &tot);
        auto& vl = v[static_cast<size_t>(li)];
        for (size_t i = 0; i < tot.size(); ++i) vl[i] = vl[i] + tot[i];
      }
    };
    add_sums(G, m_s.v);
    add_sums(GB, m_s.vb);
    if (!m_s.lvg.empty()) {
      add_sums(GLG, m_s.lvg);
      add_sums(GLB, m_s.lvb);
    }
  }
  for (int li = 0; li < L; ++li) {
    auto upd = [&](std::vector<float>& w, std::vector<float>& v) {
      for (size_t i = 0; i < w.size(); ++i) {
        w[i] = std::fma(-m_h.lr, v[i], w[i]);
        v[i] = v[i] * m_h.momentum;
      }
    };
    upd(m_s.w[static_cast<size_t>(li)], m_s.v[static_cast<size_t>(li)]);
    upd(m_s.b[static_cast<size_t>(li)], m_s.vb[static_cast<size_t>(li)]);
    if (!m_s.lg.empty() && !m_s.lg[static_cast<size_t>(li)].empty()) {
      upd(m_s.lg[static_cast<size_t>(li)], m_s.lvg[static_cast<size_t>(li)]);
      upd(m_s.lb[static_cast<size_t>(li)], m_s.lvb[static_cast<size_t>(li)]);
    }
  }
  ++m_s.step;
  return losses;
}

}  // namespace wafersim::compiler
