// The PE's number formats (fp32, fp16, cb16, bf16): names and bit-exact conversions to/from fp32.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>

namespace wafersim {

// fp32 is the accumulation type; every 16-bit format is widened to it before arithmetic and
// narrowed from it afterwards, so these conversions fix the model's numerics bit for bit.
//
//   const uint16_t h = f32_to_cb16(0.1f, kCb16DefaultBias);   // round to nearest even
//   const float x = cb16_to_f32(h, kCb16DefaultBias);          // exact: every cb16 fits fp32
//   uint32_t bits = from_f32(NumFormat::kBF16, 1.5f, 0);       // 0x3fc0; the bias is unused
//
// All narrowing conversions round to nearest, ties to even, using integer arithmetic on the
// fp32 bit pattern, so results do not depend on the host FPU or its rounding mode. Values at or
// above the midpoint between a format's largest finite value and the next power of two become
// Inf. A NaN stays a NaN of the same sign: it is made quiet and keeps as many of its top payload
// bits as the destination holds (signalling NaNs therefore do not round-trip bit for bit).
enum class NumFormat : uint8_t { kF32, kF16, kCB16, kBF16 };

// fp32 <-> its bit pattern (registers, wavelet payloads and SRAM words hold the bits).
inline uint32_t f32_bits(float x) {
  uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  return u;
}
inline float f32_from_bits(uint32_t u) {
  float x;
  std::memcpy(&x, &u, sizeof x);
  return x;
}

const char* format_name(NumFormat f);                   // "fp32", "fp16", "cb16", "bf16"
bool parse_format(const std::string& s, NumFormat* f);  // inverse of format_name, exact match

// IEEE binary16: 1 sign, 5 exponent, 10 mantissa bits, bias 15.
uint16_t f32_to_f16(float x);
float f16_to_f32(uint16_t h);

// bfloat16: the top half of an fp32 (1 sign, 8 exponent, 7 mantissa bits, bias 127), but
// rounded rather than truncated, with IEEE subnormals.
uint16_t f32_to_bf16(float x);
float bf16_to_f32(uint16_t h);

// cb16, Cerebras' 16-bit format: 1 sign, 6 exponent, 9 mantissa bits, IEEE-like (exponent field
// 0 holds zero and subnormals, all ones Inf and NaN). Its bias is not published, so it is a
// parameter. A bias is valid if 1.0 is a normal number (its exponent field, equal to the bias,
// lies in 1..62); then every finite cb16 value, from 2^(-8-bias) to about 2^(63-bias), is an
// fp32 normal, so widening is exact and never has to consider fp32's own subnormals or range.
constexpr int kCb16MinBias = 1;
constexpr int kCb16MaxBias = 62;
constexpr int kCb16DefaultBias = 31;  // centres the exponent range on 1.0, like IEEE formats
bool cb16_bias_valid(int bias);

// `bias` must satisfy cb16_bias_valid (asserted).
uint16_t f32_to_cb16(float x, int bias);
float cb16_to_f32(uint16_t h, int bias);

// Dispatch on a runtime format, e.g. a PE's configured operand format. For the 16-bit formats
// only the low 16 bits of `bits` are read and from_f32 returns the pattern zero-extended; fp32
// passes the bit pattern through unchanged. `cb16_bias` is read only for kCB16.
float to_f32(NumFormat f, uint32_t bits, int cb16_bias);
uint32_t from_f32(NumFormat f, float x, int cb16_bias);

}  // namespace wafersim
