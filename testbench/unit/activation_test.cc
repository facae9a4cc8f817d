// The activations' programs (compiler/activations/) against their functions in double precision,
// forward and backward, and the rules every program keeps: the dense kernels give a program
// without `pre` one scratch vector (T0) and a `pre` program four; a slot the kernel does not
// provide is a compile error naming it. (The wafer runs the same programs bit for bit as the
// references: the Training.*, WsTraining.* activation tests; against PyTorch: torch_roundtrip.)
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <stdexcept>
#include <string>

#include "compiler/activation.h"
#include "firmware/kernels/kernel_util.h"

namespace wafersim::test {
namespace {

using compiler::Activation;
using compiler::ActParams;

struct Case {
  Activation act;
  ActParams p;
  std::function<double(double)> f, df;  // the function and its derivative at z
};

double sigmoid(double z) { return 1 / (1 + std::exp(-z)); }

TEST(Activations, ProgramsComputeTheirFunctions) {
  const double kPi = 3.14159265358979323846;
  const Case cases[] = {
      {Activation::kRelu, {}, [](double z) { return z > 0 ? z : 0; }, [](double z) { return z > 0 ? 1.0 : 0.0; }},
      {Activation::kLeakyRelu, {0.1f, 0}, [](double z) { return z > 0 ? z : 0.1 * z; }, [](double z) { return z > 0 ? 1.0 : 0.1; }},
      {Activation::kSigmoid, {}, sigmoid, [](double z) { return sigmoid(z) * (1 - sigmoid(z)); }},
      {Activation::kTanh, {}, [](double z) { return std::tanh(z); }, [](double z) { return 1 - std::tanh(z) * std::tanh(z); }},
      {Activation::kGelu, {}, [](double z) { return 0.5 * z * (1 + std::erf(z / std::sqrt(2.0))); },
       [&](double z) { return 0.5 * (1 + std::erf(z / std::sqrt(2.0))) + z * std::exp(-z * z / 2) / std::sqrt(2 * kPi); }},
      {Activation::kGeluTanh, {},
       [&](double z) { return 0.5 * z * (1 + std::tanh(std::sqrt(2 / kPi) * (z + 0.044715 * z * z * z))); },
       [&](double z) {
         const double c = std::sqrt(2 / kPi), t = std::tanh(c * (z + 0.044715 * z * z * z));
         return 0.5 * (1 + t) + 0.5 * z * (1 - t * t) * c * (1 + 3 * 0.044715 * z * z);
       }},
      {Activation::kElu, {1.5f, 0}, [](double z) { return z > 0 ? z : 1.5 * (std::exp(z) - 1); },
       [](double z) { return z > 0 ? 1.0 : 1.5 * std::exp(z); }},
      {Activation::kSoftplus, {}, [](double z) { return std::log1p(std::exp(z)); }, sigmoid},
      {Activation::kSoftsign, {}, [](double z) { return z / (1 + std::fabs(z)); },
       [](double z) { return 1 / ((1 + std::fabs(z)) * (1 + std::fabs(z))); }},
      {Activation::kHardSigmoid, {1.0f / 6, 0.5f}, [](double z) { return std::fmax(0.0, std::fmin(1.0, z / 6 + 0.5)); },
       [](double z) { return z / 6 + 0.5 > 0 && z / 6 + 0.5 < 1 ? 1.0 / 6 : 0.0; }},
      {Activation::kClip, {-0.5f, 2.0f}, [](double z) { return std::fmax(-0.5, std::fmin(2.0, z)); },
       [](double z) { return z > -0.5 && z < 2.0 ? 1.0 : 0.0; }},
      {Activation::kSelu, {1.6732632f, 1.050701f}, [](double z) { return 1.050701 * (z > 0 ? z : 1.6732632 * (std::exp(z) - 1)); },
       [](double z) { return 1.050701 * (z > 0 ? 1.0 : 1.6732632 * std::exp(z)); }},
      {Activation::kSilu, {}, [](double z) { return z * sigmoid(z); }, [](double z) { return sigmoid(z) * (1 + z * (1 - sigmoid(z))); }},
      {Activation::kHardSwish, {1.0f / 6, 0.5f}, [](double z) { return z * std::fmax(0.0, std::fmin(1.0, z / 6 + 0.5)); },
       [](double z) { return z <= -3 ? 0.0 : z >= 3 ? 1.0 : z / 3 + 0.5; }},
      {Activation::kMish, {}, [](double z) { return z * std::tanh(std::log1p(std::exp(z))); },
       [](double z) {
         const double t = std::tanh(std::log1p(std::exp(z)));
         return t + z * (1 - t * t) * sigmoid(z);
       }},
  };
  for (const Case& c : cases) {
    const char* name = compiler::activation_name(c.act);
    int checked = 0;
    for (int i = -400; i <= 400; ++i) {
      const float z = static_cast<float>(i) * 0.0173f;  // [-6.9, 6.9], never exactly on a kink
      const double want = c.f(z);
      const float y = compiler::act_fwd(c.act, z, c.p);
      EXPECT_NEAR(y, want, 2e-6 + 2e-6 * std::fabs(want)) << name << " at " << z;
      const double dwant = c.df(z) * 0.75;
      const float g = compiler::act_grad(c.act, y, z, 0.75f, c.p);
      EXPECT_NEAR(g, dwant, 2e-6 + 2e-5 * std::fabs(dwant)) << name << "' at " << z;
      ++checked;
    }
    EXPECT_EQ(checked, 801) << name;
    // Far out: no overflow into NaN or infinity where the function is finite.
    for (const float z : {-80.0f, 80.0f}) {
      EXPECT_TRUE(std::isfinite(compiler::act_fwd(c.act, z, c.p))) << name << " at " << z;
    }
  }
}

TEST(Activations, EveryProgramKeepsToTheScratchTheKernelsGive) {
  // Every value of the enum up to its last has its definition.
  for (int i = 0; i <= static_cast<int>(Activation::kChain); ++i) {
    EXPECT_NO_THROW(compiler::activation(static_cast<Activation>(i))) << i;
  }
  EXPECT_EQ(compiler::activations().size(), static_cast<size_t>(Activation::kChain) + 1);
  for (const compiler::ActivationDef* d : compiler::activations()) {
    const ActParams p{0.25f, 0.75f};
    const int limit = d->pre ? 4 : 1;
    EXPECT_LE(d->fwd(p).temps(), limit) << d->name;
    EXPECT_LE(d->bwd(p).temps(), limit) << d->name;
    // Backward reads Z only when pre, Y only when not (the kernels keep one of them).
    EXPECT_FALSE(d->bwd(p).uses(d->pre ? compiler::Slot::kY : compiler::Slot::kZ)) << d->name;
    EXPECT_EQ(compiler::activation_by_name(d->name), d);
    if (*d->onnx) {
      EXPECT_EQ(compiler::activation_by_onnx(d->onnx), d);
    }
  }
}

// A chain (activations/chain.cc): every activation, then steps y mul + add, is that function to
// the element (forward: the activation's program, then one rounding a step), its derivative the
// product of the steps' factors and the activation's at z, within the kernels' four scratch
// vectors, and its backward reads z only (it is `pre` whatever the activation).
TEST(Activations, ChainsAreTheActivationThenTheirSteps) {
  for (const compiler::ActivationDef* d : compiler::activations()) {
    if (d->act == Activation::kChain) continue;
    ActParams p;
    p.a = 0.25f, p.b = 0.75f;
    if (d->act == Activation::kClip) p.a = -0.5f;
    p.base = d->act;
    p.posts = 2;
    p.mul[0] = 0.5f, p.add[0] = 0.125f, p.mul[1] = -3.0f, p.add[1] = 0.0f;
    ActParams bp;
    bp.a = p.a, bp.b = p.b;
    const compiler::ActivationDef& c = compiler::activation(Activation::kChain);
    EXPECT_LE(c.fwd(p).temps(), 4) << d->name;
    EXPECT_LE(c.bwd(p).temps(), 4) << d->name;
    EXPECT_FALSE(c.bwd(p).uses(compiler::Slot::kY)) << d->name;
    for (float z : {-1.5f, -0.25f, 0.375f, 2.0f}) {
      const float y0 = compiler::act_fwd(d->act, z, bp);
      const float want = ((y0 * 0.5f + 0.125f) * -3.0f);
      EXPECT_EQ(compiler::act_fwd(Activation::kChain, z, p), want) << d->name << " at " << z;
      const float g = 0.75f;
      const float gs = (g * -3.0f) * 0.5f;  // the steps' factors in reverse
      const float dwant = d->pre ? compiler::act_bwd_pre(d->act, z, gs, bp) : compiler::act_bwd(d->act, y0, gs, bp);
      EXPECT_EQ(compiler::act_bwd_pre(Activation::kChain, z, g, p), dwant) << d->name << " at " << z;
    }
  }
  EXPECT_EQ(compiler::activation_text(Activation::kChain, [] {
              ActParams p;
              p.base = Activation::kSigmoid, p.posts = 1, p.mul[0] = 2.0f, p.add[0] = -1.0f;
              return p;
            }()),
            "sigmoid * 2 - 1");
}

TEST(Activations, AMissingSlotOrAnUnwrittenScratchIsACompileError) {
  kernels::PeAsm a;
  compiler::ActDsds d;
  d[static_cast<size_t>(compiler::Slot::kZ)] = "d0";
  d[static_cast<size_t>(compiler::Slot::kY)] = "d1";
  try {
    compiler::emit_act_fwd(a, Activation::kSigmoid, {}, d);  // needs T0 and the ones
    FAIL() << "no error";
  } catch (const std::logic_error& e) {
    EXPECT_NE(std::string(e.what()).find("sigmoid (forward) uses T0"), std::string::npos) << e.what();
  }
  compiler::emit_act_fwd(a, Activation::kRelu, {}, d);
  EXPECT_NE(a.text().find("vrelu.fp32 d1, d0"), std::string::npos) << a.text();
  // The builder refuses a scratch vector read before any step wrote it, and a write of the 1.0s.
  using compiler::Slot;
  EXPECT_THROW(compiler::ActProgram().add(Slot::kY, Slot::kZ, Slot::kT1), std::logic_error);
  EXPECT_THROW(compiler::ActProgram().muls(Slot::kOnes, Slot::kZ, 2.0f), std::logic_error);
  EXPECT_NO_THROW(compiler::ActProgram().muls(Slot::kT1, Slot::kZ, 2.0f).add(Slot::kY, Slot::kZ, Slot::kT1));
}

}  // namespace
}  // namespace wafersim::test
