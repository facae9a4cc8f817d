// The core's vector ops: operand checks at start, and one step per cycle under the datapath
// rate, SRAM port and bank limits, and fabric queue state (docs/core.md).
#include <algorithm>
#include <cmath>
#include <cstring>

#include "hw/pe_core.h"
#include "hw/pe_core_util.h"

namespace wafersim {

using namespace core_detail;

bool PeCore::start_vector(uint64_t now, const Instr& in, VecOp& op) {
  const VecShape sh = shape(in.op);
  op = VecOp{};
  op.in = in;
  op.nsrc = 0;
  const bool sum = in.op == Op::kVsum;
  if (!sum) op.dst = m_dsd[in.reg[0]];
  for (int k = 0; k < sh.nsrc; ++k) op.src[op.nsrc++] = m_dsd[in.reg[sum ? 1 : 1 + k]];
  if (sh.dst_src) op.src[op.nsrc++] = op.dst;
  if (sh.scalar) op.scalar = f32_from_bits(m_gpr[in.op == Op::kVfill ? in.reg[1] : in.reg[2]]);
  op.total = sum ? op.src[0].len : op.dst.len;
  op.alu = sh.alu;
  switch (in.op) {
    case Op::kVfmac: case Op::kVaxpy:
      op.rate = !is16(in.fmt) && !is16(in.fmt2) ? m_cfg.fmac_fp32 : is16(in.fmt) && is16(in.fmt2) ? m_cfg.fmac_16 : m_cfg.fmac_mixed;
      break;
    case Op::kVexp: case Op::kVrecip: op.rate = m_cfg.special; break;
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
      const int64_t a = d.base, b = static_cast<int64_t>(elem_addr(d, op.total ? op.total - 1 : 0, dbytes));
      if (op.total && std::min(a, b) < m_code_bytes) {
        fault(now, std::string(op_info(in.op).mnemonic) + ": destination would overwrite code");
        return false;
      }
    }
  }
  op.active = op.total > 0;
  op.next_step = op.total > 0 ? now : now + 1;  // an empty op completes at once
  return true;
}

int PeCore::step_vector(uint64_t now, VecOp& op, Resources& res) {
  if (!op.active) return 0;
  if (now < op.next_step) return 1;  // inside a multi-cycle step
  const Instr& in = op.in;
  const bool sum = in.op == Op::kVsum;
  const int dbytes = elem_bytes(in.fmt2);
  auto src_bytes = [&](int k) { return elem_bytes(src_format(in, k)); };
  uint32_t k = std::min<uint32_t>(static_cast<uint32_t>(op.rate), op.total - op.done);
  int reads = 0;
  for (int s = 0; s < op.nsrc; ++s) {
    const Dsd& d = op.src[s];
    if (d.kind == kMemDsd) {
      ++reads;
      if (d.stride != 1) k = 1;
    } else {
      k = 1;
      const Queue& q = m_inq[d.queue];
      if (!q.count || q.ready[q.head] > now) return 0;  // waits for a wavelet
    }
  }
  if (!sum) {
    if (op.dst.kind == kMemDsd) {
      if (op.dst.stride != 1) k = 1;
    } else {
      k = 1;
      if (m_outq[op.dst.queue].count == m_outq[op.dst.queue].depth) return 0;  // output queue full
    }
  }
  // Sources with one fabric queue read twice (same queue in two operands) are not supported.
  const int writes = !sum && op.dst.kind == kMemDsd ? 1 : 0;
  const int cycles_ports = std::max(1, (reads + m_cfg.read_ports - 1) / m_cfg.read_ports);
  if (reads > res.reads && !(reads > m_cfg.read_ports && res.reads == m_cfg.read_ports)) return 0;
  if (writes > res.writes) return 0;
  if (op.alu && !res.alu) return 0;
  uint64_t banks = 0;
  bool self_conflict = false;
  const int nb = m_cfg.sram_banks;
  for (int s = 0; s < op.nsrc; ++s) {
    const Dsd& d = op.src[s];
    if (d.kind != kMemDsd) continue;
    uint64_t mine = 0;
    const int bytes = src_bytes(s);
    for (uint32_t e = 0; e < k; ++e) {
      const uint32_t a = elem_addr(d, op.done + e, bytes);
      for (int w = 0; w < bytes / 2; ++w) mine |= uint64_t{1} << (((a >> 1) + static_cast<uint32_t>(w)) % static_cast<uint32_t>(nb));
    }
    // Reads spread over several port cycles are assumed to be ordered around conflicts.
    if ((mine & banks) && reads <= m_cfg.read_ports) self_conflict = true;
    banks |= mine;
  }
  if (banks & res.banks) return 0;  // another thread reads those banks this cycle
  res.reads = std::max(0, res.reads - reads);
  res.writes -= writes;
  if (op.alu) res.alu = false;
  res.banks |= banks;

  const int bias = m_cfg.cb16_bias;
  for (uint32_t e = 0; e < k; ++e) {
    const uint32_t i = op.done + e;
    uint32_t raw[3] = {0, 0, 0};
    float v[3] = {0, 0, 0};
    for (int s = 0; s < op.nsrc; ++s) {
      const Dsd& d = op.src[s];
      const int bytes = src_bytes(s);
      if (d.kind == kMemDsd) {
        std::memcpy(&raw[s], &m_sram[elem_addr(d, i, bytes)], static_cast<size_t>(bytes));
      } else {
        Queue& q = m_inq[d.queue];
        raw[s] = q.slot[q.head];
        if (bytes == 2) raw[s] &= 0xffff;
        if (++q.head == q.depth) q.head = 0;
        if (q.count-- == q.depth) m_full &= ~(1u << q.color);
        ++m_consumed;
      }
      v[s] = to_f32(src_format(in, s), raw[s], bias);
    }
    float r = 0;
    bool raw_copy = false;
    switch (in.op) {
      case Op::kVmov: raw_copy = true; break;
      case Op::kVadd: r = v[0] + v[1]; break;
      case Op::kVsub: r = v[0] - v[1]; break;
      case Op::kVmul: r = v[0] * v[1]; break;
      case Op::kVmax: r = std::fmax(v[0], v[1]); break;
      case Op::kVfmac: r = std::fma(v[0], v[1], v[2]); break;
      case Op::kVaxpy: r = std::fma(op.scalar, v[0], v[1]); break;
      case Op::kVmuls: r = v[0] * op.scalar; break;
      case Op::kVfill: r = op.scalar; break;
      case Op::kVrelu: r = (v[0] > 0 || std::isnan(v[0])) ? v[0] : 0.0f; break;
      case Op::kVdrelu: r = v[0] > 0 ? v[1] : 0.0f; break;
      case Op::kVexp: r = std::exp(v[0]); break;
      case Op::kVrecip: r = 1.0f / v[0]; break;
      case Op::kVcmpgt: r = v[0] > v[1] ? 1.0f : 0.0f; break;
      case Op::kVsel: r = v[0] != 0 ? v[1] : v[2]; break;
      case Op::kVcvt: r = v[0]; break;
      case Op::kVsum: op.acc += v[0]; break;
      default: break;
    }
    if (sum) continue;
    const uint32_t out = raw_copy ? raw[0] : from_f32(in.fmt2, r, bias);
    if (op.dst.kind == kMemDsd) {
      std::memcpy(&m_sram[elem_addr(op.dst, i, dbytes)], &out, static_cast<size_t>(dbytes));
    } else {
      Queue& q = m_outq[op.dst.queue];
      uint32_t tail = q.head + q.count;
      if (tail >= q.depth) tail -= q.depth;
      q.slot[tail] = out;
      ++q.count;
    }
  }
  op.done += k;
  m_stats.vector_elems += k;
  op.next_step = now + static_cast<uint64_t>(cycles_ports + (self_conflict ? 1 : 0));
  if (op.done == op.total) op.active = false;  // completes when next_step arrives
  return 1;
}

}  // namespace wafersim
