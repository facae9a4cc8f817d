#include "compiler/ws_reference.h"

#include <algorithm>
#include <cmath>
#include <thread>

#include "compiler/reference.h"

namespace wafersim::compiler {
namespace {

// A convolution's forward of one sample (the row's sums, then the root's bias, activation and
// pooling): what its root keeps of the outputs before the pooling into *ys ([co][ho wo]: the
// activated outputs, or the pre-activations z where the derivative is taken there, act_needs_pre),
// the pooled ones returned ([co][hq wq]).
// With a residual connection into its output (WsPlan::root_sum), `res` holds the source's
// planes: added to z before the activation (res_pre), else to the activated planes before the
// pooling; *ys keeps what it keeps without one.
std::vector<float> conv_forward(const WsPlan& p, int l, const std::vector<float>& W, const std::vector<float>& b,
                                const std::vector<float>& in, std::vector<float>* ys, const std::vector<float>* res = nullptr) {
  const ConvParams& c = p.conv[static_cast<size_t>(l)];
  const PoolParams& q = p.pool[static_cast<size_t>(l)];
  const int P = c.ho * c.wo, Pq = p.qplane(l), T = c.taps();
  const std::vector<ConvTap> taps = conv_taps(c);
  ys->assign(static_cast<size_t>(c.co) * P, 0.0f);
  std::vector<float> acc(static_cast<size_t>(P)), part(static_cast<size_t>(P)), out(static_cast<size_t>(c.co) * Pq);
  const int per_ch = c.kh * c.kw;
  for (int co = 0; co < c.co; ++co) {
    // Each feature row's channels from 0 (their taps in order), the planes of partial sums
    // added down the column in row order; rows past the channels pass them on.
    for (int a = 0; a < p.rows; ++a) {
      const int c0 = p.ch0(l, a), c1 = c0 + p.chans(l, a);
      if (c1 == c0) continue;
      std::fill(part.begin(), part.end(), 0.0f);
      for (int t = c0 * per_ch; t < c1 * per_ch; ++t) {
        const ConvTap& tp = taps[static_cast<size_t>(t)];
        const float wv = W[static_cast<size_t>(co) * T + t];
        for (int oy = tp.oy0; oy < tp.oy1; ++oy) {
          const int x0 = (tp.ci * c.h + oy * c.sh - c.pt + tp.ky) * c.w - c.pl + tp.kx;
          for (int ox = tp.ox0; ox < tp.ox1; ++ox) {
            float& e = part[static_cast<size_t>(oy * c.wo + ox)];
            e = std::fma(wv, in[static_cast<size_t>(x0 + ox * c.sw)], e);
          }
        }
      }
      for (int i = 0; i < P; ++i) acc[static_cast<size_t>(i)] = a == 0 ? part[static_cast<size_t>(i)] : acc[static_cast<size_t>(i)] + part[static_cast<size_t>(i)];
    }
    const Activation act = p.act[static_cast<size_t>(l)];
    float* kept = &(*ys)[static_cast<size_t>(co) * P];
    std::vector<float> ybuf;
    float* y = kept;
    if (act_needs_pre(act)) ybuf.resize(static_cast<size_t>(P)), y = ybuf.data();
    const float* r = res ? &(*res)[static_cast<size_t>(co) * P] : nullptr;
    const bool pre_sum = r && p.res_pre(l);
    for (int i = 0; i < P; ++i) {
      float z = acc[static_cast<size_t>(i)] + b[static_cast<size_t>(co)];
      if (pre_sum) z = r[i] + z;
      if (y != kept) kept[i] = z;
      y[i] = act_fwd(act, z, p.act_par[static_cast<size_t>(l)]);
    }
    if (r && !pre_sum) {  // the sum after the activation, pooled or sent from its own planes
      std::vector<float> sum(static_cast<size_t>(P));
      for (int i = 0; i < P; ++i) sum[static_cast<size_t>(i)] = r[i] + y[i];
      if (y == kept) ybuf.resize(static_cast<size_t>(P));
      std::copy(sum.begin(), sum.end(), ybuf.begin());
      y = ybuf.data();
    }
    if (q.kind == PoolParams::kNone) std::copy(y, y + P, &out[static_cast<size_t>(co) * Pq]);
    else pool_forward(c, q, y, &out[static_cast<size_t>(co) * Pq]);
  }
  return out;
}

// A convolution's dW and db from every sample's dz ([co][ho wo], the root's), in the firmware's
// order: per column (from the last, west along the row) the sum over its samples, for dW per
// output row of each tap a fused multiply-add per column, for db vsum's over the samples' planes.
void conv_grads(const WsPlan& p, int l, const std::vector<std::vector<std::vector<float>>>& acts,
                const std::vector<std::vector<float>>& dz, std::vector<float>* dw, std::vector<float>* db) {
  const ConvParams& c = p.conv[static_cast<size_t>(l)];
  const int P = c.ho * c.wo, T = c.taps(), C = p.cols;
  const std::vector<ConvTap> taps = conv_taps(c);
  dw->assign(static_cast<size_t>(c.co) * T, 0.0f);
  db->assign(static_cast<size_t>(c.co), 0.0f);
  for (int co = 0; co < c.co; ++co) {
    for (int j = 0; j < C; ++j) {
      const int col = C - 1 - j;
      float bpart = 0;
      for (int i = 0; i < p.col_m(col); ++i) {
        const float* d = &dz[static_cast<size_t>(p.col_start(col) + i)][static_cast<size_t>(co) * P];
        for (int k = 0; k < P; ++k) bpart += d[k];
      }
      (*db)[static_cast<size_t>(co)] = j == 0 ? bpart : (*db)[static_cast<size_t>(co)] + bpart;
      for (int t = 0; t < T; ++t) {
        const ConvTap& tp = taps[static_cast<size_t>(t)];
        float part = 0;
        for (int i = 0; i < p.col_m(col); ++i) {
          const int s = p.col_start(col) + i;
          const float* d = &dz[static_cast<size_t>(s)][static_cast<size_t>(co) * P];
          const auto& in = acts[static_cast<size_t>(s)][static_cast<size_t>(l)];
          for (int oy = tp.oy0; oy < tp.oy1; ++oy) {
            const int x0 = (tp.ci * c.h + oy * c.sh - c.pt + tp.ky) * c.w - c.pl + tp.kx;
            for (int ox = tp.ox0; ox < tp.ox1; ++ox) part = std::fma(d[oy * c.wo + ox], in[static_cast<size_t>(x0 + ox * c.sw)], part);
          }
        }
        float& e = (*dw)[static_cast<size_t>(co) * T + t];
        e = j == 0 ? part : e + part;
      }
    }
  }
}

// A convolution's dx of one sample (its input's gradient, [c][h w]) from its dz: per output,
// per tap, per output row, w dz added to the inputs it read (fused).
void conv_dx(const WsPlan& p, int l, const std::vector<float>& W, const std::vector<float>& dz, std::vector<float>* dx) {
  const ConvParams& c = p.conv[static_cast<size_t>(l)];
  const int P = c.ho * c.wo, T = c.taps();
  const std::vector<ConvTap> taps = conv_taps(c);
  for (int co = 0; co < c.co; ++co) {
    for (int t = 0; t < T; ++t) {
      const ConvTap& tp = taps[static_cast<size_t>(t)];
      const float wv = W[static_cast<size_t>(co) * T + t];
      for (int oy = tp.oy0; oy < tp.oy1; ++oy) {
        const int x0 = (tp.ci * c.h + oy * c.sh - c.pt + tp.ky) * c.w - c.pl + tp.kx;
        const float* d = &dz[static_cast<size_t>(co) * P + static_cast<size_t>(oy) * c.wo];
        for (int ox = tp.ox0; ox < tp.ox1; ++ox) {
          float& e = (*dx)[static_cast<size_t>(x0 + ox * c.sw)];
          e = std::fma(wv, d[ox], e);
        }
      }
    }
  }
}

// Forward of one sample; acts[j] = input of layer j (acts[L] = logits). With a residual
// connection into boundary t, acts[t] is the sum (source first, as the rows' vadd) and
// (*outs)[t], if asked, the activated output before it.
// A LayerNorm's x^ and 1 / sqrt(var + eps) of one sample, per boundary (its layer's output).
struct LnKept {
  std::vector<std::vector<float>> xhat;
  std::vector<float> r;
  std::vector<std::vector<float>> y;  // a LayerNorm after the activation: y, for the derivative
};

std::vector<std::vector<float>> forward_all(const WsPlan& p, const std::vector<std::vector<float>>& w,
                                            const std::vector<std::vector<float>>& b, const float* x,
                                            std::vector<std::vector<float>>* outs = nullptr,
                                            std::vector<std::vector<float>>* pres = nullptr, const WsNorms& norms = {},
                                            LnKept* kept = nullptr) {
  if (kept) kept->xhat.assign(static_cast<size_t>(p.layers) + 1, {}), kept->r.assign(static_cast<size_t>(p.layers) + 1, 0.0f), kept->y.assign(static_cast<size_t>(p.layers) + 1, {});
  if (outs) outs->assign(static_cast<size_t>(p.layers) + 1, {});
  if (pres) pres->assign(static_cast<size_t>(p.layers) + 1, {});
  const int L = p.layers;
  std::vector<std::vector<float>> acts;
  acts.emplace_back(x, x + p.width[0]);
  for (int l = 0; l < L; ++l) {
    const int li = p.in(l);  // the boundary it reads (a branch: an earlier one than l)
    const auto& in = acts[static_cast<size_t>(li)];
    const int ni = p.width[static_cast<size_t>(li)], no = p.width[static_cast<size_t>(l) + 1];
    const auto& W = w[static_cast<size_t>(l)];
    if (p.is_conv(l)) {
      std::vector<float> ys;
      const std::vector<float>* res = p.root_sum(l + 1) ? &acts[static_cast<size_t>(p.residual_source(l + 1))] : nullptr;
      std::vector<float> out = conv_forward(p, l, W, b[static_cast<size_t>(l)], in, &ys, res);
      acts.push_back(std::move(out));
      if (outs) (*outs)[static_cast<size_t>(l) + 1] = std::move(ys);  // a convolution's outputs before pooling
      continue;
    }
    std::vector<float> y(static_cast<size_t>(no)), z(static_cast<size_t>(no));
    for (int o = 0; o < no; ++o) {
      float sum = 0;
      for (int a = 0; a < p.rows; ++a) {
        if (a > 0 && p.len(li, a) == 0) continue;  // an empty slice passes the partial sums on (grid)
        float part = 0;  // vmul, then vsum from zero
        for (int k = p.off[static_cast<size_t>(li)][static_cast<size_t>(a)]; k < p.off[static_cast<size_t>(li)][static_cast<size_t>(a) + 1]; ++k) {
          part = part + W[static_cast<size_t>(o) * ni + k] * in[static_cast<size_t>(k)];
        }
        sum = a == 0 ? part : sum + part;
      }
      const float pre = sum + b[static_cast<size_t>(l)][static_cast<size_t>(o)];
      z[static_cast<size_t>(o)] = pre;
      y[static_cast<size_t>(o)] = l + 1 < L ? act_fwd(p.act[static_cast<size_t>(l)], pre, p.act_par[static_cast<size_t>(l)]) : pre;
    }
    if (p.has_ln(l)) {
      // The root normalises the sample's outputs (all of them: it holds the layer), then the
      // activation.
      std::vector<float> xh;
      float r = 0;
      if (p.has_ln_post(l)) {
        // After the activation: y (computed above) normalised; y and z stay for the derivative.
        if (kept) kept->y[static_cast<size_t>(l) + 1] = y;
        layer_norm(&y, norms.g[static_cast<size_t>(l)], norms.b[static_cast<size_t>(l)], p.ln_eps[static_cast<size_t>(l)], &xh, &r);
      } else {
        layer_norm(&z, norms.g[static_cast<size_t>(l)], norms.b[static_cast<size_t>(l)], p.ln_eps[static_cast<size_t>(l)], &xh, &r);
        for (int o = 0; o < no; ++o) y[static_cast<size_t>(o)] = act_fwd(p.act[static_cast<size_t>(l)], z[static_cast<size_t>(o)], p.act_par[static_cast<size_t>(l)]);
      }
      if (kept) kept->xhat[static_cast<size_t>(l) + 1] = std::move(xh), kept->r[static_cast<size_t>(l) + 1] = r;
    }
    if (const int k = p.residual_source(l + 1); k >= 0 && p.res_pre(l)) {
      // The sum before the activation (the rows' vadd into Z, then the activation).
      for (int o = 0; o < no; ++o) {
        const size_t i = static_cast<size_t>(o);
        z[i] = acts[static_cast<size_t>(k)][i] + z[i];
        y[i] = act_fwd(p.act[static_cast<size_t>(l)], z[i], p.act_par[static_cast<size_t>(l)]);
      }
      if (pres) (*pres)[static_cast<size_t>(l) + 1] = std::move(z);
      acts.push_back(std::move(y));
      continue;
    }
    if (pres) (*pres)[static_cast<size_t>(l) + 1] = std::move(z);  // a GELU's derivative is taken at z
    if (const int k = p.residual_source(l + 1); k >= 0) {
      std::vector<float> sum(y.size());
      const bool mul = p.mul_join(l);  // a gated join: the product (the rows' vmul)
      const int sub = p.sub_join(l);   // a difference (vsub), either order
      for (size_t i = 0; i < y.size(); ++i) {
        const float xk = acts[static_cast<size_t>(k)][i];
        sum[i] = mul ? y[i] * xk : sub == 1 ? y[i] - xk : sub == 2 ? xk - y[i] : xk + y[i];
      }
      if (outs) (*outs)[static_cast<size_t>(l) + 1] = std::move(y);
      y = std::move(sum);
    }
    acts.push_back(std::move(y));
  }
  return acts;
}

}  // namespace

std::vector<float> ws_reference_forward(const WsPlan& p, const std::vector<std::vector<float>>& w,
                                        const std::vector<std::vector<float>>& b, const float* x, const WsNorms& norms) {
  return forward_all(p, w, b, x, nullptr, nullptr, norms).back();
}

std::vector<std::vector<float>> ws_reference_forward_batch(const WsPlan& p, const std::vector<std::vector<float>>& w,
                                                           const std::vector<std::vector<float>>& b,
                                                           const std::vector<const float*>& xs, int threads, const WsNorms& norms) {
  const size_t n = xs.size();
  if (p.any_conv() || p.any_ln()) {  // sample by sample, on `threads` threads
    std::vector<std::vector<float>> out(n);
    const size_t T = std::max<size_t>(1, std::min<size_t>(static_cast<size_t>(std::max(1, threads)), n));
    auto one = [&](size_t first) {
      for (size_t i = first; i < n; i += T) out[i] = forward_all(p, w, b, xs[i], nullptr, nullptr, norms).back();
    };
    std::vector<std::thread> pool;
    for (size_t t = 1; t < T; ++t) pool.emplace_back(one, t);
    one(0);
    for (auto& th : pool) th.join();
    return out;
  }
  constexpr size_t kBlock = 64;  // samples side by side: independent chains for the vector unit
  const int L = p.layers;
  std::vector<std::vector<float>> out(n);
  const size_t blocks = (n + kBlock - 1) / kBlock;
  // Thread t takes blocks t, t + T, ...; every sample's arithmetic is the same whoever runs it.
  auto work = [&](size_t first, size_t step) {
    std::vector<float> in, next;
    std::vector<std::vector<float>> kept;  // boundaries a residual connection adds, feature-major
    alignas(32) float part[kBlock], sum[kBlock];
    for (size_t bi = first; bi < blocks; bi += step) {
      const size_t s0 = bi * kBlock, nb = std::min(kBlock, n - s0);
      // Activations feature-major: in[k * kBlock + s].
      in.assign(static_cast<size_t>(p.width[0]) * kBlock, 0.0f);
      for (size_t s = 0; s < nb; ++s) {
        for (int k = 0; k < p.width[0]; ++k) in[static_cast<size_t>(k) * kBlock + s] = xs[s0 + s][k];
      }
      kept.assign(static_cast<size_t>(L) + 1, {});
      for (int l = 0; l < L; ++l) {
        const int li = p.in(l);
        const int ni = p.width[static_cast<size_t>(li)], no = p.width[static_cast<size_t>(l) + 1];
        const float* W = w[static_cast<size_t>(l)].data();
        // A residual connection's or a gated join's source, or a later branch's input.
        bool later = p.residual_target(l) >= 0;
        for (int j = l + 1; j < L; ++j) later = later || p.in(j) == l;
        if (later) kept[static_cast<size_t>(l)] = in;
        const std::vector<float>& x_in = li == l ? in : kept[static_cast<size_t>(li)];
        const auto& off = p.off[static_cast<size_t>(li)];
        next.assign(static_cast<size_t>(no) * kBlock, 0.0f);
        for (int o = 0; o < no; ++o) {
          for (int a = 0; a < p.rows; ++a) {
            if (a > 0 && off[static_cast<size_t>(a) + 1] == off[static_cast<size_t>(a)]) continue;
            for (size_t s = 0; s < kBlock; ++s) part[s] = 0.0f;
            for (int k = off[static_cast<size_t>(a)]; k < off[static_cast<size_t>(a) + 1]; ++k) {
              const float wk = W[static_cast<size_t>(o) * ni + k];
              const float* x = &x_in[static_cast<size_t>(k) * kBlock];
              for (size_t s = 0; s < kBlock; ++s) part[s] = part[s] + wk * x[s];
            }
            for (size_t s = 0; s < kBlock; ++s) sum[s] = a == 0 ? part[s] : sum[s] + part[s];
          }
          const float bo = b[static_cast<size_t>(l)][static_cast<size_t>(o)];
          const bool act_here = l + 1 < L && !p.res_pre(l);  // else after the residual sum, below
          for (size_t s = 0; s < kBlock; ++s) {
            const float pre = sum[s] + bo;
            next[static_cast<size_t>(o) * kBlock + s] = act_here ? act_fwd(p.act[static_cast<size_t>(l)], pre, p.act_par[static_cast<size_t>(l)]) : pre;
          }
        }
        if (const int k = p.residual_source(l + 1); k >= 0 && p.res_pre(l)) {
          const auto& src = kept[static_cast<size_t>(k)];
          for (size_t i = 0; i < next.size(); ++i) next[i] = act_fwd(p.act[static_cast<size_t>(l)], src[i] + next[i], p.act_par[static_cast<size_t>(l)]);
        } else if (const int k2 = p.residual_source(l + 1); k2 >= 0) {
          const auto& src = kept[static_cast<size_t>(k2)];
          if (p.mul_join(l)) {
            for (size_t i = 0; i < next.size(); ++i) next[i] = next[i] * src[i];
          } else if (p.sub_join(l) == 1) {
            for (size_t i = 0; i < next.size(); ++i) next[i] = next[i] - src[i];
          } else if (p.sub_join(l) == 2) {
            for (size_t i = 0; i < next.size(); ++i) next[i] = src[i] - next[i];
          } else {
            for (size_t i = 0; i < next.size(); ++i) next[i] = src[i] + next[i];
          }
        }
        in.swap(next);
      }
      const int no = p.width[static_cast<size_t>(L)];
      for (size_t s = 0; s < nb; ++s) {
        auto& z = out[s0 + s];
        z.resize(static_cast<size_t>(no));
        for (int o = 0; o < no; ++o) z[static_cast<size_t>(o)] = in[static_cast<size_t>(o) * kBlock + s];
      }
    }
  };
  const size_t T = std::max<size_t>(1, std::min<size_t>(static_cast<size_t>(std::max(1, threads)), blocks));
  std::vector<std::thread> pool;
  for (size_t t = 1; t < T; ++t) pool.emplace_back(work, t, T);
  work(0, T);
  for (auto& th : pool) th.join();
  return out;
}

WsGrads ws_reference_grads(const WsPlan& p, const std::vector<std::vector<float>>& w,
                           const std::vector<std::vector<float>>& b, const std::vector<const float*>& xs,
                           const std::vector<int>& labels, const WsNorms& norms) {
  const int L = p.layers, S = p.shard, C = p.cols;
  std::vector<std::vector<std::vector<float>>> acts(static_cast<size_t>(S)), outs(static_cast<size_t>(S)), pres(static_cast<size_t>(S));
  // A residual connection's gradient of the sum (boundary t), kept per sample for its source.
  std::vector<std::vector<std::vector<float>>> skip(static_cast<size_t>(S), std::vector<std::vector<float>>(static_cast<size_t>(L) + 1));
  std::vector<std::vector<float>> dy(static_cast<size_t>(S));  // per sample, gradient at the current layer's output
  std::vector<float> losses(static_cast<size_t>(S));
  std::vector<LnKept> lnk(static_cast<size_t>(S));
  for (int s = 0; s < S; ++s) {
    acts[static_cast<size_t>(s)] = forward_all(p, w, b, xs[static_cast<size_t>(s)], &outs[static_cast<size_t>(s)], &pres[static_cast<size_t>(s)],
                                               norms, &lnk[static_cast<size_t>(s)]);
    losses[static_cast<size_t>(s)] = softmax_xent(acts[static_cast<size_t>(s)].back(), labels[static_cast<size_t>(s)], p.batch,
                                                  &dy[static_cast<size_t>(s)]);
  }
  WsGrads r;
  // Loss: each column sums its samples from 0, then the columns chain west (from the last).
  for (int c = C - 1; c >= 0; --c) {
    float col = 0;
    for (int i = 0; i < p.col_m(c); ++i) col = col + losses[static_cast<size_t>(p.col_start(c) + i)];
    r.loss_sum = c == C - 1 ? col : r.loss_sum + col;
  }
  r.dw.resize(static_cast<size_t>(L));
  r.db.resize(static_cast<size_t>(L));
  r.dg.resize(static_cast<size_t>(L));
  r.dbeta.resize(static_cast<size_t>(L));
  // The gradient of boundary k from its readers other than layer k (branches, the join it
  // feeds), per sample, in the order the rows take them (WsPlan::has_g): the first assigns.
  std::vector<std::vector<std::vector<float>>> G(static_cast<size_t>(S), std::vector<std::vector<float>>(static_cast<size_t>(L) + 1));
  auto add_g = [&](int s, int k, const std::vector<float>& c) {
    auto& g = G[static_cast<size_t>(s)][static_cast<size_t>(k)];
    if (g.empty()) {
      g = c;
    } else {
      for (size_t i = 0; i < g.size(); ++i) g[i] = g[i] + c[i];
    }
  };
  for (int l = L - 1; l >= 0; --l) {
    const int li = p.in(l);
    const int ni = p.width[static_cast<size_t>(li)], no = p.width[static_cast<size_t>(l) + 1];
    const auto& W = w[static_cast<size_t>(l)];
    auto& dw = r.dw[static_cast<size_t>(l)];
    auto& db = r.db[static_cast<size_t>(l)];
    if (p.has_ln(l)) {
      // The root, once it holds the layer's whole gradient dy (at u): per column its samples'
      // d gamma and d beta from zero (then west over the columns, as db), and each sample's dy
      // through the normalisation to the gradient at z.
      auto& dg = r.dg[static_cast<size_t>(l)];
      auto& dbe = r.dbeta[static_cast<size_t>(l)];
      dg.assign(static_cast<size_t>(no), 0.0f);
      dbe.assign(static_cast<size_t>(no), 0.0f);
      for (int c = C - 1; c >= 0; --c) {
        std::vector<float> vg(static_cast<size_t>(no), 0.0f), vb(static_cast<size_t>(no), 0.0f);
        for (int i = 0; i < p.col_m(c); ++i) {
          const size_t s = static_cast<size_t>(p.col_start(c) + i);
          layer_norm_grad(&dy[s], lnk[s].xhat[static_cast<size_t>(l) + 1], lnk[s].r[static_cast<size_t>(l) + 1], norms.g[static_cast<size_t>(l)], &vg, &vb);
        }
        for (int o = 0; o < no; ++o) {
          const size_t k = static_cast<size_t>(o);
          dg[k] = c == C - 1 ? vg[k] : dg[k] + vg[k];
          dbe[k] = c == C - 1 ? vb[k] : dbe[k] + vb[k];
        }
      }
      if (p.has_ln_post(l)) {
        // After the activation: its derivative at the roots, at y (or z), once normalised back.
        for (int s = 0; s < S; ++s) {
          const auto& y = lnk[static_cast<size_t>(s)].y[static_cast<size_t>(l) + 1];
          const auto& z = pres[static_cast<size_t>(s)][static_cast<size_t>(l) + 1];
          for (int o = 0; o < no; ++o) {
            const size_t k = static_cast<size_t>(o);
            dy[static_cast<size_t>(s)][k] = act_grad(p.act[static_cast<size_t>(l)], y[k], z[k], dy[static_cast<size_t>(s)][k], p.act_par[static_cast<size_t>(l)]);
          }
        }
      }
    }
    if (p.is_conv(l)) {
      conv_grads(p, l, acts, dy, &dw, &db);
    } else {
    dw.assign(static_cast<size_t>(no) * ni, 0.0f);
    db.assign(static_cast<size_t>(no), 0.0f);
    for (int o = 0; o < no; ++o) {
      for (int c = C - 1; c >= 0; --c) {
        float part = 0;
        for (int i = 0; i < p.col_m(c); ++i) part = part + dy[static_cast<size_t>(p.col_start(c) + i)][static_cast<size_t>(o)];
        db[static_cast<size_t>(o)] = c == C - 1 ? part : db[static_cast<size_t>(o)] + part;
      }
      for (int k = 0, a = 0; k < ni; ++k) {
        while (p.off[static_cast<size_t>(li)][static_cast<size_t>(a) + 1] <= k) ++a;
        // Along the row toward the edge that feeds it: West from the last column, East (a grid
        // row in an East band) from the first.
        const bool east = p.east_fed(a);
        float total = 0;
        for (int j = 0; j < C; ++j) {
          const int c = east ? j : C - 1 - j;
          float part = 0;  // vaxpy over the column's samples from zero
          for (int i = 0; i < p.col_m(c); ++i) {
            const int s = p.col_start(c) + i;
            part = std::fma(dy[static_cast<size_t>(s)][static_cast<size_t>(o)], acts[static_cast<size_t>(s)][static_cast<size_t>(li)][static_cast<size_t>(k)], part);
          }
          total = j == 0 ? part : total + part;
        }
        dw[static_cast<size_t>(o) * ni + k] = total;
      }
    }
    }
    if (l == 0) break;
    for (int s = 0; s < S; ++s) {
      std::vector<float> dx(static_cast<size_t>(ni), 0.0f);
      if (p.is_conv(l)) {
        conv_dx(p, l, W, dy[static_cast<size_t>(s)], &dx);
      } else if (li > 0) {  // a branch from the model input computes none
        for (int o = 0; o < no; ++o) {
          for (int k = 0; k < ni; ++k) {
            dx[static_cast<size_t>(k)] = std::fma(W[static_cast<size_t>(o) * ni + k], dy[static_cast<size_t>(s)][static_cast<size_t>(o)], dx[static_cast<size_t>(k)]);
          }
        }
      }
      if (p.is_conv(l - 1)) {
        // A convolution's output boundary: the root spreads the pooled gradient over the windows
        // and takes the activation's derivative at its outputs before the pooling.
        const ConvParams& c = p.conv[static_cast<size_t>(l) - 1];
        const int P = c.ho * c.wo, Pq = p.qplane(l - 1);
        // The root keeps z where the derivative is taken there, and recomputes y for the pooling.
        const Activation act = p.act[static_cast<size_t>(l) - 1];
        const ActParams& par = p.act_par[static_cast<size_t>(l) - 1];
        const auto& kept = outs[static_cast<size_t>(s)][static_cast<size_t>(l)];
        std::vector<float> ys = kept;
        if (act_needs_pre(act)) {
          for (float& v : ys) v = act_fwd(act, v, par);
        }
        const auto& xq = acts[static_cast<size_t>(s)][static_cast<size_t>(l)];
        // Residual connections at the root: the gradient of the sum boundary l feeds added first;
        // where l is a sum, the source's share kept before the derivative, or after it (res_pre).
        if (p.root_kept(l)) {
          const auto& g = skip[static_cast<size_t>(s)][static_cast<size_t>(p.residual_target(l))];
          for (size_t i = 0; i < dx.size(); ++i) dx[i] = dx[i] + g[i];
        }
        std::vector<float> dz(static_cast<size_t>(c.co) * P);
        for (int co = 0; co < c.co; ++co) {
          const size_t o = static_cast<size_t>(co) * P, oq = static_cast<size_t>(co) * Pq;
          if (p.pool[static_cast<size_t>(l) - 1].kind == PoolParams::kNone) std::copy(&dx[oq], &dx[oq] + P, &dz[o]);
          else pool_backward(c, p.pool[static_cast<size_t>(l) - 1], &ys[o], &xq[oq], &dx[oq], &dz[o]);
        }
        const bool sum = p.root_sum(l), pre_sum = sum && p.res_pre(l - 1);
        if (sum && !pre_sum) skip[static_cast<size_t>(s)][static_cast<size_t>(l)] = dz;
        for (size_t i = 0; i < dz.size(); ++i) dz[i] = act_grad(act, ys[i], kept[i], dz[i], par);
        if (pre_sum) skip[static_cast<size_t>(s)][static_cast<size_t>(l)] = dz;
        dy[static_cast<size_t>(s)] = std::move(dz);
        continue;
      }
      // Boundary l's gradient: through layer l (a branch's goes to the boundary it reads, into
      // G of it), plus what its other readers left in G{l}; where l is a join, its source's share
      // into G of the source, and the derivative of the activation taken at the output before it.
      if (li != l) {
        if (li > 0) add_g(s, li, dx);
        dx = G[static_cast<size_t>(s)][static_cast<size_t>(l)];
      } else if (p.has_g(l)) {
        const auto& g = G[static_cast<size_t>(s)][static_cast<size_t>(l)];
        for (size_t k = 0; k < dx.size(); ++k) dx[k] = dx[k] + g[k];
      }
      const int src = p.residual_source(l);
      const bool mul = src >= 0 && p.mul_join(l - 1);
      // A sum before the activation (res_pre): the source's share is the gradient after it.
      const bool post_sum = src >= 0 && !p.res_pre(l - 1) && !mul;
      const int sub = src >= 0 ? p.sub_join(l - 1) : 0;
      // A difference: y - x_k gives the source -dx (the rows' vsub from G, or a vmuls by -1);
      // x_k - y gives it dx and the layer -dx.
      if (post_sum && src > 0) {
        std::vector<float> share = dx;
        if (sub == 1) {
          for (float& v : share) v = -v;
        }
        add_g(s, src, share);
      }
      if (sub == 2) {
        for (float& v : dx) v = -v;
      }
      const auto& y = src >= 0 && !p.res_pre(l - 1) ? outs[static_cast<size_t>(s)][static_cast<size_t>(l)] : acts[static_cast<size_t>(s)][static_cast<size_t>(l)];
      if (mul) {
        // A gated join y * x_k: the source's share dx y (a vmul, or a vfmac into what G holds),
        // and the layer's dx x_k.
        const auto& xk = acts[static_cast<size_t>(s)][static_cast<size_t>(src)];
        if (src > 0) {
          auto& g = G[static_cast<size_t>(s)][static_cast<size_t>(src)];
          if (g.empty()) {
            g.resize(dx.size());
            for (size_t i = 0; i < dx.size(); ++i) g[i] = dx[i] * y[i];
          } else {
            for (size_t i = 0; i < dx.size(); ++i) g[i] = std::fma(dx[i], y[i], g[i]);
          }
        }
        for (size_t i = 0; i < dx.size(); ++i) dx[i] = dx[i] * xk[i];
      }
      const Activation act = p.rows_bwd_act(l - 1);  // none where the roots take it (ln_post)
      const auto& z = pres[static_cast<size_t>(s)][static_cast<size_t>(l)];
      for (size_t i = 0; i < dx.size(); ++i) dx[i] = act_grad(act, y[i], z[i], dx[i], p.act_par[static_cast<size_t>(l) - 1]);
      if (src > 0 && p.res_pre(l - 1)) add_g(s, src, dx);
      dy[static_cast<size_t>(s)] = std::move(dx);
    }
  }
  return r;
}

}  // namespace wafersim::compiler
