// The PE's number formats, checked bit for bit: fp16 against GCC's _Float16 (an independent
// implementation), bf16 and cb16 against a reference codec in double arithmetic written here,
// over all 65,536 patterns and 1.2-1.4 million fp32 inputs per format, plus named edge cases.
#include "hw/number_format.h"

#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <ostream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace wafersim {
namespace {

// Exhaustive loops report the first few mismatches, then only the count.
constexpr int kMaxReported = 10;

std::string hex(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%08x", v);
  return buf;
}

// A 16-bit layout for the reference codec below.
struct Ref {
  int exp_bits;
  int man_bits;
  int bias;

  int max_field() const { return (1 << exp_bits) - 1; }
  uint32_t inf() const { return static_cast<uint32_t>(max_field()) << man_bits; }
  bool is_nan(uint32_t h) const {
    const uint32_t field = (h >> man_bits) & inf() >> man_bits;
    return field == inf() >> man_bits && (h & ((1u << man_bits) - 1)) != 0;
  }
  double min_normal() const { return std::ldexp(1.0, 1 - bias); }
  double min_step() const { return std::ldexp(1.0, 1 - bias - man_bits); }
  // The power of two just above the largest finite value: where the next binade would start.
  double beyond_max() const { return std::ldexp(1.0, max_field() - bias); }
  double max_finite() const {
    return beyond_max() - std::ldexp(1.0, max_field() - 1 - bias - man_bits);
  }
  // RNE: at and above the midpoint between the largest finite value and beyond_max, Inf.
  double overflow_threshold() const { return (max_finite() + beyond_max()) / 2; }

  // Value of a pattern, by the textbook formula.
  double decode(uint32_t h) const {
    const bool neg = (h >> (exp_bits + man_bits)) & 1;
    const int field = (h >> man_bits) & max_field();
    const double man = h & ((1u << man_bits) - 1);
    double v;
    if (field == max_field()) {
      v = man != 0 ? std::nan("") : HUGE_VAL;
    } else if (field == 0) {
      v = std::ldexp(man, 1 - bias - man_bits);
    } else {
      v = std::ldexp(std::ldexp(1.0, man_bits) + man, field - bias - man_bits);
    }
    return neg ? -v : v;
  }

  // Pattern of the representable value nearest x, by bracketing x between two neighbours on the
  // grid of its binade. x must not be NaN. Every fp32 and every midpoint is exact in double.
  uint32_t encode(float x) const {
    const uint32_t sign = std::signbit(x) ? 1u << (exp_bits + man_bits) : 0;
    const double a = std::fabs(static_cast<double>(x));
    if (a >= overflow_threshold()) return sign | inf();  // includes Inf
    double step = min_step();
    if (a >= min_normal()) {
      int e;
      std::frexp(a, &e);  // a = f * 2^e, f in [0.5, 1)
      step = std::ldexp(1.0, e - 1 - man_bits);
    }
    const double k = std::floor(a / step);
    const double lo = k * step, hi = (k + 1) * step;
    double r;
    if (a - lo < hi - a) {
      r = lo;
    } else if (hi - a < a - lo) {
      r = hi;
    } else {
      r = std::fmod(k, 2.0) == 0 ? lo : hi;  // k's parity is the last mantissa bit's
    }
    if (r < min_normal()) return sign | static_cast<uint32_t>(r / min_step());
    int e;
    std::frexp(r, &e);
    const int field = e - 1 + bias;
    const double frac = r / std::ldexp(1.0, e - 1) - 1;  // in [0, 1)
    return sign | static_cast<uint32_t>(field) << man_bits |
           static_cast<uint32_t>(std::ldexp(frac, man_bits));
  }
};

// Our NaN rule, widening: same sign, quiet, the whole payload kept in the top mantissa bits.
uint32_t widened_nan(const Ref& f, uint32_t h) {
  const uint32_t sign = (h >> (f.exp_bits + f.man_bits)) << 31;
  return sign | 0x7fc00000 | (h & ((1u << f.man_bits) - 1)) << (23 - f.man_bits);
}

constexpr Ref kRefF16{5, 10, 15};
constexpr Ref kRefBF16{8, 7, 127};
Ref ref_cb16(int bias) { return Ref{6, 9, bias}; }

// Every 4099th fp32 pattern: both signs, every exponent including subnormals and NaNs,
// and (4099 not being a power of two) varied low mantissa bits, i.e. varied sticky bits.
const std::vector<float>& strided_inputs() {
  static const std::vector<float> v = [] {
    std::vector<float> r;
    for (uint64_t b = 0; b < (uint64_t{1} << 32); b += 4099) r.push_back(f32_from_bits(uint32_t(b)));
    return r;
  }();
  return v;
}

// For every finite non-negative pattern of `f` and its successor (or, after the largest finite
// value, the next power of two): the exact midpoint and the fp32 values one ulp either side, in
// both signs. These are the inputs where a rounding error shows.
std::vector<float> midpoints(const Ref& f) {
  std::vector<float> r;
  const uint32_t first_special = f.inf();
  for (uint32_t h = 0; h < first_special; ++h) {
    const double hi = h + 1 == first_special ? f.beyond_max() : f.decode(h + 1);
    const double mid = (f.decode(h) + hi) / 2;
    const float m = static_cast<float>(mid);
    EXPECT_EQ(static_cast<double>(m), mid) << "midpoint not exact in fp32 after " << hex(h);
    for (float x : {m, std::nextafter(m, 0.0f), std::nextafter(m, HUGE_VALF)}) {
      r.push_back(x);
      r.push_back(-x);
    }
  }
  return r;
}

// ----- fp16 against GCC's _Float16 -----

#if defined(__FLT16_MANT_DIG__)
float gcc_f16_to_f32(uint16_t h) {
  _Float16 v;
  std::memcpy(&v, &h, sizeof v);
  return static_cast<float>(v);
}

uint16_t gcc_f32_to_f16(float x) {
  const _Float16 v = static_cast<_Float16>(x);
  uint16_t h;
  std::memcpy(&h, &v, sizeof h);
  return h;
}
#define WAFERSIM_HAVE_FLOAT16 1
#endif

TEST(Fp16, DecodeMatchesFloat16ForAllPatterns) {
#ifndef WAFERSIM_HAVE_FLOAT16
  GTEST_SKIP() << "compiler has no _Float16";
#else
  int bad = 0;
  for (uint32_t h = 0; h <= 0xffff; ++h) {
    const float got = f16_to_f32(uint16_t(h)), want = gcc_f16_to_f32(uint16_t(h));
    const bool ok =
        std::isnan(want) ? f32_bits(got) == widened_nan(kRefF16, h) : f32_bits(got) == f32_bits(want);
    if (!ok && ++bad <= kMaxReported) {
      ADD_FAILURE() << "f16 " << hex(h) << ": got " << hex(f32_bits(got)) << " want "
                    << hex(f32_bits(want));
    }
  }
  EXPECT_EQ(bad, 0);
#endif
}

TEST(Fp16, EncodeMatchesFloat16) {
#ifndef WAFERSIM_HAVE_FLOAT16
  GTEST_SKIP() << "compiler has no _Float16";
#else
  std::vector<float> in = strided_inputs();
  const std::vector<float> mid = midpoints(kRefF16);
  in.insert(in.end(), mid.begin(), mid.end());
  int bad = 0;
  for (float x : in) {
    const uint16_t got = f32_to_f16(x), want = gcc_f32_to_f16(x);
    const bool ok = kRefF16.is_nan(want) ? kRefF16.is_nan(got) : got == want;
    if (!ok && ++bad <= kMaxReported) {
      ADD_FAILURE() << "f32 " << hex(f32_bits(x)) << ": got " << hex(got) << " want " << hex(want);
    }
  }
  EXPECT_EQ(bad, 0);
#endif
}

// The reference codec must agree with _Float16 too, or its verdicts on bf16 and cb16 mean little.
TEST(Fp16, ReferenceCodecMatchesFloat16) {
#ifndef WAFERSIM_HAVE_FLOAT16
  GTEST_SKIP() << "compiler has no _Float16";
#else
  int bad = 0;
  for (uint32_t h = 0; h <= 0xffff; ++h) {
    if (kRefF16.is_nan(h)) continue;
    if (f32_bits(static_cast<float>(kRefF16.decode(h))) != f32_bits(gcc_f16_to_f32(uint16_t(h))) &&
        ++bad <= kMaxReported) {
      ADD_FAILURE() << "decode " << hex(h);
    }
  }
  std::vector<float> in = strided_inputs();
  const std::vector<float> mid = midpoints(kRefF16);
  in.insert(in.end(), mid.begin(), mid.end());
  for (float x : in) {
    if (std::isnan(x)) continue;
    if (kRefF16.encode(x) != gcc_f32_to_f16(x) && ++bad <= kMaxReported) {
      ADD_FAILURE() << "encode " << hex(f32_bits(x));
    }
  }
  EXPECT_EQ(bad, 0);
#endif
}

TEST(Fp16, RoundTripsEveryPattern) {
  int bad = 0;
  for (uint32_t h = 0; h <= 0xffff; ++h) {
    // A NaN comes back quiet (bit 9 set) with the rest of its payload and its sign.
    const uint32_t want = kRefF16.is_nan(h) ? h | 0x0200 : h;
    const uint32_t got = f32_to_f16(f16_to_f32(uint16_t(h)));
    if (got != want && ++bad <= kMaxReported) {
      ADD_FAILURE() << hex(h) << " -> " << hex(got);
    }
  }
  EXPECT_EQ(bad, 0);
}

struct EncodeCase {
  uint32_t f32;
  uint16_t want;
  const char* what;
};

struct DecodeCase {
  uint16_t h;
  uint32_t want_f32;
  const char* what;
};

TEST(Fp16, EdgeCases) {
  const EncodeCase enc[] = {
      {0x477fe000, 0x7bff, "65504, max finite"},
      {0x477fefff, 0x7bff, "65519.996, just below the overflow threshold"},
      {0x477ff000, 0x7c00, "65520, the overflow threshold, ties up to Inf"},
      {0x7f7fffff, 0x7c00, "fp32 max"},
      {0x38800000, 0x0400, "2^-14, min normal"},
      {0x33800000, 0x0001, "2^-24, min subnormal"},
      {0x33000000, 0x0000, "2^-25, half the min subnormal, ties to even zero"},
      {0x33000001, 0x0001, "just above 2^-25"},
      {0x33c00000, 0x0002, "1.5 x min subnormal, ties to even 2"},
      {0x387fe000, 0x0400, "subnormal 0x3ff.8 carries into min normal"},
      {0x3f801000, 0x3c00, "1 + 2^-11 ties to even 1"},
      {0x3f803000, 0x3c02, "1 + 3 x 2^-11 ties to even 1 + 2^-9"},
      {0x3ffff000, 0x4000, "2 - 2^-11 carries into the exponent"},
      {0x00000001, 0x0000, "fp32 min subnormal underflows"},
      {0x80000001, 0x8000, "and keeps its sign"},
      {0x00000000, 0x0000, "+0"},
      {0x80000000, 0x8000, "-0"},
      {0x7f800000, 0x7c00, "+Inf"},
      {0xff800000, 0xfc00, "-Inf"},
      {0x7fc00000, 0x7e00, "quiet NaN"},
      {0xffd00000, 0xfe80, "negative NaN keeps its top payload bits"},
      {0x7f800001, 0x7e00, "signalling NaN with only low payload stays NaN"},
  };
  for (const EncodeCase& c : enc) {
    EXPECT_EQ(f32_to_f16(f32_from_bits(c.f32)), c.want) << c.what;
  }
  const DecodeCase dec[] = {
      {0x7bff, 0x477fe000, "max finite"},
      {0x0400, 0x38800000, "min normal"},
      {0x0001, 0x33800000, "min subnormal"},
      {0x03ff, 0x387fc000, "max subnormal"},
      {0x8000, 0x80000000, "-0"},
      {0xfc00, 0xff800000, "-Inf"},
      {0x7d01, 0x7fe02000, "signalling NaN: quiet, payload kept"},
  };
  for (const DecodeCase& c : dec) {
    EXPECT_EQ(f32_bits(f16_to_f32(c.h)), c.want_f32) << c.what;
  }
}

// ----- bf16 and cb16 against the reference codec -----

struct FormatCase {
  NumFormat format;
  int bias;  // cb16 only
  Ref ref;
};

void PrintTo(const FormatCase& c, std::ostream* os) {
  *os << format_name(c.format) << " bias " << c.ref.bias;
}

std::string case_name(const testing::TestParamInfo<FormatCase>& info) {
  const FormatCase& c = info.param;
  return c.format == NumFormat::kBF16 ? "bf16" : "cb16_bias" + std::to_string(c.bias);
}

class Format16Test : public testing::TestWithParam<FormatCase> {
 protected:
  uint16_t encode(float x) const {
    const FormatCase& c = GetParam();
    return c.format == NumFormat::kBF16 ? f32_to_bf16(x) : f32_to_cb16(x, c.bias);
  }
  float decode(uint16_t h) const {
    const FormatCase& c = GetParam();
    return c.format == NumFormat::kBF16 ? bf16_to_f32(h) : cb16_to_f32(h, c.bias);
  }
};

TEST_P(Format16Test, DecodeMatchesReferenceForAllPatterns) {
  const Ref& ref = GetParam().ref;
  int bad = 0;
  for (uint32_t h = 0; h <= 0xffff; ++h) {
    const float got = decode(uint16_t(h));
    const double want = ref.decode(h);
    const bool ok = std::isnan(want) ? f32_bits(got) == widened_nan(ref, h)
                                     : f32_bits(got) == f32_bits(static_cast<float>(want)) &&
                                           static_cast<double>(got) == want;
    if (!ok && ++bad <= kMaxReported) {
      ADD_FAILURE() << hex(h) << ": got " << hex(f32_bits(got)) << " want " << want;
    }
  }
  EXPECT_EQ(bad, 0);
}

TEST_P(Format16Test, EncodeMatchesReference) {
  const Ref& ref = GetParam().ref;
  std::vector<float> in = strided_inputs();
  for (const Ref& r : {ref, kRefF16}) {
    const std::vector<float> mid = midpoints(r);
    in.insert(in.end(), mid.begin(), mid.end());
  }
  const uint32_t quiet = 1u << (ref.man_bits - 1);
  int bad = 0;
  for (float x : in) {
    const uint32_t got = encode(x);
    bool ok;
    if (std::isnan(x)) {
      // Quiet, same sign, and the payload bits below fp32's quiet bit that fit, kept.
      const uint32_t payload = (f32_bits(x) & 0x3fffff) >> (23 - ref.man_bits);
      const uint32_t sign = (f32_bits(x) >> 31) << 15;
      ok = got == (sign | ref.inf() | quiet | payload);
    } else {
      ok = got == ref.encode(x);
    }
    if (!ok && ++bad <= kMaxReported) {
      ADD_FAILURE() << "f32 " << hex(f32_bits(x)) << ": got " << hex(got) << " want "
                    << hex(std::isnan(x) ? 0 : ref.encode(x));
    }
  }
  EXPECT_EQ(bad, 0);
}

TEST_P(Format16Test, RoundTripsEveryPattern) {
  const Ref& ref = GetParam().ref;
  const uint32_t quiet = 1u << (ref.man_bits - 1);
  int bad = 0;
  for (uint32_t h = 0; h <= 0xffff; ++h) {
    const uint32_t want = ref.is_nan(h) ? h | quiet : h;
    const uint32_t got = encode(decode(uint16_t(h)));
    if (got != want && ++bad <= kMaxReported) ADD_FAILURE() << hex(h) << " -> " << hex(got);
  }
  EXPECT_EQ(bad, 0);
}

INSTANTIATE_TEST_SUITE_P(Formats, Format16Test,
                         testing::Values(FormatCase{NumFormat::kBF16, 0, kRefBF16},
                                         FormatCase{NumFormat::kCB16, 15, ref_cb16(15)},
                                         FormatCase{NumFormat::kCB16, 31, ref_cb16(31)},
                                         FormatCase{NumFormat::kCB16, 47, ref_cb16(47)}),
                         case_name);

TEST(Bf16, EdgeCases) {
  const EncodeCase enc[] = {
      {0x7f7f0000, 0x7f7f, "max finite, (2 - 2^-7) x 2^127"},
      {0x7f7f7fff, 0x7f7f, "just below the overflow threshold"},
      {0x7f7f8000, 0x7f80, "the overflow threshold ties up to Inf"},
      {0x7f7fffff, 0x7f80, "fp32 max"},
      {0x00800000, 0x0080, "2^-126, min normal"},
      {0x00010000, 0x0001, "2^-133, min subnormal (an fp32 subnormal)"},
      {0x00008000, 0x0000, "2^-134 ties to even zero"},
      {0x00008001, 0x0001, "just above 2^-134"},
      {0x00018000, 0x0002, "1.5 x min subnormal ties to even 2"},
      {0x007f8000, 0x0080, "max subnormal + half a step carries into min normal"},
      {0x3f808000, 0x3f80, "1 + 2^-8 ties to even 1"},
      {0x3f808001, 0x3f81, "just above 1 + 2^-8"},
      {0x3f818000, 0x3f82, "1 + 3 x 2^-8 ties to even"},
      {0x3fff8000, 0x4000, "2 - 2^-8 carries into the exponent"},
      {0xbfff8000, 0xc000, "and so does its negative"},
      {0x00000001, 0x0000, "fp32 min subnormal underflows"},
      {0x80000001, 0x8000, "and keeps its sign"},
      {0x00000000, 0x0000, "+0"},
      {0x80000000, 0x8000, "-0"},
      {0x7f800000, 0x7f80, "+Inf"},
      {0xff800000, 0xff80, "-Inf"},
      {0x7fc00000, 0x7fc0, "quiet NaN"},
      {0xffe00000, 0xffe0, "negative NaN keeps its top payload bits"},
      {0x7f800001, 0x7fc0, "signalling NaN with only low payload stays NaN"},
      {0x7fa00000, 0x7fe0, "signalling NaN becomes quiet, payload kept"},
  };
  for (const EncodeCase& c : enc) {
    EXPECT_EQ(f32_to_bf16(f32_from_bits(c.f32)), c.want) << c.what;
  }
  const DecodeCase dec[] = {
      {0x7f7f, 0x7f7f0000, "max finite"},    {0x0080, 0x00800000, "min normal"},
      {0x0001, 0x00010000, "min subnormal"}, {0x8000, 0x80000000, "-0"},
      {0xff80, 0xff800000, "-Inf"},          {0x7f81, 0x7fc10000, "signalling NaN made quiet"},
  };
  for (const DecodeCase& c : dec) {
    EXPECT_EQ(f32_bits(bf16_to_f32(c.h)), c.want_f32) << c.what;
  }
}

// With bias 31: field e, mantissa m is (1 + m/512) x 2^(e-31); Inf is 0x7e00.
TEST(Cb16, EdgeCasesBias31) {
  const EncodeCase enc[] = {
      {0x4f7fc000, 0x7dff, "max finite, 2^32 - 2^22"},
      {0x4f7fdfff, 0x7dff, "just below the overflow threshold"},
      {0x4f7fe000, 0x7e00, "the overflow threshold 2^32 - 2^21 ties up to Inf"},
      {0x4f800000, 0x7e00, "2^32"},
      {0x30800000, 0x0200, "2^-30, min normal"},
      {0x2c000000, 0x0001, "2^-39, min subnormal"},
      {0x2b800000, 0x0000, "2^-40 ties to even zero"},
      {0x2b800001, 0x0001, "just above 2^-40"},
      {0x2c400000, 0x0002, "1.5 x min subnormal ties to even 2"},
      {0x307fc000, 0x0200, "max subnormal + half a step carries into min normal"},
      {0x3f800000, 0x3e00, "1.0"},
      {0x3f802000, 0x3e00, "1 + 2^-10 ties to even 1"},
      {0x3f802001, 0x3e01, "just above 1 + 2^-10"},
      {0x3f806000, 0x3e02, "1 + 3 x 2^-10 ties to even"},
      {0x3fffe000, 0x4000, "2 - 2^-10 carries into the exponent"},
      {0xbfffe000, 0xc000, "and so does its negative"},
      {0x00000001, 0x0000, "fp32 min subnormal underflows"},
      {0x807fffff, 0x8000, "fp32 max subnormal underflows, keeping its sign"},
      {0x00000000, 0x0000, "+0"},
      {0x80000000, 0x8000, "-0"},
      {0x7f800000, 0x7e00, "+Inf"},
      {0xff800000, 0xfe00, "-Inf"},
      {0x7fc00000, 0x7f00, "quiet NaN"},
      {0xffe00000, 0xff80, "negative NaN keeps its top payload bits"},
      {0x7f800001, 0x7f00, "signalling NaN with only low payload stays NaN"},
  };
  for (const EncodeCase& c : enc) {
    EXPECT_EQ(f32_to_cb16(f32_from_bits(c.f32), 31), c.want) << c.what;
  }
  const DecodeCase dec[] = {
      {0x7dff, 0x4f7fc000, "max finite"},    {0x0200, 0x30800000, "min normal"},
      {0x0001, 0x2c000000, "min subnormal"}, {0x01ff, 0x307f8000, "max subnormal"},
      {0x3e00, 0x3f800000, "1.0"},           {0x8000, 0x80000000, "-0"},
      {0xfe00, 0xff800000, "-Inf"},          {0x7e01, 0x7fc04000, "signalling NaN made quiet"},
  };
  for (const DecodeCase& c : dec) {
    EXPECT_EQ(f32_bits(cb16_to_f32(c.h, 31)), c.want_f32) << c.what;
  }
}

// The bias moves the range: max finite (2 - 2^-9) x 2^(62-bias), min subnormal 2^(-8-bias).
TEST(Cb16, RangeFollowsBias) {
  EXPECT_EQ(f32_bits(cb16_to_f32(0x7dff, 15)), 0x577fc000u);  // (2 - 2^-9) x 2^47
  EXPECT_EQ(f32_bits(cb16_to_f32(0x0001, 15)), 0x34000000u);  // 2^-23
  EXPECT_EQ(f32_bits(cb16_to_f32(0x7dff, 47)), 0x477fc000u);  // 65472
  EXPECT_EQ(f32_bits(cb16_to_f32(0x0001, 47)), 0x24000000u);  // 2^-55
  EXPECT_EQ(f32_to_cb16(65472.0f, 47), 0x7dff);
  EXPECT_EQ(f32_to_cb16(65504.0f, 47), 0x7e00);  // the bias-47 overflow threshold
  EXPECT_EQ(f32_to_cb16(std::nextafter(65504.0f, 0.0f), 47), 0x7dff);
  EXPECT_EQ(f32_bits(cb16_to_f32(0x3e00, kCb16DefaultBias)), f32_bits(1.0f));
}

// The reason for the valid range: at both ends every value is exact in fp32, and as a normal.
TEST(Cb16, EveryValidBiasRoundTripsThroughFp32Normals) {
  int bad = 0;
  for (int bias = kCb16MinBias; bias <= kCb16MaxBias; ++bias) {
    const Ref ref = ref_cb16(bias);
    for (uint32_t h = 0; h <= 0xffff; ++h) {
      if (ref.is_nan(h)) continue;
      const float x = cb16_to_f32(uint16_t(h), bias);
      const bool finite_nonzero = (h & 0x7fff) != 0 && (h & 0x7fff) < 0x7e00;
      const bool ok = f32_to_cb16(x, bias) == h && static_cast<double>(x) == ref.decode(h) &&
                      (!finite_nonzero || std::isnormal(x));
      if (!ok && ++bad <= kMaxReported) ADD_FAILURE() << "bias " << bias << " " << hex(h);
    }
  }
  EXPECT_EQ(bad, 0);
}

TEST(Cb16, BiasValidity) {
  EXPECT_TRUE(cb16_bias_valid(kCb16DefaultBias));
  EXPECT_TRUE(cb16_bias_valid(1));
  EXPECT_TRUE(cb16_bias_valid(62));
  for (int bias : {INT_MIN, -1, 0, 63, 64, 127, INT_MAX}) {
    EXPECT_FALSE(cb16_bias_valid(bias)) << bias;
  }
}

// ----- names and runtime dispatch -----

TEST(NumFormat, NamesParseBack) {
  for (NumFormat f : {NumFormat::kF32, NumFormat::kF16, NumFormat::kCB16, NumFormat::kBF16}) {
    NumFormat parsed = NumFormat::kF32;
    ASSERT_TRUE(parse_format(format_name(f), &parsed)) << format_name(f);
    EXPECT_EQ(parsed, f);
  }
  EXPECT_STREQ(format_name(NumFormat::kCB16), "cb16");
}

TEST(NumFormat, ParseRejectsUnknownNames) {
  for (const char* s : {"", "FP32", "Bf16", "fp8", "f16", "float", "fp16 ", " cb16", "cb16x"}) {
    NumFormat f = NumFormat::kBF16;
    EXPECT_FALSE(parse_format(s, &f)) << '"' << s << '"';
    EXPECT_EQ(f, NumFormat::kBF16) << "output written on failure";
  }
}

TEST(NumFormat, DispatchMatchesTheNamedConversions) {
  const int bias = 40;
  for (uint32_t h = 0; h <= 0xffff; h += 7) {
    const uint16_t h16 = uint16_t(h);
    const uint32_t junk = 0xa5a50000u | h;  // upper bits must be ignored
    EXPECT_EQ(f32_bits(to_f32(NumFormat::kF16, junk, bias)), f32_bits(f16_to_f32(h16)));
    EXPECT_EQ(f32_bits(to_f32(NumFormat::kBF16, junk, bias)), f32_bits(bf16_to_f32(h16)));
    EXPECT_EQ(f32_bits(to_f32(NumFormat::kCB16, junk, bias)), f32_bits(cb16_to_f32(h16, bias)));
  }
  for (size_t i = 0; i < strided_inputs().size(); i += 101) {
    const float x = strided_inputs()[i];
    EXPECT_EQ(from_f32(NumFormat::kF16, x, bias), f32_to_f16(x));
    EXPECT_EQ(from_f32(NumFormat::kBF16, x, bias), f32_to_bf16(x));
    EXPECT_EQ(from_f32(NumFormat::kCB16, x, bias), f32_to_cb16(x, bias));
  }
}

TEST(NumFormat, Fp32PassesBitsThrough) {
  for (uint32_t u : {0x00000000u, 0x80000000u, 0x3f800000u, 0x00000001u, 0x7f7fffffu, 0xff800000u,
                     0x7fc12345u}) {
    EXPECT_EQ(f32_bits(to_f32(NumFormat::kF32, u, 0)), u) << hex(u);
    EXPECT_EQ(from_f32(NumFormat::kF32, f32_from_bits(u), 0), u) << hex(u);
  }
}

}  // namespace
}  // namespace wafersim
