#include "compiler/optim.h"

#include <charconv>
#include <cmath>

namespace wafersim::compiler {

double decimal_value(float x) {
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, x);
  double d = x;
  std::from_chars(buf, r.ptr, d);
  return d;
}

AdamScalars adam_scalars(float lr, float beta1, float beta2, float eps, int64_t t) {
  const double b1 = decimal_value(beta1), b2 = decimal_value(beta2), l = decimal_value(lr);
  const auto td = static_cast<double>(t);
  AdamScalars s;
  s.a1 = static_cast<float>(1.0 - b1);
  s.a2 = static_cast<float>(1.0 - b2);
  s.neg_step = static_cast<float>(-(l / (1.0 - std::pow(b1, td))));
  s.s2 = static_cast<float>(std::sqrt(1.0 - std::pow(b2, td)));
  s.beta1 = beta1;
  s.beta2 = beta2;
  s.eps = eps;
  return s;
}

void adam_step(const AdamScalars& s, float* w, float* m, float* v, const float* g, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    const float m_decayed = m[i] * s.beta1;
    m[i] = std::fma(s.a1, g[i], m_decayed);
    const float v_decayed = v[i] * s.beta2;
    const float a2g = s.a2 * g[i];
    v[i] = std::fma(a2g, g[i], v_decayed);
    const float root = std::sqrt(v[i]);
    const float scaled = root / s.s2;
    const float d = scaled + s.eps;
    const float num = s.neg_step * m[i];
    const float delta = num / d;
    w[i] = w[i] + delta;
  }
}

}  // namespace wafersim::compiler
