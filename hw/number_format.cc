#include "hw/number_format.h"

#include <cassert>
#include <cstring>

namespace wafersim {
namespace {

int msb_index(uint64_t v) { return 63 - __builtin_clzll(v); }

// A binary floating-point layout with IEEE conventions: the sign on top, an all-zero exponent
// field for zero and subnormals, an all-ones field for Inf and NaN. Only the bias varies at run
// time, because cb16 needs it configurable; the widths stay compile-time so each format's code
// folds to shifts and masks.
template <int kExpBits, int kManBits>
struct Layout {
  static_assert(kExpBits >= 2 && kManBits >= 1 && 1 + kExpBits + kManBits <= 32, "layout");
  static constexpr int kSignShift = kExpBits + kManBits;
  static constexpr uint32_t kMaxField = (1u << kExpBits) - 1;
  static constexpr uint32_t kManMask = (1u << kManBits) - 1;
  static constexpr uint32_t kInf = kMaxField << kManBits;
  static constexpr uint32_t kQuietBit = 1u << (kManBits - 1);

  // The encoding nearest to sig * 2^exp2 (ties to even), with `sign` already in place. The one
  // rounding routine serves both directions, so narrowing and widening cannot disagree on
  // subnormals or carries. Requires 0 < sig < 2^62.
  static uint32_t round_pack(uint32_t sign, uint64_t sig, int exp2, int bias) {
    const int top = msb_index(sig);
    const int field = exp2 + top + bias;  // exponent field if the result is normal
    if (field >= static_cast<int>(kMaxField)) return sign | kInf;
    // Below the normal range the step size stops shrinking: it stays that of field 1.
    const int step_field = field < 1 ? 1 : field;
    const int shift = step_field - bias - kManBits - exp2;  // sig bits below the result's step
    uint64_t q;
    if (shift <= 0) {
      q = sig << -shift;
    } else if (shift > top + 1) {
      q = 0;  // less than half the smallest step, so it rounds to zero whatever the tie rule
    } else {
      q = sig >> shift;
      const uint64_t rem = sig & ((uint64_t{1} << shift) - 1);
      const uint64_t half = uint64_t{1} << (shift - 1);
      if (rem > half || (rem == half && (q & 1))) ++q;
    }
    // q holds the implicit bit for normals, so adding it to field-1 sets the field; a carry out
    // of the mantissa (subnormal to normal, or past the largest finite value, which lands
    // exactly on the Inf pattern) increments the field for free.
    return sign | ((static_cast<uint32_t>(step_field - 1) << kManBits) + static_cast<uint32_t>(q));
  }
};

using F32 = Layout<8, 23>;
constexpr int kF32Bias = 127;

// fp32 -> a narrower layout.
template <int kExpBits, int kManBits>
uint32_t narrow(float x, int bias) {
  using L = Layout<kExpBits, kManBits>;
  static_assert(kManBits < 23, "narrowing only");
  const uint32_t u = f32_bits(x);
  const uint32_t sign = (u >> 31) << L::kSignShift;
  const uint32_t field = (u >> 23) & F32::kMaxField;
  const uint32_t man = u & F32::kManMask;
  if (field == F32::kMaxField) {
    if (man == 0) return sign | L::kInf;
    // The quiet bit keeps the mantissa non-zero, so a NaN whose payload sits only in the
    // discarded low bits cannot turn into Inf.
    return sign | L::kInf | L::kQuietBit | (man >> (23 - kManBits));
  }
  if (field == 0 && man == 0) return sign;
  const uint64_t sig = field ? (man | (1u << 23)) : man;
  const int exp2 = static_cast<int>(field ? field : 1) - kF32Bias - 23;
  return L::round_pack(sign, sig, exp2, bias);
}

// A narrower layout -> fp32. Exact whenever every value of the layout fits fp32, which holds for
// fp16, bf16 and cb16 with a valid bias; otherwise it would round like narrow().
template <int kExpBits, int kManBits>
float widen(uint32_t h, int bias) {
  using L = Layout<kExpBits, kManBits>;
  const uint32_t sign = ((h >> L::kSignShift) & 1) << 31;
  const uint32_t field = (h >> kManBits) & L::kMaxField;
  const uint32_t man = h & L::kManMask;
  if (field == L::kMaxField) {
    if (man == 0) return f32_from_bits(sign | F32::kInf);
    return f32_from_bits(sign | F32::kInf | F32::kQuietBit | (man << (23 - kManBits)));
  }
  if (field == 0 && man == 0) return f32_from_bits(sign);
  const uint64_t sig = field ? (man | (1u << kManBits)) : man;
  const int exp2 = static_cast<int>(field ? field : 1) - bias - kManBits;
  return f32_from_bits(F32::round_pack(sign, sig, exp2, kF32Bias));
}

constexpr int kF16Bias = 15;
constexpr int kBF16Bias = 127;

}  // namespace

const char* format_name(NumFormat f) {
  switch (f) {
    case NumFormat::kF32:
      return "fp32";
    case NumFormat::kF16:
      return "fp16";
    case NumFormat::kCB16:
      return "cb16";
    case NumFormat::kBF16:
      return "bf16";
  }
  return "?";
}

bool parse_format(const std::string& s, NumFormat* f) {
  for (NumFormat c : {NumFormat::kF32, NumFormat::kF16, NumFormat::kCB16, NumFormat::kBF16}) {
    if (s == format_name(c)) {
      *f = c;
      return true;
    }
  }
  return false;
}

uint16_t f32_to_f16(float x) { return static_cast<uint16_t>(narrow<5, 10>(x, kF16Bias)); }
float f16_to_f32(uint16_t h) { return widen<5, 10>(h, kF16Bias); }

uint16_t f32_to_bf16(float x) { return static_cast<uint16_t>(narrow<8, 7>(x, kBF16Bias)); }
float bf16_to_f32(uint16_t h) { return widen<8, 7>(h, kBF16Bias); }

bool cb16_bias_valid(int bias) { return bias >= kCb16MinBias && bias <= kCb16MaxBias; }

uint16_t f32_to_cb16(float x, int bias) {
  assert(cb16_bias_valid(bias));
  return static_cast<uint16_t>(narrow<6, 9>(x, bias));
}

float cb16_to_f32(uint16_t h, int bias) {
  assert(cb16_bias_valid(bias));
  return widen<6, 9>(h, bias);
}

float to_f32(NumFormat f, uint32_t bits, int cb16_bias) {
  const uint16_t h = static_cast<uint16_t>(bits);
  switch (f) {
    case NumFormat::kF32:
      return f32_from_bits(bits);
    case NumFormat::kF16:
      return f16_to_f32(h);
    case NumFormat::kCB16:
      return cb16_to_f32(h, cb16_bias);
    case NumFormat::kBF16:
      return bf16_to_f32(h);
  }
  return f32_from_bits(bits);
}

uint32_t from_f32(NumFormat f, float x, int cb16_bias) {
  switch (f) {
    case NumFormat::kF32:
      return f32_bits(x);
    case NumFormat::kF16:
      return f32_to_f16(x);
    case NumFormat::kCB16:
      return f32_to_cb16(x, cb16_bias);
    case NumFormat::kBF16:
      return f32_to_bf16(x);
  }
  return f32_bits(x);
}

}  // namespace wafersim
