// The core's vector ops: operand checks at start, and one step per cycle under the datapath
// rate, SRAM port and bank limits, and fabric queue state (docs/core.md).
#include <algorithm>
#include <cmath>
#include <cstring>

#include "hw/pe_core.h"
#include "hw/pe_core_util.h"
#include "hw/vector_math.h"

namespace wafersim {

using namespace core_detail;

namespace {

// Banks touched by `words` consecutive 16-bit words from byte address `addr`.
inline uint64_t bank_span(uint32_t addr, uint32_t words, int nb) {
  const uint64_t full = nb >= 64 ? ~uint64_t{0} : (uint64_t{1} << nb) - 1;
  if (words >= static_cast<uint32_t>(nb)) return full;
  const uint64_t m = (uint64_t{1} << words) - 1;
  // (The default 8 banks, and any power of two, take a mask instead of a division.)
  const uint32_t w = addr >> 1, unb = static_cast<uint32_t>(nb);
  const uint32_t r = (unb & (unb - 1)) == 0 ? w & (unb - 1) : w % unb;
  // Rotated left by r within nb bits, without a branch on r (0 <= r < nb <= 64).
  return ((m << r) | ((m >> 1) >> (static_cast<uint32_t>(nb) - r - 1))) & full;
}

inline uint32_t mem_addr(uint32_t base, int32_t stride, uint32_t i, int bytes) {
  return base + static_cast<uint32_t>(static_cast<int64_t>(i) * stride * bytes);
}

// One element of `bytes` (2 or 4) from SRAM, zero-extended.
inline uint32_t read_elem(const uint8_t* p, int bytes) {
  if (bytes == 4) {
    uint32_t w;
    std::memcpy(&w, p, 4);
    return w;
  }
  uint16_t h;
  std::memcpy(&h, p, 2);
  return h;
}

inline float widen(NumFormat f, uint32_t raw, int bias) { return f == NumFormat::kF32 ? f32_from_bits(raw) : to_f32(f, raw, bias); }
inline uint32_t narrow(NumFormat f, float v, int bias) { return f == NumFormat::kF32 ? f32_bits(v) : from_f32(f, v, bias); }

}  // namespace

bool PeCore::start_vector(uint64_t now, const Instr& in, VecOp& op) {
  const VecShape sh = shape(in.op);
  op = VecOp{};
  op.in = in;
  op.nsrc = 0;
  const bool sum = in.op == Op::kVsum;
  if (!sum) op.dst = m_dsd[in.reg[0]];
  for (int k = 0; k < sh.nsrc; ++k) op.src[op.nsrc++] = m_dsd[in.reg[sum ? 1 : 1 + k]];
  if (sh.dst_src) op.src[op.nsrc++] = op.dst;
  if (sh.scalar) op.scalar = f32_from_bits(m_gpr[in.reg[in.op == Op::kVfill ? 1 : in.op == Op::kVfmacs ? 3 : 2]]);
  op.total = sum ? op.src[0].len : op.dst.len;
  op.alu = sh.alu;
  switch (in.op) {
    case Op::kVfmac: case Op::kVaxpy: case Op::kVfmacs:
      op.rate = !is16(in.fmt) && !is16(in.fmt2) ? m_cfg.fmac_fp32 : is16(in.fmt) && is16(in.fmt2) ? m_cfg.fmac_16 : m_cfg.fmac_mixed;
      break;
    case Op::kVexp: case Op::kVrecip: case Op::kVlog: op.rate = m_cfg.special; break;
    case Op::kVmul: case Op::kVmuls: op.rate = is16(in.fmt) && is16(in.fmt2) ? m_cfg.add_16 : m_cfg.mul_fp32; break;
    default: op.rate = is16(in.fmt) && is16(in.fmt2) ? m_cfg.add_16 : m_cfg.add_fp32;
  }
  const int dbytes = elem_bytes(in.fmt2);
  auto src_bytes = [&](int k) { return elem_bytes(src_format(in, k)); };
  for (int k = 0; k < op.nsrc; ++k) {
    const Dsd& s = op.src[k];
    if (s.kind == kNoDsd) {
      fault(now, std::string(op_info(in.op).mnemonic) + ": source descriptor was never set");
      return false;
    }
    if (s.kind == kFoutDsd) {
      fault(now, std::string(op_info(in.op).mnemonic) + ": a fabric output descriptor cannot be a source");
      return false;
    }
    if (s.kind == kMemDsd && (s.len < op.total || !mem_range_ok(s, 0, op.total, src_bytes(k)))) {
      fault(now, std::string(op_info(in.op).mnemonic) + ": source descriptor (base " + std::to_string(s.base) +
                     ", length " + std::to_string(s.len) + ", stride " + std::to_string(s.stride) +
                     ") is shorter than the operation, misaligned or outside SRAM");
      return false;
    }
  }
  if (!sum) {
    const Dsd& d = op.dst;
    if (d.kind == kNoDsd || d.kind == kFinDsd) {
      fault(now, std::string(op_info(in.op).mnemonic) + ": destination must be a memory or fabric output descriptor");
      return false;
    }
    if (d.kind == kMemDsd) {
      if (!mem_range_ok(d, 0, op.total, dbytes)) {
        fault(now, std::string(op_info(in.op).mnemonic) + ": destination descriptor (base " + std::to_string(d.base) +
                       ", length " + std::to_string(d.len) + ") is misaligned or outside SRAM");
        return false;
      }
      int64_t lo = 0, hi = 0;
      if (op.total) dsd_span(d, 0, op.total, dbytes, &lo, &hi);
      if (op.total && lo < static_cast<int64_t>(m_code_bytes)) {
        fault(now, std::string(op_info(in.op).mnemonic) + ": destination would overwrite code");
        return false;
      }
    }
  }
  op.sum = sum;
  op.reads = 0;
  op.one_per_step = false;
  for (int k = 0; k < op.nsrc; ++k) {
    op.sfmt[k] = src_format(in, k);
    op.sbytes[k] = static_cast<uint8_t>(src_bytes(k));
    if (op.src[k].kind == kMemDsd) {
      ++op.reads;
      if (op.src[k].stride != 1 || op.src[k].rowlen) op.one_per_step = true;
    } else {
      op.one_per_step = true;
    }
  }
  op.dbytes = static_cast<uint8_t>(dbytes);
  op.writes = !sum && op.dst.kind == kMemDsd ? 1 : 0;
  if (!sum && (op.dst.kind != kMemDsd || op.dst.stride != 1 || op.dst.rowlen)) op.one_per_step = true;
  op.port_cycles = static_cast<uint8_t>(std::max(1, (op.reads + m_cfg.read_ports - 1) / m_cfg.read_ports));
  op.mem_only = op.reads == op.nsrc && (sum || op.dst.kind == kMemDsd);
  op.f32 = sum || in.fmt2 == NumFormat::kF32;
  for (int k = 0; k < op.nsrc; ++k) op.f32 = op.f32 && op.sfmt[k] == NumFormat::kF32;
  // When every memory source advances by the same bytes per element, their banks keep their
  // relative places: a full step's self-conflict is the same for the whole op.
  op.conflict_known = false;
  if (op.mem_only && op.reads >= 2 && op.reads <= m_cfg.read_ports) {
    bool same = true;
    for (int k = 1; k < op.nsrc; ++k) same = same && op.src[k].stride * op.sbytes[k] == op.src[0].stride * op.sbytes[0];
    for (int k = 0; k < op.nsrc; ++k) same = same && op.src[k].rowlen == 0;  // two-dimensional: not one fixed advance
    if (same) {
      const uint32_t kk = op.one_per_step ? 1u : static_cast<uint32_t>(op.rate);
      uint64_t banks = 0;
      for (int k = 0; k < op.nsrc; ++k) {
        const uint64_t mine = bank_span(op.src[k].base, kk * op.sbytes[k] / 2u, m_cfg.sram_banks);
        if (mine & banks) op.conflict_full = true;
        banks |= mine;
      }
      op.conflict_known = true;
    }
  }
  op.active = op.total > 0;
  op.next_step = op.total > 0 ? now : now + 1;  // an empty op completes at once
  return true;
}


// The arithmetic of one element; vsum accumulates into op.acc.
inline float PeCore::apply(VecOp& op, const float* v, bool* raw_copy) {
  switch (op.in.op) {
    case Op::kVmov: *raw_copy = true; return 0;
    case Op::kVsum: op.acc += v[0]; return 0;
    default: return vector_element(op.in.op, v, op.scalar);
  }
}

bool PeCore::elements_f32(VecOp& op, uint32_t k) {
  // The runs below step by a fixed stride: no two-dimensional operand (rowlen).
  if (op.sum || op.in.fmt2 != NumFormat::kF32 || op.dst.rowlen) return false;
  for (int s = 0; s < op.nsrc; ++s) {
    if (op.sfmt[s] != NumFormat::kF32 || op.src[s].rowlen) return false;
  }
  uint8_t* const sram = m_sram.get();
  const uint32_t i0 = op.done;
  auto at = [&](const Dsd& d) { return sram + mem_addr(d.base, d.stride, i0, 4); };
  auto step = [](const Dsd& d) { return static_cast<std::ptrdiff_t>(d.stride) * 4; };
  auto ld = [](const uint8_t* p) {
    float v;
    std::memcpy(&v, p, 4);
    return v;
  };
  uint8_t* pd = at(op.dst);
  const std::ptrdiff_t sd = step(op.dst);
  const uint8_t* p0 = op.nsrc > 0 ? at(op.src[0]) : nullptr;
  const uint8_t* p1 = op.nsrc > 1 ? at(op.src[1]) : nullptr;
  const std::ptrdiff_t s0 = op.nsrc > 0 ? step(op.src[0]) : 0, s1 = op.nsrc > 1 ? step(op.src[1]) : 0;
  const float sc = op.scalar;
  // Element by element in order, as the general loop (an operand may overlap the destination).
  switch (op.in.op) {
    case Op::kVaxpy:
      for (uint32_t e = 0; e < k; ++e, p0 += s0, p1 += s1, pd += sd) {
        const float r = std::fma(sc, ld(p0), ld(p1));
        std::memcpy(pd, &r, 4);
      }
      return true;
    case Op::kVadd:
      for (uint32_t e = 0; e < k; ++e, p0 += s0, p1 += s1, pd += sd) {
        const float r = ld(p0) + ld(p1);
        std::memcpy(pd, &r, 4);
      }
      return true;
    case Op::kVmul:
      for (uint32_t e = 0; e < k; ++e, p0 += s0, p1 += s1, pd += sd) {
        const float r = ld(p0) * ld(p1);
        std::memcpy(pd, &r, 4);
      }
      return true;
    case Op::kVmuls:
      for (uint32_t e = 0; e < k; ++e, p0 += s0, pd += sd) {
        const float r = ld(p0) * sc;
        std::memcpy(pd, &r, 4);
      }
      return true;
    case Op::kVmov:
      for (uint32_t e = 0; e < k; ++e, p0 += s0, pd += sd) std::memmove(pd, p0, 4);
      return true;
    default: return false;
  }
}

inline void PeCore::element_f32(VecOp& op) {
  uint8_t* const sram = m_sram.get();
  const uint32_t i = op.done;
  uint32_t raw[3] = {0, 0, 0};
  float v[3] = {0, 0, 0};
  for (int s = 0; s < op.nsrc; ++s) {
    const Dsd& d = op.src[s];
    if (d.kind == kMemDsd) {
      std::memcpy(&raw[s], sram + dsd_addr(d, i, 4), 4);
    } else {
      raw[s] = take_input(m_inq[d.queue]);
    }
    v[s] = f32_from_bits(raw[s]);
  }
  bool raw_copy = false;
  const float r = apply(op, v, &raw_copy);
  if (op.sum) return;
  const uint32_t out = raw_copy ? raw[0] : f32_bits(r);
  if (op.dst.kind == kMemDsd) {
    std::memcpy(sram + dsd_addr(op.dst, i, 4), &out, 4);
  } else {
    put_output(op.dst.queue, out);
  }
}

// The data movement and arithmetic of one step of k elements, then the op's progress. kMemOnly:
// every operand is in SRAM (run_solo), so the fabric branches drop out.
template <bool kMemOnly>
void PeCore::finish_step(uint64_t now, VecOp& op, uint32_t k, bool self_conflict) {
  const int bias = m_cfg.cb16_bias;
  const NumFormat dfmt = op.in.fmt2;
  uint8_t* const sram = m_sram.get();
  bool fast = kMemOnly && k > 1 && elements_f32(op, k);  // whole runs of run_solo
  if (!kMemOnly && k == 1 && op.f32) {
    element_f32(op);
    fast = true;
  }
  for (uint32_t e = 0; !fast && e < k; ++e) {
    const uint32_t i = op.done + e;
    uint32_t raw[3] = {0, 0, 0};
    float v[3] = {0, 0, 0};
    for (int s = 0; s < op.nsrc; ++s) {
      const Dsd& d = op.src[s];
      const int bytes = op.sbytes[s];
      if (kMemOnly || d.kind == kMemDsd) {
        raw[s] = read_elem(sram + dsd_addr(d, i, bytes), bytes);
      } else {
        raw[s] = take_input(m_inq[d.queue]);
        if (bytes == 2) raw[s] &= 0xffff;
      }
      v[s] = widen(op.sfmt[s], raw[s], bias);
    }
    bool raw_copy = false;
    const float r = apply(op, v, &raw_copy);
    if (op.sum) continue;
    const uint32_t out = raw_copy ? raw[0] : narrow(dfmt, r, bias);
    if (kMemOnly || op.dst.kind == kMemDsd) {
      std::memcpy(sram + dsd_addr(op.dst, i, op.dbytes), &out, op.dbytes);
    } else {
      put_output(op.dst.queue, out);
    }
  }
  op.done += k;
  m_stats.vector_elems += k;
  op.next_step = now + static_cast<uint64_t>(op.port_cycles + (self_conflict ? 1 : 0));
  if (op.done == op.total) op.active = false;  // completes when next_step arrives
}

template void PeCore::finish_step<true>(uint64_t, VecOp&, uint32_t, bool);  // catch_up's batches

// The bank self-conflict of the step over elements [i, i + k) of a solo op (every operand in
// SRAM, the ports and banks to itself): only its own reads can collide.
bool PeCore::solo_conflict(const VecOp& op, uint32_t i, uint32_t k) const {
  const bool full_step = op.one_per_step || k == static_cast<uint32_t>(op.rate);
  if (op.conflict_known && full_step) return op.conflict_full;
  if (op.reads < 2 || op.reads > m_cfg.read_ports) return false;
  uint64_t banks = 0;
  for (int s = 0; s < op.nsrc; ++s) {
    const Dsd& d = op.src[s];
    const uint64_t mine = bank_span(dsd_addr(d, i, op.sbytes[s]), k * op.sbytes[s] / 2u, m_cfg.sram_banks);
    if (mine & banks) return true;
    banks |= mine;
  }
  return false;
}

// Whether the source addresses of elements op.done .. op.total - 1 stay in [0, 2^32) (mem_addr
// does not wrap): then each source's word index grows by a fixed amount per step, and so a full
// step's banks, and its self-conflict, repeat every sram_banks steps.
bool PeCore::solo_banks_periodic(const VecOp& op) const {
  for (int s = 0; s < op.nsrc; ++s) {
    const Dsd& d = op.src[s];
    if (d.rowlen) return false;
    const int64_t step = int64_t{d.stride} * op.sbytes[s];
    const int64_t first = int64_t{d.base} + int64_t{op.done} * step, last = int64_t{d.base} + int64_t{op.total - 1} * step;
    if (std::min(first, last) < 0 || std::max(first, last) > int64_t{UINT32_MAX}) return false;
  }
  return true;
}

uint64_t PeCore::solo_cycles(const VecOp& op) const {
  const uint32_t per = op.one_per_step ? 1u : static_cast<uint32_t>(op.rate);
  const uint32_t left = op.total - op.done;
  const uint32_t steps = left / per;  // full steps
  const uint32_t nb = static_cast<uint32_t>(m_cfg.sram_banks);
  uint64_t cycles = 0;
  uint32_t i = op.done;
  if (op.conflict_known || op.reads < 2 || op.reads > m_cfg.read_ports) {
    cycles = uint64_t{steps} * (op.port_cycles + (op.conflict_known && op.conflict_full ? 1u : 0u));
    i += steps * per;
  } else if (steps > nb && solo_banks_periodic(op)) {
    // The conflicts of the first sram_banks full steps are those of every later period.
    uint32_t in_period = 0, in_rest = 0;
    for (uint32_t j = 0; j < nb; ++j) {
      const bool c = solo_conflict(op, i + j * per, per);
      in_period += c;
      if (j < steps % nb) in_rest += c;
    }
    cycles = uint64_t{steps} * op.port_cycles + uint64_t{steps / nb} * in_period + in_rest;
    i += steps * per;
  }
  while (i < op.total) {
    const uint32_t k = std::min(per, op.total - i);
    cycles += op.port_cycles + (solo_conflict(op, i, k) ? 1u : 0u);
    i += k;
  }
  return cycles;
}

void PeCore::run_solo(uint64_t now, VecOp& op) {
  // A solo op's step takes port_cycles, plus one when its own reads collide in a bank, whatever
  // else happens on the wafer; so all its steps run here at once: first their timing (step by
  // step only where the conflict depends on the addresses), then the data, in element order as
  // step after step would do it.
  const uint64_t t = std::max(now, op.next_step);
  const uint64_t cycles = solo_cycles(op);
  finish_step<true>(t, op, op.total - op.done, false);
  op.next_step = t + cycles;
}

int PeCore::step_vector(uint64_t now, VecOp& op, Resources& res) {
  if (!op.active) return 0;
  if (now < op.next_step) return 1;  // inside a multi-cycle step
  const uint32_t k = op.one_per_step ? 1u : std::min<uint32_t>(static_cast<uint32_t>(op.rate), op.total - op.done);
  for (int s = 0; s < op.nsrc; ++s) {
    const Dsd& d = op.src[s];
    if (d.kind == kMemDsd) continue;
    const Queue& q = m_inq[d.queue];
    if (!q.count || q.slot[q.head].ready > now) return 0;  // waits for a wavelet
  }
  if (!op.sum && op.dst.kind != kMemDsd && m_outq[op.dst.queue].count == m_outq[op.dst.queue].depth) {
    return 0;  // output queue full
  }
  // Sources with one fabric queue read twice (same queue in two operands) are not supported.
  const int reads = op.reads, writes = op.writes;
  if (reads > res.reads && !(reads > m_cfg.read_ports && res.reads == m_cfg.read_ports)) return 0;
  if (writes > res.writes) return 0;
  if (op.alu && !res.alu) return 0;
  uint64_t banks = 0;
  bool self_conflict = false;
  const int nb = m_cfg.sram_banks;
  for (int s = 0; s < op.nsrc; ++s) {
    const Dsd& d = op.src[s];
    if (d.kind != kMemDsd) continue;
    // One element, or k consecutive ones (stride 1): consecutive 16-bit words either way.
    const uint64_t mine = bank_span(dsd_addr(d, op.done, op.sbytes[s]), k * op.sbytes[s] / 2u, nb);
    // Reads spread over several port cycles are assumed to be ordered around conflicts.
    if ((mine & banks) && reads <= m_cfg.read_ports) self_conflict = true;
    banks |= mine;
  }
  if (banks & res.banks) return 0;  // another thread reads those banks this cycle
  res.reads = std::max(0, res.reads - reads);
  res.writes -= writes;
  if (op.alu) res.alu = false;
  res.banks |= banks;

  // An op with every operand in SRAM takes run_solo's element loop (stepped here because a
  // microthread is busy).
  if (op.mem_only) finish_step<true>(now, op, k, self_conflict);
  else finish_step<false>(now, op, k, self_conflict);
  return 1;
}

}  // namespace wafersim
