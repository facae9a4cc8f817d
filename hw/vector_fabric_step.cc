// VectorFabric::step_block, the engine's cycle for one block of 16 routers: the only code built
// for this host's processor (-march=native, see CMakeLists.txt). It calls out of this unit for
// everything that would instantiate library code (TrafficAgent::m_log's growth), so that no
// copy of a shared template or inline function compiled here replaces the generic one.
#include "hw/vector_fabric.h"

#include "hw/pe_agent.h"
#include "hw/traffic_agent.h"
#include "hw/vector_fabric_ops.h"
#include "hw/wavelet.h"

namespace wafersim {

// The instruction-set extensions this unit was compiled to use (checked against the processor
// before the engine is chosen: vector_fabric.cc, host_lacks).
const char* const* VectorFabric::step_isa() {
  static const char* const kUsed[] = {
#ifdef __POPCNT__
      "popcnt",
#endif
#ifdef __AVX2__
      "avx2",
#endif
#ifdef __BMI__
      "bmi",
#endif
#ifdef __BMI2__
      "bmi2",
#endif
#ifdef __FMA__
      "fma",
#endif
#ifdef __AVX512F__
      "avx512f",
#endif
#ifdef __AVX512CD__
      "avx512cd",
#endif
#ifdef __AVX512VL__
      "avx512vl",
#endif
#ifdef __AVX512BW__
      "avx512bw",
#endif
#ifdef __AVX512DQ__
      "avx512dq",
#endif
#ifdef __AVX512VBMI__
      "avx512vbmi",
#endif
#ifdef __AVX512VPOPCNTDQ__
      "avx512vpopcntdq",
#endif
#ifdef __AVX512BITALG__
      "avx512bitalg",
#endif
#ifdef __AVX512IFMA__
      "avx512ifma",
#endif
#ifdef __AVX512VNNI__
      "avx512vnni",
#endif
      nullptr};
  return kUsed;
}

void VectorFabric::step_block(size_t block, bool* moved) {
  const size_t b = m_blocks[block];
  const uint32_t agents = m_block_agents[block], endpoints = m_block_endpoints[block];
  const bool ctrl_seen = m_ctrl_seen.load(std::memory_order_relaxed);
  static const V kLaneBit = V{1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768};
  const V emask = nz(splat(endpoints) & kLaneBit);  // ~0 on the lanes of endpoints run here
  const uint64_t now = m_now;
  const int prev = static_cast<int>((now + 1) & 1), cur = static_cast<int>(now & 1);
  const auto colors = static_cast<size_t>(m_colors), depth = static_cast<size_t>(m_depth);
  const ptrdiff_t offset[kNumLinkPorts] = {-static_cast<ptrdiff_t>(m_row), static_cast<ptrdiff_t>(m_row), 1, -1};
  V cnt[3], head[3];
  for (int i = 0; i < 3; ++i) cnt[i] = ld(arr(kC + i) + b), head[i] = ld(arr(kH + i) + b);
  const V lane_index = V{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15} + static_cast<uint32_t>(b);
  auto slot_of = [&](V col, V slot) { return (lane_index * static_cast<uint32_t>(colors) + col) * static_cast<uint32_t>(depth) + slot; };
  auto push = [&](V bit, V col, V payload, V ctrl) {
    V tail = get3(head, col) + get3(cnt, col);
    tail = tail >= static_cast<uint32_t>(m_depth) ? tail - static_cast<uint32_t>(m_depth) : tail;
    const V idx = slot_of(col, tail);
    scatter(m_pay.data(), bit, idx, payload);
    if (ctrl_seen || any(ctrl)) scatter(m_ctrl.data(), bit, idx, ctrl);
    inc3(cnt, bit);
  };
  // Adds one to every color of `carry` in the vertical counters from plane array `first` (the
  // carry stopping early: plane i takes one add in 2^i).
  auto vertical_add = [&](int first, V carry) {
    for (int i = 0; i < 16 && any(carry); ++i) {
      uint32_t* pl = arr(first + i) + b;
      const V v = ld(pl);
      st(pl, v ^ carry);
      carry &= v;
    }
  };
  auto count = [&](int what, V n) {
    uint32_t* p = arr(kCount + what) + b;
    st(p, ld(p) + n);
  };
  // Peaks: the buffers are at their fullest after the arrivals are in (before the pops) or after
  // the agents' injections; both are folded in once, at the end of the cycle.
  auto peaks = [&](const V* mid) {
    for (int k = 1; k <= m_depth; ++k) {
      uint32_t* r = arr(kReach + k - 1) + b;
      st(r, ld(r) | ge3(cnt, k) | ge3(mid, k));
    }
    uint32_t* po = arr(kPeakOcc) + b;
    const V a = popcount(cnt[0]) + 2 * popcount(cnt[1]) + 4 * popcount(cnt[2]);
    const V m = popcount(mid[0]) + 2 * popcount(mid[1]) + 4 * popcount(mid[2]);
    V peak = ld(po);
    peak = a > peak ? a : peak;
    st(po, m > peak ? m : peak);
  };

  // 1. Credits the neighbours returned in the previous cycle.
  for (int p = 0; p < kNumLinkPorts; ++p) {
    uint32_t* m = arr(mail_index(prev, kMailCred, p)) + b;
    const V back = ld(m);
    if (!any(back)) continue;
    st(m, V{});
    V k[3];
    for (int i = 0; i < 3; ++i) k[i] = ld(arr(kK + 3 * p + i) + b);
    inc3(k, back);
    for (int i = 0; i < 3; ++i) st(arr(kK + 3 * p + i) + b, k[i]);
  }
  const V ramp_full = eq3(cnt, m_depth) & ld(arr(kRx + kRamp) + b);  // start of the cycle
  // 2. What the neighbours sent in the previous cycle.
  bool arrived = false;
  for (int p = 0; p < kNumLinkPorts; ++p) {
    uint32_t* cm = arr(mail_index(prev, kMailCol, p)) + b;
    const V cp1 = ld(cm);
    if (!any(cp1)) continue;
    st(cm, V{});
    const V valid = nz(cp1);
    const V col = (cp1 - 1) & valid;
    push((splat(1) << col) & valid, col, ld(arr(mail_index(prev, kMailPay, p)) + b),
         ctrl_seen ? ld(arr(mail_index(prev, kMailCtrl, p)) + b) : V{});
    arrived = true;
  }
  V mid[3];  // after the arrivals
  for (int i = 0; i < 3; ++i) mid[i] = cnt[i];
  // 3. The arbiters: a head is ready unless it is the only wavelet of a ramp color and came in
  // the cycle before (ramp latency 2).
  const V nonempty = cnt[0] | cnt[1] | cnt[2];
  const V ready = nonempty & ~(ld(arr(kYoung) + b) & eq3(cnt, 1));
  V wanting{}, sent{};
  V served[kNumPorts] = {};  // (stays 0 in a block without multicast: every send ends its head)
  const bool multicast = m_block_multicast[block];
  if (multicast) {
    for (int p = 0; p < kNumPorts; ++p) served[p] = ld(arr(kServed + p) + b);
  }
  for (int p = 0; p < kNumPorts; ++p) {
    const V want = ready & ld(arr(kTx + p) + b) & ~served[p];
    if (!any(want)) continue;
    wanting |= want;
    V el;
    V k[3];
    if (p < kNumLinkPorts) {
      for (int i = 0; i < 3; ++i) k[i] = ld(arr(kK + 3 * p + i) + b);
      el = want & (k[0] | k[1] | k[2]);
    } else {
      el = want & ~ld(arr(kAgentFull) + b);
    }
    const V has = nz(el);
    uint32_t* fwd = arr(kFwd + p) + b;
    st(fwd, ld(fwd) + (has & 1) + ((nz(want) & ~has & 1) << 16));
    if (!any(has)) continue;
    uint32_t* rrp = arr(kRr + p) + b;
    const V rr = ld(rrp);
    const V hi = rr >= 32 ? V{} : el & (splat(~0u) << (rr & 31));
    const V pick = hi ? hi : el;
    const V bit = pick & -pick;
    const V c = bit_index(bit) & has;
    st(rrp, has ? c + 1 : rr);
    *moved = true;
    sent |= bit;
    served[p] |= bit;
    const V idx = slot_of(c, get3(head, c));
    const V payload = gather(m_pay.data(), has, idx);
    const V ctrl = ctrl_seen ? gather(m_ctrl.data(), has, idx) : V{};
    vertical_add(kVFwd, bit);  // per-color sends
    count(2, has & 1);
    if (p < kNumLinkPorts) {
      const size_t d = static_cast<size_t>(static_cast<ptrdiff_t>(b) + offset[p]);
      const int q = opposite(p);
      st(arr(mail_index(cur, kMailPay, q)) + d, has ? payload : V{});
      st(arr(mail_index(cur, kMailCol, q)) + d, has ? c + 1 : V{});
      if (ctrl_seen) st(arr(mail_index(cur, kMailCtrl, q)) + d, has ? ctrl : V{});
      dec3(k, bit);
      for (int i = 0; i < 3; ++i) st(arr(kK + 3 * p + i) + b, k[i]);
    } else {
      for (uint32_t m = agents; m; m &= m - 1) {
        const int l = __builtin_ctz(m);
        if (!has[l]) continue;
        PeAgent* a = m_agent[b + static_cast<size_t>(l)];
        a->deliver(Wavelet{payload[l], static_cast<uint8_t>(c[l]), ctrl[l] != 0}, now + static_cast<uint64_t>(m_ramp_latency));
        arr(kAgentFull)[b + static_cast<size_t>(l)] = a->full_colors();
      }
      if (endpoints) {  // into the receive queue of the endpoints run here
        V qc[3], qh[3];
        for (int i = 0; i < 3; ++i) qc[i] = ld(arr(kQc + i) + b), qh[i] = ld(arr(kQh + i) + b);
        const V depth = ld(arr(kQDepth) + b);
        const V in = bit & ld(arr(kRecv) + b);  // (only endpoint lanes receive: others have no kRecv)
        V tail = get3(qh, c) + get3(qc, c);
        tail = tail >= depth ? tail - depth : tail;
        const V idx = (lane_index * static_cast<uint32_t>(colors) + c) * 8 + tail;
        scatter(m_qpay.data(), in, idx, payload);
        if (ctrl_seen) scatter(m_qctrl.data(), in, idx, ctrl);
        inc3(qc, in);
        for (int i = 0; i < 3; ++i) st(arr(kQc + i) + b, qc[i]);
        st(arr(kYd0) + b, in);
        uint32_t* buf = arr(kBuffered) + b;
        st(buf, ld(buf) + (nz(in) & 1));
        const V full = ld(arr(kAgentFull) + b);
        st(arr(kAgentFull) + b, emask ? ~ld(arr(kRecv) + b) | eqv(qc, depth) : full);
      }
      count(1, has & 1);
    }
  }
  // Heads that have gone out on all their outputs leave their buffer; its feeder gets a credit.
  V done = sent;
  if (multicast) {
    for (int p = 0; p < kNumPorts; ++p) done &= ~ld(arr(kTx + p) + b) | served[p];
    for (int p = 0; p < kNumPorts; ++p) st(arr(kServed + p) + b, served[p] & ~done);
  }
  if (any(done)) {
    count(3, popcount(done));
    dec3(cnt, done);
    inc3(head, done);
    V wrap = done;
    for (int i = 0; i < 3; ++i) wrap &= (m_depth >> i) & 1 ? head[i] : ~head[i];
    for (int i = 0; i < 3; ++i) head[i] &= ~wrap;
    for (int i = 0; i < kNumLinkPorts; ++i) {
      const V back = done & ld(arr(kRx + i) + b);
      if (!any(back)) continue;
      const size_t d = static_cast<size_t>(static_cast<ptrdiff_t>(b) + offset[i]);
      st(arr(mail_index(cur, kMailCred, opposite(i))) + d, back);
    }
  }
  vertical_add(kVStall, wanting & ~sent);  // per-color stalled cycles
  // 4. The agents: one wavelet each to the ramp, ready after the ramp latency.
  V young{}, inj_bit{}, inj_col{}, inj_pay{}, inj_ctrl{};
  for (uint32_t m = agents; m; m &= m - 1) {
    const int l = __builtin_ctz(m);
    PeAgent* a = m_agent[b + static_cast<size_t>(l)];
    Wavelet w;
    const uint32_t r = a->evaluate(now, ramp_full[l], &w);
    arr(kAgentFull)[b + static_cast<size_t>(l)] = a->full_colors();
    if (r & (PeAgent::kOffered | PeAgent::kConsumed)) *moved = true;
    if (!(r & PeAgent::kOffered)) continue;
    inj_bit[l] = 1u << w.color;
    inj_col[l] = w.color;
    inj_pay[l] = w.payload;
    inj_ctrl[l] = w.ctrl ? 1 : 0;
    if (w.ctrl) m_ctrl_seen.store(true, std::memory_order_relaxed);  // the push below keeps its bit
  }
  if (endpoints) {
    // The traffic endpoints run here, as TrafficAgent::evaluate: first the receive side takes
    // at most one readable arrival (round-robin over its queues, a draw against drain_prob),
    // then the send side offers at most one wavelet (round-robin over its flows).
    V qc[3], qh[3];
    for (int i = 0; i < 3; ++i) qc[i] = ld(arr(kQc + i) + b), qh[i] = ld(arr(kQh + i) + b);
    const V depth = ld(arr(kQDepth) + b), recv = ld(arr(kRecv) + b);
    const V yd0 = ld(arr(kYd0) + b), yd1 = ld(arr(kYd1) + b);
    const V qne = qc[0] | qc[1] | qc[2];
    if (any(qne)) {
      V drain = nz(qne) & emask;
      for (uint32_t m = m_block_drains[block]; m; m &= m - 1) {
        const int l = __builtin_ctz(m);
        const size_t i = b + static_cast<size_t>(l);
        if (!qne[l]) continue;
        const uint64_t h = hash_bits(m_seed[i], arr(kPe)[i], now, 1);
        if (!((h >> 11) < m_drain_below[i])) drain[l] = 0;
      }
      // A queue's first arrival is not readable yet when every arrival it holds is that young.
      const V notready = m_ramp_latency == 2 ? (((yd0 ^ yd1) & eq3(qc, 1)) | ((yd0 & yd1) & eq3(qc, 2))) : (yd0 & eq3(qc, 1));
      const V cand = (qne & ~notready & ~ld(arr(kNever) + b)) & drain;
      if (any(cand)) {
        const V rrq = ld(arr(kRrq) + b);
        const V hi = rrq >= 32 ? V{} : cand & (splat(~0u) << (rrq & 31));
        const V pick = hi ? hi : cand;
        const V bit = pick & -pick;
        const V has = nz(bit);
        const V c = bit_index(bit) & has;
        if (m_record) {
          const V idx = (lane_index * static_cast<uint32_t>(colors) + c) * 8 + get3(qh, c);
          const V pay = gather(m_qpay.data(), has, idx);
          const V ctl = ctrl_seen ? gather(m_qctrl.data(), has, idx) : V{};
          for (int l = 0; l < kLanes; ++l) {
            TrafficAgent* a = has[l] ? m_endpoint[b + static_cast<size_t>(l)] : nullptr;
            if (a && a->m_opts.record) {
              log_arrival(a, now, Wavelet{pay[l], static_cast<uint8_t>(c[l]), ctl[l] != 0});
            }
          }
        }
        dec3(qc, bit);
        inc3(qh, bit);
        const V wrap = bit & eqv(qh, depth);
        for (int i = 0; i < 3; ++i) qh[i] &= ~wrap;
        const V above = recv & ~((splat(2) << c) - 1);  // (c = 31: 2 << 31 wraps to 0, so none)
        const V next_bit = above & -above;
        st(arr(kRrq) + b, has ? (above ? bit_index(next_bit) : splat(32)) : rrq);
        uint32_t* buf = arr(kBuffered) + b;
        st(buf, ld(buf) - (has & 1));
        uint32_t* con = arr(kConsumed) + b;
        st(con, ld(con) + (has & 1));
        if (any(has)) *moved = true;
        for (int i = 0; i < 3; ++i) st(arr(kQc + i) + b, qc[i]), st(arr(kQh + i) + b, qh[i]);
        const V full = ld(arr(kAgentFull) + b);
        st(arr(kAgentFull) + b, emask ? ~recv | eqv(qc, depth) : full);
      }
    }
    st(arr(kYd1) + b, yd0);
    st(arr(kYd0) + b, V{});
    // Send side.
    const V unfinished = ld(arr(kUnfinished) + b);
    V go = nz(unfinished) & emask;
    const V fc0 = ld(arr(kFc) + b), fc1 = ld(arr(kFc + 1) + b);
    const V nf = ld(arr(kFlowN) + b);
    const V send_colors = (nf > 0 ? splat(1) << fc0 : V{}) | (nf > 1 ? splat(1) << fc1 : V{});
    go &= nz(send_colors & ~ramp_full);
    if (any(go)) {
      for (uint32_t m = m_block_stalls[block]; m; m &= m - 1) {
        const int l = __builtin_ctz(m);
        const size_t i = b + static_cast<size_t>(l);
        if (!go[l]) continue;
        if ((hash_bits(m_seed[i], arr(kPe)[i], now, 2) >> 11) < m_stall_below[i]) go[l] = 0;
      }
      const V rf = ld(arr(kRrFlow) + b);
      const V fa = rf >= nf ? rf - nf : rf;
      const V fb1 = fa + 1, fb = fb1 >= nf ? fb1 - nf : fb1;
      const V s0 = ld(arr(kFsent) + b), s1 = ld(arr(kFsent + 1) + b);
      const V n0 = ld(arr(kFcount) + b), n1 = ld(arr(kFcount + 1) + b);
      const V ok0 = ~(nz(n0) & (V)(s0 >= n0)) & ~nz((ramp_full >> fc0) & 1);
      const V ok1 = ~(nz(n1) & (V)(s1 >= n1)) & ~nz((ramp_full >> fc1) & 1);
      const V oka = (V)(nf > 0) & (fa == 0 ? ok0 : ok1);
      const V okb = (V)(nf > 1) & (fb == 0 ? ok0 : ok1);
      const V send = go & (oka | okb);
      if (any(send)) {
        const V f = oka ? fa : fb;
        const V is0 = send & (V)(f == 0), is1 = send & (V)(f == 1);
        const V q0 = ld(arr(kSeq) + b), q1 = ld(arr(kSeq + 1) + b);
        const V seq = is0 ? q0 : q1;
        const V every = is0 ? ld(arr(kCtrlEvery) + b) : ld(arr(kCtrlEvery + 1) + b);
        V ctl{};
        if (any(every & send)) {
          for (int l = 0; l < kLanes; ++l) ctl[l] = send[l] && every[l] && seq[l] % every[l] == every[l] - 1 ? 1 : 0;
        }
        const V col = (is0 ? fc0 : fc1) & send;
        const V pay = (ld(arr(kPe) + b) << kSeqBits) | (seq & ((1u << kSeqBits) - 1));
        inj_bit |= (splat(1) << col) & send;
        inj_col |= col;
        inj_pay |= pay & send;
        inj_ctrl |= ctl;
        if (any(ctl)) m_ctrl_seen.store(true, std::memory_order_relaxed);
        st(arr(kSeq) + b, q0 + (is0 & 1));
        st(arr(kSeq + 1) + b, q1 + (is1 & 1));
        const V ns0 = s0 + (is0 & 1), ns1 = s1 + (is1 & 1);
        st(arr(kFsent) + b, ns0);
        st(arr(kFsent + 1) + b, ns1);
        const V done = (is0 & nz(n0) & (V)(ns0 == n0)) | (is1 & nz(n1) & (V)(ns1 == n1));
        st(arr(kUnfinished) + b, unfinished - (done & 1));
        st(arr(kRrFlow) + b, send ? f + 1 : rf);
        uint32_t* tot = arr(kSentTotal) + b;
        st(tot, ld(tot) + (send & 1));
        *moved = true;
      }
    }
  }
  if (any(inj_bit)) {
    count(0, nz(inj_bit) & 1);
    push(inj_bit, inj_col, inj_pay, inj_ctrl);
    if (m_ramp_latency == 2) young = inj_bit;
  }
  if (arrived || any(inj_bit)) peaks(mid);
  st(arr(kYoung) + b, young);
  for (int i = 0; i < 3; ++i) st(arr(kC + i) + b, cnt[i]), st(arr(kH + i) + b, head[i]);
}

}  // namespace wafersim
