// What sits at the ramp end of a router: the PE's core, or (until the core exists) a traffic
// endpoint. The router calls it from its own evaluate and commit, so an agent only ever touches
// its own state and needs no locking, whatever the thread count.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

#include "hw/wavelet.h"

namespace wafersim {

class PeAgent {
 public:
  virtual ~PeAgent() = default;

  // Colors the agent cannot take from the router this cycle (start-of-cycle state). The router
  // reads this before it calls evaluate(), so a slot freed in cycle t is seen in cycle t+1.
  // It changes in evaluate() or deliver(), or at a cycle wake_cycle() names: a router whose
  // heads wait on it sleeps until then. The router keeps a copy, read again after each call of
  // either and in a visit at or after the named cycle.
  virtual uint32_t full_colors() const = 0;

  // Evaluate phase of cycle `now`: consume what has arrived, and offer at most one wavelet for
  // the ramp link. `ramp_full` are the colors whose router ramp buffer is full; an offered
  // wavelet of another color is always accepted. Returns kOffered and/or kConsumed.
  // kRampWait: it has something to offer, but only on colors in `ramp_full`, and sleeps until
  // one of those frees (the router then evaluates it in the next cycle).
  static constexpr uint32_t kOffered = 1, kConsumed = 2, kRampWait = 4;
  virtual uint32_t evaluate(uint64_t now, uint32_t ramp_full, Wavelet* out) = 0;

  // The router delivers a wavelet that becomes visible at cycle `ready`, before it evaluates the
  // agent in that cycle. Returns the first cycle in which the agent must be evaluated again
  // (0: this one; later only for an agent that skips evaluations, see wake_cycle()).
  virtual uint64_t deliver(const Wavelet& w, uint64_t ready) = 0;

  // Colors the agent may send on the ramp, and colors it takes from the ramp: checked against
  // the router's routes before the first cycle.
  virtual uint32_t send_colors() const = 0;
  virtual uint32_t receive_colors() const = 0;

  // What it is doing, for a deadlock's report ("" if nothing to say).
  virtual std::string debug_state() const { return ""; }

  // True while the agent still needs cycles (pending sends, undrained arrivals).
  virtual bool has_work() const = 0;
  // A cycle T such that every evaluate() before T would change nothing but the agent's own busy
  // count (it works on something whose end is already fixed), so its router may skip it until
  // T; 0 when there is no such cycle.
  virtual uint64_t busy_until() const { return 0; }
  // When its router must visit it again, `next` being the next cycle: a later cycle T as in
  // busy_until(), else `next` while it has work, else 0. One call instead of two per visit.
  virtual uint64_t wake_cycle(uint64_t next) const {
    const uint64_t t = busy_until();
    if (t > next) return t;
    return has_work() ? next : 0;
  }

  // True when the router should ask wake_cycle() after every evaluate() and skip the agent's
  // evaluations until then (worth it for agents that often have nothing due while their router
  // is busy; a saturated traffic endpoint always has).
  bool skips_evaluations() const { return m_skips; }

  // Accounts in the agent's own statistics every cycle before `end` it was not evaluated in, as
  // its next evaluate() would (a host reads them between cycles: reports, traces); nothing else
  // changes. For agents that skip evaluations; the default has nothing to account.
  virtual void settle(uint64_t end) { (void)end; }

  // Wavelets consumed so far (drained from the agent's receive side).
  virtual uint64_t consumed() const = 0;

  // A program error the agent hit (empty when none): the fabric stops the run at the end of the
  // cycle in which any agent reported one.
  const std::string& fault() const { return m_fault; }

 protected:
  bool m_skips = false;
  void report_fault(std::string msg) {
    if (!m_fault.empty()) return;
    m_fault = std::move(msg);
    if (m_fault_flag) m_fault_flag->store(true, std::memory_order_relaxed);
  }

 private:
  friend class Fabric;
  std::atomic<bool>* m_fault_flag = nullptr;  // the fabric's, set when attached
  std::string m_fault;
};

}  // namespace wafersim
