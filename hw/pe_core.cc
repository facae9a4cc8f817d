#include "hw/pe_core.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "hw/number_format.h"
#include "hw/pe_core_util.h"

namespace wafersim {

using namespace core_detail;

PeCore::PeCore(const CoreConfig& cfg, const PeImage& image, uint32_t pe_id, std::string name)
    : m_cfg(cfg), m_pe(pe_id), m_name(std::move(name)), m_sram_bytes(static_cast<uint32_t>(cfg.sram_kb) * 1024) {
  m_skips = true;
  std::fill(std::begin(m_task_of_color), std::end(m_task_of_color), -1);
  std::fill(std::begin(m_queue_of_color), std::end(m_queue_of_color), -1);
  std::fill(std::begin(m_outq_of_color), std::end(m_outq_of_color), -1);
  std::fill(std::begin(m_color_of_task), std::end(m_color_of_task), -1);
  const uint32_t end = image.end_address();
  if (end > m_sram_bytes) {
    throw ConfigError(m_name + ": program needs " + std::to_string(end) + " bytes of SRAM, the core has " +
                      std::to_string(m_sram_bytes) + " (core.sram_kb = " + std::to_string(cfg.sram_kb) + ")");
  }
  m_sram = std::unique_ptr<uint8_t[], FreeSram>(sram_alloc(m_sram_bytes), FreeSram{m_sram_bytes});  // zeroed
  m_code.reserve(image.code.size());
  for (size_t i = 0; i < image.code.size(); ++i) {
    std::memcpy(&m_sram[i * kInstrBytes], &image.code[i], kInstrBytes);
    m_code.push_back(decode(image.code[i]));
  }
  m_code_bytes = image.code_bytes();
  for (const DataBlock& b : image.data) {
    std::memcpy(&m_sram[b.addr], b.bytes.data(), b.bytes.size());
  }
  m_dsd.resize(static_cast<size_t>(cfg.dsd_regs));
  const std::vector<int> inq = cfg.inq(), outq = cfg.outq();
  size_t slots = 0;
  for (int d : inq) slots += static_cast<size_t>(d);
  for (int d : outq) slots += static_cast<size_t>(d);
  m_qmem = std::make_unique<QSlot[]>(slots);
  QSlot* next_slot = m_qmem.get();
  for (int q = 0; q < kNumInputQueues; ++q) {
    Queue& Q = m_inq[q];
    Q.depth = static_cast<uint32_t>(inq[static_cast<size_t>(q)]);
    Q.slot = next_slot;
    next_slot += Q.depth;
    Q.color = image.inq_color[q];
    if (Q.color >= 0) {
      m_queue_of_color[Q.color] = static_cast<int8_t>(q);
      m_receive_colors |= 1u << Q.color;
      m_full &= ~(1u << Q.color);
    }
  }
  for (int q = 0; q < kNumOutputQueues; ++q) {
    Queue& Q = m_outq[q];
    Q.depth = static_cast<uint32_t>(outq[static_cast<size_t>(q)]);
    Q.slot = next_slot;
    next_slot += Q.depth;
    Q.color = image.outq_color[q];
    if (Q.color >= 0) {
      m_outq_of_color[Q.color] = static_cast<int8_t>(q);
      m_send_colors |= 1u << Q.color;
    }
  }
  for (const TaskDecl& t : image.tasks) {
    const uint64_t bit = uint64_t{1} << t.id;
    m_declared |= bit;
    m_entry[t.id] = t.entry;
    if (t.active) m_activated |= bit;
    if (t.blocked) m_blocked |= bit;
    if (t.color >= 0) {
      if (m_queue_of_color[t.color] < 0) {
        throw ConfigError(m_name + ": data task " + std::to_string(t.id) + " is bound to color " +
                          std::to_string(t.color) + ", which has no input queue");
      }
      m_data_task |= bit;
      m_task_of_color[t.color] = static_cast<int8_t>(t.id);
      m_color_of_task[t.id] = static_cast<int8_t>(t.color);
    }
  }
  // Descriptor and microthread operands beyond this core's counts are rejected up front.
  for (size_t i = 0; i < m_code.size(); ++i) {
    const Instr& in = m_code[i];
    const OpInfo& info = op_info(in.op);
    int r = 0;
    for (const char* s = info.signature; *s; ++s) {
      if (*s == ',') continue;
      if (std::strchr("rdctm", *s)) {
        if (*s == 'd' && in.reg[r] >= cfg.dsd_regs) {
          throw ConfigError(m_name + ": instruction " + std::to_string(i) + " (" + disassemble(in) + ") uses d" +
                            std::to_string(in.reg[r]) + "; the core has " + std::to_string(cfg.dsd_regs) +
                            " descriptor registers (core.dsd_regs)");
        }
        ++r;
      }
    }
    if (info.vector && in.async && in.ut >= cfg.microthreads) {
      throw ConfigError(m_name + ": instruction " + std::to_string(i) + " (" + disassemble(in) + ") uses microthread " +
                        std::to_string(in.ut) + "; the core has " + std::to_string(cfg.microthreads) +
                        " (core.microthreads)");
    }
    if ((in.op == Op::kActivate || in.op == Op::kBlock || in.op == Op::kUnblock) &&
        !((m_declared >> in.reg[0]) & 1)) {
      throw ConfigError(m_name + ": instruction " + std::to_string(i) + " (" + disassemble(in) +
                        ") names task " + std::to_string(in.reg[0]) + ", which is not declared");
    }
    if ((in.op == Op::kFilt || in.op == Op::kFcnt) && m_queue_of_color[in.reg[0] & 31] < 0) {
      throw ConfigError(m_name + ": instruction " + std::to_string(i) + " (" + disassemble(in) + ") filters color " +
                        std::to_string(in.reg[0]) + ", which has no input queue (.inq)");
    }
    if ((in.op == Op::kCtl || in.op == Op::kSwadv) && m_outq_of_color[in.reg[0] & 31] < 0) {
      throw ConfigError(m_name + ": instruction " + std::to_string(i) + " (" + disassemble(in) + ") sends on color " +
                        std::to_string(in.reg[0]) + ", which has no output queue (.outq)");
    }
    if ((in.op == Op::kDfin && m_queue_of_color[in.reg[1] & 31] < 0) ||
        (in.op == Op::kDfout && m_outq_of_color[in.reg[1] & 31] < 0)) {
      throw ConfigError(m_name + ": instruction " + std::to_string(i) + " (" + disassemble(in) + ") uses color " +
                        std::to_string(in.reg[1]) + ", which has no " +
                        (in.op == Op::kDfin ? "input" : "output") + " queue (.inq/.outq)");
    }
  }
  for (const TaskDecl& t : image.tasks) {
    if (t.entry >= m_code.size()) {
      throw ConfigError(m_name + ": task " + std::to_string(t.id) + " starts past the end of the code");
    }
  }
}

PeCore::~PeCore() = default;

void PeCore::fault(uint64_t now, const std::string& msg) {
  std::string where = "cycle " + std::to_string(now);
  if (m_task >= 0) where += ", task " + std::to_string(m_task) + ", pc " + std::to_string(m_pc);
  report_fault(msg + " (" + where + ")");
  m_halted = true;
  m_task = -1;
  m_main_op.active = false;
  m_ut_busy = 0;
}

void PeCore::write_bytes(uint32_t addr, const void* src, uint32_t n) {
  if (static_cast<uint64_t>(addr) + n > m_sram_bytes) {
    throw ConfigError(m_name + ": host write of " + std::to_string(n) + " bytes at " + std::to_string(addr) +
                      " leaves SRAM (" + std::to_string(m_sram_bytes) + " bytes)");
  }
  std::memcpy(&m_sram[addr], src, n);
}

void PeCore::read_bytes(uint32_t addr, void* dst, uint32_t n) const {
  if (static_cast<uint64_t>(addr) + n > m_sram_bytes) {
    throw ConfigError(m_name + ": host read of " + std::to_string(n) + " bytes at " + std::to_string(addr) +
                      " leaves SRAM (" + std::to_string(m_sram_bytes) + " bytes)");
  }
  std::memcpy(dst, &m_sram[addr], n);
}

int PeCore::input_queue_count(int q) const { return static_cast<int>(m_inq[q].count); }
int PeCore::output_queue_count(int q) const { return static_cast<int>(m_outq[q].count); }

uint32_t PeCore::full_colors() const { return m_full; }

uint64_t PeCore::deliver(const Wavelet& w, uint64_t ready) {
  // A control wavelet only moves switch positions: the ramp takes it and no queue sees it (the
  // core's control tasks are not modelled).
  if (w.ctrl) {
    ++m_consumed;
    ++m_stats.control;
    return kNever;
  }
  // The router only delivers colors outside full_colors(), so the queue has room.
  Queue& q = m_inq[m_queue_of_color[w.color]];
  const uint32_t n = q.fcount++;
  if (q.filter && n - q.flo >= q.fhi - q.flo) {  // outside [flo, fhi): dropped at the ramp
    ++m_consumed;
    ++m_stats.filtered;
    return kNever;  // nothing for the core to do
  }
  uint32_t tail = q.head + q.count;
  if (tail >= q.depth) tail -= q.depth;
  q.slot[tail] = QSlot{ready, w.payload, false, false};
  if (++q.count == q.depth) m_full |= 1u << w.color;
  // A lazy core skips on: nothing it replays reads an input queue (the main thread runs an
  // SRAM-only op or pure scalar code and picks no task), and a microthread waiting for this
  // wavelet can take it at `ready` at the earliest, where its window now ends.
  if (m_lazy) {
    if (ready < m_lazy_until) m_lazy_until = std::max(ready, m_lazy_floor);
    return m_lazy_until;
  }
  // A core asleep inside a task or an op (its router keeps the cycle it named, wake_cycle):
  // the wavelet changes nothing it does before `ready`, and the cycles it sleeps until then
  // count as they would evaluated (stalls inside an op, busy inside a task: settle). An idle
  // core is evaluated now, as its evaluations count idle cycles that settle does not; so is
  // every core with CoreConfig::lazy off (the cycle-by-cycle reference).
  return m_cfg.lazy && (m_main_op.active || m_ut_busy || m_task >= 0) && !m_halted ? ready : 0;
}

uint64_t PeCore::wavelet_wait(const VecOp& op) const {
  const uint64_t next = m_last_eval + 1;
  if (!op.active || op.next_step > next) return 0;
  uint64_t until = 0;
  for (int s = 0; s < op.nsrc; ++s) {
    if (op.src[s].kind == kMemDsd) continue;
    const Queue& q = m_inq[op.src[s].queue];
    if (!q.count) return kNever;
    if (q.slot[q.head].ready > next) until = std::max(until, q.slot[q.head].ready);
  }
  if (m_outq_wait && !op.sum && op.dst.kind == kFoutDsd && m_outq[op.dst.queue].count == m_outq[op.dst.queue].depth) {
    return kNever;  // only the ramp's next take makes room, at an evaluation the router brings
  }
  return m_cfg.lazy ? until : 0;  // CoreConfig::lazy off: evaluated every cycle a wavelet is queued
}

// The busy cycle of evaluate()'s first line: a task waits for its next instruction with nothing
// else in flight. Nothing arriving meanwhile changes that (arrivals only queue up).
uint64_t PeCore::busy_until() const {
  if (m_lazy) return m_lazy_until;
  if (m_task >= 0 && !m_main_op.active && !m_ut_busy && !m_outq_nonempty && m_next_exec > m_last_eval + 1) return m_next_exec;
  return 0;
}

uint64_t PeCore::wake_cycle(uint64_t next) const {
  const uint64_t t = PeCore::busy_until();
  if (t > next) return t;
  const uint64_t w = next_work();
  return w == kNever ? 0 : std::max(w, next);
}

bool PeCore::has_work() const { return next_work() != kNever; }

// The first cycle from m_last_eval + 1 on at which evaluate() could do more than count a stall
// cycle: then, if something is due; later, if every thread waits for a wavelet already queued
// whose ramp latency has not elapsed; kNever if only an arrival can change anything.
uint64_t PeCore::next_work() const {
  const uint64_t next = m_last_eval + 1;
  if (m_outq_nonempty && !m_outq_wait) return next;
  uint64_t wake = kNever;
  for (uint32_t m = m_ut_busy; m; m &= m - 1) {
    const uint64_t w = wavelet_wait(m_ut[__builtin_ctz(m)]);
    if (!w) return next;
    wake = std::min(wake, w);
  }
  if (m_halted) return wake;
  // A main thread inside a vector op or a task starts no other task.
  if (m_main_op.active) {
    const uint64_t w = wavelet_wait(m_main_op);
    return w ? std::min(wake, w) : next;
  }
  if (m_task >= 0) return next;
  if (m_activated & m_declared & ~m_blocked & ~m_data_task) return next;
  for (uint64_t m = m_data_task & ~m_blocked; m; m &= m - 1) {
    const int t = __builtin_ctzll(m);
    if (m_inq[m_queue_of_color[m_color_of_task[t]]].count) return next;
  }
  return wake;
}

// Lowest task ID first among activated, unblocked tasks (a data task is activated while a
// wavelet waits in its queue). A data task takes that wavelet: its payload arrives in r15.
bool PeCore::pick_task(uint64_t now) {
  uint64_t cand = m_activated & m_declared & ~m_blocked & ~m_data_task;
  for (uint64_t m = m_data_task & ~m_blocked; m; m &= m - 1) {
    const int t = __builtin_ctzll(m);
    const Queue& q = m_inq[m_queue_of_color[m_color_of_task[t]]];
    if (q.count && q.slot[q.head].ready <= now) cand |= uint64_t{1} << t;
  }
  if (!cand) return false;
  const int t = __builtin_ctzll(cand);
  const uint64_t bit = uint64_t{1} << t;
  if (m_data_task & bit) {
    m_gpr[15] = take_input(m_inq[m_queue_of_color[m_color_of_task[t]]]);
  } else {
    m_activated &= ~bit;
  }
  m_task = t;
  m_pc = m_entry[t];
  m_next_exec = now + static_cast<uint64_t>(m_cfg.decode_latency);
  ++m_stats.tasks_started;
  return true;
}

uint32_t PeCore::mem_load(uint64_t now, uint32_t addr, int bytes, bool* ok) {
  if ((addr & static_cast<uint32_t>(bytes - 1)) || static_cast<uint64_t>(addr) + static_cast<uint32_t>(bytes) > m_sram_bytes) {
    fault(now, "load of " + std::to_string(bytes) + " bytes at address " + std::to_string(addr) +
                   ((addr & static_cast<uint32_t>(bytes - 1)) ? " is misaligned" : " is outside SRAM"));
    *ok = false;
    return 0;
  }
  uint32_t v = 0;
  std::memcpy(&v, &m_sram[addr], static_cast<size_t>(bytes));
  *ok = true;
  return v;
}

bool PeCore::mem_store(uint64_t now, uint32_t addr, int bytes, uint32_t v) {
  if ((addr & static_cast<uint32_t>(bytes - 1)) || static_cast<uint64_t>(addr) + static_cast<uint32_t>(bytes) > m_sram_bytes ||
      addr < m_code_bytes) {
    fault(now, "store of " + std::to_string(bytes) + " bytes at address " + std::to_string(addr) +
                   (addr < m_code_bytes ? " would overwrite code" :
                    (addr & static_cast<uint32_t>(bytes - 1)) ? " is misaligned" : " is outside SRAM"));
    return false;
  }
  std::memcpy(&m_sram[addr], &v, static_cast<size_t>(bytes));
  return true;
}

void PeCore::dsd_span(const Dsd& d, uint32_t from, uint32_t n, int bytes, int64_t* lo, int64_t* hi) {
  *lo = INT64_MAX;
  *hi = INT64_MIN;
  auto at = [&](int64_t row, int64_t c) {
    const int64_t a = static_cast<int64_t>(d.base) + (row * (d.rowlen ? d.rowstride : 0) + c * d.stride) * bytes;
    *lo = std::min(*lo, a);
    *hi = std::max(*hi, a + bytes);
  };
  if (n == 0) return;
  if (d.rowlen == 0) {
    at(0, from);
    at(0, static_cast<int64_t>(from) + n - 1);
    return;
  }
  // Two-dimensional: the address is affine in (row, column), so its extremes over the first
  // row's part, the whole rows between and the last row's part lie at their corners.
  const int64_t r0 = from / d.rowlen, c0 = from % d.rowlen, r1 = (static_cast<int64_t>(from) + n - 1) / d.rowlen;
  const int64_t c1 = (static_cast<int64_t>(from) + n - 1) % d.rowlen, last = static_cast<int64_t>(d.rowlen) - 1;
  at(r0, c0);
  at(r0, r0 == r1 ? c1 : last);
  if (r1 - r0 >= 2) at(r0 + 1, 0), at(r0 + 1, last), at(r1 - 1, 0), at(r1 - 1, last);
  if (r1 > r0) at(r1, 0), at(r1, c1);
}

bool PeCore::mem_range_ok(const Dsd& d, uint32_t from, uint32_t n, int bytes) const {
  if (n == 0) return true;
  int64_t lo, hi;
  dsd_span(d, from, n, bytes, &lo, &hi);
  return lo >= 0 && hi <= static_cast<int64_t>(m_sram_bytes) && (d.base & static_cast<uint32_t>(bytes - 1)) == 0;
}

namespace {

// The register effect of an integer or fp32 ALU instruction; false when `in` is not one.
inline bool alu(const Instr& in, uint32_t* r) {
  const uint8_t* g = in.reg;
  switch (in.op) {
    case Op::kLi: case Op::kLif: r[g[0]] = static_cast<uint32_t>(in.imm); return true;
    case Op::kMov: r[g[0]] = r[g[1]]; return true;
    case Op::kAdd: r[g[0]] = r[g[1]] + r[g[2]]; return true;
    case Op::kSub: r[g[0]] = r[g[1]] - r[g[2]]; return true;
    case Op::kMul: r[g[0]] = r[g[1]] * r[g[2]]; return true;
    case Op::kAnd: r[g[0]] = r[g[1]] & r[g[2]]; return true;
    case Op::kOr: r[g[0]] = r[g[1]] | r[g[2]]; return true;
    case Op::kXor: r[g[0]] = r[g[1]] ^ r[g[2]]; return true;
    case Op::kShl: r[g[0]] = r[g[1]] << (r[g[2]] & 31); return true;
    case Op::kShr: r[g[0]] = r[g[1]] >> (r[g[2]] & 31); return true;
    case Op::kSra: r[g[0]] = static_cast<uint32_t>(static_cast<int32_t>(r[g[1]]) >> (r[g[2]] & 31)); return true;
    case Op::kSlt: r[g[0]] = static_cast<int32_t>(r[g[1]]) < static_cast<int32_t>(r[g[2]]); return true;
    case Op::kSltu: r[g[0]] = r[g[1]] < r[g[2]]; return true;
    case Op::kAddi: r[g[0]] = r[g[1]] + static_cast<uint32_t>(in.imm); return true;
    case Op::kFadd: r[g[0]] = f32_bits(f32_from_bits(r[g[1]]) + f32_from_bits(r[g[2]])); return true;
    case Op::kFsub: r[g[0]] = f32_bits(f32_from_bits(r[g[1]]) - f32_from_bits(r[g[2]])); return true;
    case Op::kFmul: r[g[0]] = f32_bits(f32_from_bits(r[g[1]]) * f32_from_bits(r[g[2]])); return true;
    default: return false;
  }
}

// A branch's outcome: 0 when `in` is not a branch, 1 not taken, 2 taken.
inline int branch(const Instr& in, const uint32_t* r) {
  const uint8_t* g = in.reg;
  switch (in.op) {
    case Op::kBeq: return r[g[0]] == r[g[1]] ? 2 : 1;
    case Op::kBne: return r[g[0]] != r[g[1]] ? 2 : 1;
    case Op::kBlt: return static_cast<int32_t>(r[g[0]]) < static_cast<int32_t>(r[g[1]]) ? 2 : 1;
    case Op::kBge: return static_cast<int32_t>(r[g[0]]) >= static_cast<int32_t>(r[g[1]]) ? 2 : 1;
    case Op::kJmp: return 2;
    default: return 0;
  }
}

}  // namespace

// Executes the main thread's next scalar instruction, or starts its vector op. Returns false
// when it could not (a stall).
bool PeCore::exec_scalar(uint64_t now, Resources& res) {
  if (m_pc >= m_code.size()) {
    fault(now, "ran past the end of the code");
    return false;
  }
  const Instr& in = m_code[m_pc];
  const OpInfo& info = op_info(in.op);
  uint32_t* r = m_gpr;
  const uint8_t* g = in.reg;
  uint32_t next = m_pc + 1;
  uint64_t when = now + 1;
  if (info.vector) {
    if (in.async) {
      if ((m_ut_busy >> in.ut) & 1) return false;  // microthread still busy: wait
      VecOp& op = m_ut[in.ut];
      if (!start_vector(now, in, op)) return false;
      m_ut_busy |= 1u << in.ut;
    } else {
      if (!start_vector(now, in, m_main_op)) return false;
      ++m_stats.instructions;
      m_pc = next;
      // Its first step is in this cycle. With every operand in SRAM and no microthread busy
      // (none can start before it ends), all its steps run now (run_solo, as evaluate() would
      // run them from the next cycle on; the first step has the ports and banks to itself).
      if (m_main_op.active && m_main_op.mem_only && !m_ut_busy) run_solo(now, m_main_op);
      else step_vector(now, m_main_op, res);
      if (!m_main_op.active) complete_main();
      return true;
    }
    ++m_stats.instructions;
    m_pc = next;
    m_next_exec = when;
    return true;
  }
  // By ranges of the opcode first: a switch whose default is most of the instructions
  // executed costs an indirect jump that is often mispredicted (alu() and branch() each have one).
  // An opcode in a range that the helper does not know falls through to the switch (a fault).
  const bool alu_range = in.op >= Op::kLi && in.op <= Op::kFmul;
  const bool branch_range = in.op >= Op::kBeq && in.op <= Op::kJmp;
  if (alu_range && alu(in, r)) {
    // done
  } else if (const int b = branch_range ? branch(in, r) : 0) {
    if (b == 2) {
      next = static_cast<uint32_t>(in.imm);
      when = now + static_cast<uint64_t>(m_cfg.decode_latency);
    }
  } else switch (in.op) {
    case Op::kNop: break;
    case Op::kLd16: case Op::kLd32: {
      bool ok;
      const uint32_t v = mem_load(now, r[g[1]] + static_cast<uint32_t>(in.imm), in.op == Op::kLd16 ? 2 : 4, &ok);
      if (!ok) return false;
      --res.reads;
      r[g[0]] = v;
      break;
    }
    case Op::kSt16: case Op::kSt32:
      if (!mem_store(now, r[g[0]] + static_cast<uint32_t>(in.imm), in.op == Op::kSt16 ? 2 : 4, r[g[1]])) return false;
      --res.writes;
      break;
    case Op::kActivate: m_activated |= uint64_t{1} << g[0]; break;
    case Op::kBlock: m_blocked |= uint64_t{1} << g[0]; break;
    case Op::kUnblock: m_blocked &= ~(uint64_t{1} << g[0]); break;
    case Op::kExit:
      ++m_stats.instructions;
      m_task = -1;
      m_next_exec = now + 1;
      return true;
    case Op::kHalt:
      ++m_stats.instructions;
      m_task = -1;
      m_halted = true;
      return true;
    case Op::kDmem: m_dsd[g[0]] = Dsd{kMemDsd, 0, in.imm3, static_cast<uint32_t>(in.imm), static_cast<uint32_t>(in.imm2)}; break;
    case Op::kDfin:
      m_dsd[g[0]] = Dsd{kFinDsd, static_cast<uint8_t>(m_queue_of_color[g[1] & 31]), 0, 0, static_cast<uint32_t>(in.imm)};
      break;
    case Op::kDfout:
      m_dsd[g[0]] = Dsd{kFoutDsd, static_cast<uint8_t>(m_outq_of_color[g[1] & 31]), 0, 0, static_cast<uint32_t>(in.imm)};
      break;
    case Op::kDlen:
      // A descriptor's length field is 16 bits on a WSE-2 (the SDK's extents are u16): longer
      // operands loop over several descriptors in firmware.
      if (r[g[1]] > kMaxDsdLength) {
        fault(now, "dlen of " + std::to_string(r[g[1]]) + " elements: a descriptor covers at most " + std::to_string(kMaxDsdLength));
        return false;
      }
      m_dsd[g[0]].len = r[g[1]];
      break;
    case Op::kDbase: m_dsd[g[0]].base = r[g[1]]; break;
    case Op::kDaddb: m_dsd[g[0]].base += static_cast<uint32_t>(in.imm); break;
    case Op::kDstride: m_dsd[g[0]].stride = static_cast<int32_t>(r[g[1]]); break;
    case Op::kDrows:
      m_dsd[g[0]].rowlen = r[g[1]];
      m_dsd[g[0]].rowstride = static_cast<int32_t>(r[g[2]]);
      break;
    case Op::kFilt: {
      Queue& q = m_inq[m_queue_of_color[g[0] & 31]];
      q.flo = r[g[1]];
      q.fhi = r[g[2]];
      q.filter = !(q.flo == 0 && q.fhi == ~0u);
      break;
    }
    case Op::kFcnt: m_inq[m_queue_of_color[g[0] & 31]].fcount = r[g[1]]; break;
    case Op::kTsc: r[g[0]] = static_cast<uint32_t>(now); break;  // ends a lazy window (pure_run)
    case Op::kCtl: {  // ends a lazy window (pure_run); waits for room like a vector op's step
      const int q = m_outq_of_color[g[0] & 31];
      if (m_outq[q].count == m_outq[q].depth) return false;
      put_output(q, 0, true);
      break;
    }
    case Op::kSwadv: {  // as ctl, but the router takes it as its own switch advance
      const int q = m_outq_of_color[g[0] & 31];
      if (m_outq[q].count == m_outq[q].depth) return false;
      put_output(q, 0, true, true);
      break;
    }
    default:
      fault(now, std::string("cannot execute ") + info.mnemonic);
      return false;
  }
  ++m_stats.instructions;
  m_pc = next;
  m_next_exec = when;
  return true;
}

// The main thread's vector op took its last step: the next instruction executes once that
// step is over; a reduction's result lands in its register.
void PeCore::complete_main() {
  if (m_main_op.in.op == Op::kVsum) m_gpr[m_main_op.in.reg[0]] = f32_bits(m_main_op.acc);
  m_next_exec = m_main_op.next_step;
  m_main_end = 0;
}

namespace {

// The registers an ALU instruction reads (alu() above): its operands after the destination.
uint32_t alu_sources(const Instr& in) {
  const uint8_t* g = in.reg;
  switch (in.op) {
    case Op::kLi: case Op::kLif: return 0;
    case Op::kMov: case Op::kAddi: return 1u << g[1];
    default: return 1u << g[1] | 1u << g[2];
  }
}

}  // namespace

// The cycle at which the main thread, due to execute its next instruction at cycle t, reaches
// one that a lazy core does not replay: a vector op, a store (the host polls counters in SRAM
// between cycles), exit or halt (the host watches running tasks), or a load that would fault.
// Everything before it only reads and writes registers, descriptors, task flags and loads from
// SRAM, none of which a waiting microthread or an arrival touches. Works on a copy of the
// registers (pure_run); looks at most kMaxPureRun instructions ahead. While the main thread's
// vector op still has steps to run (the lazy window then goes on from its end), what those
// steps write is not there yet: a vsum's register and loads from the op's destination are
// unknown, and so is what is computed from them; the run ends at a branch on, or a load
// address from, an unknown.
uint64_t PeCore::pure_run_end(uint64_t t) const {
  const VecOp& op = m_main_op;
  if (op.active && op.sum) return pure_run<true>(t, 1u << op.in.reg[0], 0, 0);
  if (op.active && op.dst.kind == kMemDsd && op.done < op.total) {
    int64_t lo, hi;
    dsd_span(op.dst, op.done, op.total - op.done, op.dbytes, &lo, &hi);
    return pure_run<true>(t, 0, static_cast<uint64_t>(std::max<int64_t>(lo, 0)), static_cast<uint64_t>(std::max<int64_t>(hi, 0)));
  }
  return pure_run<false>(t, 0, 0, 0);
}

// pure_run_end's walk: `unknown` registers, SRAM bytes [dlo, dhi) not written yet (kTrack).
template <bool kTrack>
uint64_t PeCore::pure_run(uint64_t t, uint32_t unknown, uint64_t dlo, uint64_t dhi) const {
  constexpr int kMaxPureRun = 64;
  uint32_t r[kNumGprs];
  std::memcpy(r, m_gpr, sizeof r);
  uint32_t pc = m_pc;
  for (int n = 0; n < kMaxPureRun && pc < m_code.size(); ++n) {
    const Instr& in = m_code[pc];
    uint32_t next = pc + 1;
    uint64_t when = t + 1;
    // reg[0] names a GPR only for ALU ops and loads, the ones that use this mask; for other ops it
    // can be a DSD register or a task (up to 63), too far to shift a 32-bit mask by.
    const uint32_t dst = in.reg[0] < kNumGprs ? 1u << in.reg[0] : 0;
    if (alu(in, r)) {
      if (kTrack) unknown = (unknown & alu_sources(in)) ? unknown | dst : unknown & ~dst;
    } else if (const int b = branch(in, r)) {
      if (kTrack && in.op != Op::kJmp && (unknown & (1u << in.reg[0] | 1u << in.reg[1]))) return t;
      if (b == 2) {
        next = static_cast<uint32_t>(in.imm);
        when = t + static_cast<uint64_t>(m_cfg.decode_latency);
      }
    } else {
      switch (in.op) {
        case Op::kNop: case Op::kActivate: case Op::kBlock: case Op::kUnblock:
        case Op::kDmem: case Op::kDfin: case Op::kDfout: case Op::kDlen: case Op::kDbase: case Op::kDaddb:
        case Op::kDstride: case Op::kDrows:
          break;
        case Op::kLd16: case Op::kLd32: {
          if (kTrack && (unknown & (1u << in.reg[1]))) return t;
          const uint32_t bytes = in.op == Op::kLd16 ? 2 : 4;
          const uint32_t addr = r[in.reg[1]] + static_cast<uint32_t>(in.imm);
          if ((addr & (bytes - 1)) || uint64_t{addr} + bytes > m_sram_bytes) return t;
          if (kTrack && addr < dhi && addr + bytes > dlo) {
            unknown |= dst;  // the op writes it later
            break;
          }
          uint32_t v = 0;
          std::memcpy(&v, &m_sram[addr], bytes);
          r[in.reg[0]] = v;
          if (kTrack) unknown &= ~dst;
          break;
        }
        default:
          return t;
      }
    }
    pc = next;
    t = when;
  }
  return t;
}

// Called at the end of evaluate(now): can the core skip cycles (see m_lazy)?
void PeCore::update_lazy(uint64_t now) {
  m_lazy = kLazyNone;
  m_lazy_floor = 0;
  if (!m_cfg.lazy || (m_outq_nonempty && !m_outq_wait) || m_halted || m_task < 0) return;
  // Without a microthread, run_solo runs an SRAM-only op at once at the next evaluate().
  if (m_main_op.active && (!m_main_op.mem_only || !m_ut_busy)) return;
  if (m_main_op.active && !m_main_end) m_main_end = std::max(now + 1, m_main_op.next_step) + solo_cycles(m_main_op);
  // An SRAM-only main op whose steps each take one cycle, from the next cycle to its end, takes
  // its reads, its write and the datapath first in every one of those cycles: a microthread
  // that needs one of them the op takes whole (every read port, the write port, the datapath)
  // cannot step before the op ends, whatever arrives meanwhile.
  const VecOp& mo = m_main_op;
  const bool holds = mo.active && mo.next_step <= now + 1 && mo.port_cycles == 1 &&
                     (mo.reads < 2 || (mo.conflict_known && !mo.conflict_full));
  auto held = [&](const VecOp& op) {
    return holds && op.active && op.next_step <= now + 1 &&
           ((op.writes && mo.writes >= m_cfg.write_ports) || (op.alu && mo.alu) || (op.reads && mo.reads >= m_cfg.read_ports));
  };
  uint64_t ut_wake = kNever;  // the first queued wavelet a microthread waits for is readable
  bool all_held = m_ut_busy != 0;
  for (uint32_t m = m_ut_busy; m; m &= m - 1) {
    const VecOp& op = m_ut[__builtin_ctz(m)];
    uint64_t w;
    if (held(op)) {
      w = m_main_end;
    } else {
      w = wavelet_wait(op);
      all_held = false;
    }
    if (!w) return;
    ut_wake = std::min(ut_wake, w);
  }
  const uint64_t t = mo.active ? m_main_end : std::max(m_next_exec, now + 1);  // the main thread's next instruction
  // (pure_run_end(t) >= t: a microthread's wake-up no later than t ends the window anyway.)
  m_lazy_until = ut_wake <= t ? ut_wake : std::min(pure_run_end(t), ut_wake);
  if (all_held) m_lazy_floor = m_lazy_until;  // arrivals cannot end the window early
  if (m_lazy_until > now + 1) m_lazy = kLazyOn;
}

// The skipped cycles [from, to) of a lazy core: the main thread's vector steps and scalar
// instructions, exactly as evaluate() would have run them (with the ports and banks to itself,
// and every microthread waiting), each of them a busy cycle.
void PeCore::catch_up(uint64_t from, uint64_t to) {
  m_stats.busy += to - from;
  m_replayed += to - from;
  to = std::min(to, m_lazy_until);  // evaluate() runs by m_lazy_until at the latest
  VecOp& op = m_main_op;
  uint64_t k = from;
  if (op.active) {
    const uint32_t per = op.one_per_step ? 1u : static_cast<uint32_t>(op.rate);
    // Steps of a fixed length (no address-dependent bank conflict) are replayed in one batch.
    const bool fixed = op.conflict_known || op.reads < 2 || op.reads > m_cfg.read_ports;
    const uint64_t len = op.port_cycles + (op.conflict_known && op.conflict_full ? 1u : 0u);
    while (k < to && op.active) {
      if (k < op.next_step) {  // inside a multi-cycle step
        k = op.next_step;
        continue;
      }
      const uint64_t full_left = (op.total - op.done) / per;
      if (fixed && full_left > 1) {
        // Full steps starting at k, k + len, ... before `to`, as step_vector would run them.
        const uint64_t n = std::min<uint64_t>(full_left, (to - k + len - 1) / len);
        finish_step<true>(k, op, static_cast<uint32_t>(n * per), false);
        op.next_step = k + n * len;
        k = op.next_step;
      } else {
        Resources res{m_cfg.read_ports, m_cfg.write_ports, true, 0};
        step_vector(k, op, res);
        ++k;
      }
      if (!op.active) complete_main();
    }
    if (op.active) return;
  }
  // The scalar instructions due before `to` (all of them ones pure_run_end let through).
  for (k = std::max(k, m_next_exec); k < to && m_task >= 0; k = m_next_exec) {
    Resources res{m_cfg.read_ports, m_cfg.write_ports, true, 0};
    exec_scalar(k, res);
  }
}

// Cycles asleep inside an op waiting for a wavelet (see has_work) were stalls; a core asleep
// with nothing to run is not evaluated and not counted; a lazy core's skipped cycles are
// replayed (a later replay goes on from `end`).
void PeCore::settle(uint64_t end) {
  if (!m_evaluated || end <= m_last_eval + 1) return;
  if (m_lazy) catch_up(m_last_eval + 1, end);
  else if (m_main_op.active || m_ut_busy) m_stats.stall += end - m_last_eval - 1;
  else if (m_task >= 0) m_stats.busy += end - m_last_eval - 1;  // skipped busy cycles (busy_until)
  m_last_eval = end - 1;
}

// The output queue the ramp serves: the first nonempty one from m_rr_outq on, round the ring,
// whose color the router can take (-1: none).
int PeCore::next_outq(uint32_t ramp_full) const {
  const uint32_t from = ~0u << m_rr_outq;
  for (uint32_t m : {m_outq_nonempty & from, m_outq_nonempty & ~from}) {
    for (; m; m &= m - 1) {
      const int q = __builtin_ctz(m);
      if (!((ramp_full >> m_outq[q].color) & 1)) return q;
    }
  }
  return -1;
}

uint32_t PeCore::evaluate(uint64_t now, uint32_t ramp_full, Wavelet* out) {
  const uint8_t was_lazy = m_lazy;
  settle(now);
  ++m_evaluations;
  m_outq_wait = false;
  m_last_eval = now;
  m_evaluated = true;
  m_lazy = kLazyNone;
  // The common busy cycle: a task waits for its next instruction (pipeline refill, or the end of
  // a vector op already run by run_solo) with nothing else in flight.
  if (m_task >= 0 && now < m_next_exec && !m_main_op.active && !m_ut_busy && !m_outq_nonempty) {
    ++m_stats.busy;
    if (was_lazy && m_lazy_until > now + 1) m_lazy = was_lazy;  // nothing ran: the window holds
    return kConsumed;
  }
  uint32_t result = 0;
  // Completions of async ops whose last step ended: free the microthread, run its action.
  for (uint32_t m = m_ut_busy; m; m &= m - 1) {
    const int u = __builtin_ctz(m);
    VecOp& op = m_ut[u];
    if (op.active || now < op.next_step) continue;
    m_ut_busy &= ~(1u << u);
    if (op.in.op == Op::kVsum) m_gpr[op.in.reg[0]] = f32_bits(op.acc);
    const uint64_t bit = uint64_t{1} << op.in.done_task;
    if (op.in.done == DoneAction::kActivate) m_activated |= bit;
    if (op.in.done == DoneAction::kUnblock) m_blocked &= ~bit;
  }

  // The ramp carries one wavelet per cycle: round-robin over output queues whose color the
  // router can take (a wavelet written this cycle leaves next cycle at the earliest).
  if (m_outq_nonempty) {
    if (const int q = next_outq(ramp_full); q >= 0) {
      Queue& Q = m_outq[q];
      *out = Wavelet{Q.slot[Q.head].payload, static_cast<uint8_t>(Q.color), Q.slot[Q.head].ctrl, Q.slot[Q.head].local};
      if (++Q.head == Q.depth) Q.head = 0;
      if (--Q.count == 0) m_outq_nonempty &= ~(1u << q);
      m_rr_outq = q + 1 == kNumOutputQueues ? 0 : q + 1;
      result |= kOffered;
    }
  }

  Resources res{m_cfg.read_ports, m_cfg.write_ports, true, 0};
  bool progress = false, waiting = false;
  if (m_main_op.active) {
    if (m_ut_busy == 0 && m_main_op.mem_only) {
      // Every operand in SRAM and no microthread: nothing on the wafer can touch this core's
      // SRAM or ports before the op ends (the main thread waits for it, and only the main thread
      // starts microthreads), so its steps have a fixed schedule. Run them all now, each at its
      // own cycle; the main thread then waits for the last step's end as usual. Results and
      // timing are those of stepping cycle by cycle; only a host read of SRAM in the middle of
      // the op (between cycles) would see its later elements early.
      if (now >= m_main_op.next_step) run_solo(now, m_main_op);
      progress = true;
    } else {
      const int s = step_vector(now, m_main_op, res);
      progress |= s > 0;
      waiting |= s == 0;
    }
    if (!m_main_op.active) complete_main();
  } else if (!m_halted) {
    if (m_task >= 0) {
      if (now >= m_next_exec) {
        const bool ok = exec_scalar(now, res);
        progress |= ok;
        waiting |= !ok;
      } else {
        progress = true;  // pipeline refill, or the last step of a vector op
      }
    } else if (now >= m_next_exec && pick_task(now)) {
      progress = true;
    }
  }
  for (uint32_t m = m_ut_busy; m; m &= m - 1) {
    VecOp& op = m_ut[__builtin_ctz(m)];
    if (!op.active) {
      if (now < op.next_step) progress = true;
      continue;
    }
    const int s = step_vector(now, op, res);
    progress |= s > 0;
    waiting |= s == 0;
  }
  if (progress) ++m_stats.busy;
  else if (waiting) ++m_stats.stall;
  else ++m_stats.idle;
  if (result || progress) result |= kConsumed;  // anything moved: keeps the watchdog quiet
  if (m_outq_nonempty && !(result & kOffered) && m_cfg.lazy && !m_halted && (m_main_op.active || m_ut_busy || m_task >= 0)) {
    m_outq_wait = next_outq(ramp_full) < 0;  // every nonempty queue's color full at the router (start of this cycle)
    if (m_outq_wait) result |= kRampWait;
  }
  update_lazy(now);
  return result;
}

}  // namespace wafersim

namespace wafersim {

std::string PeCore::debug_state() const {
  if (m_halted) return "";
  std::string s = "task " + std::to_string(m_task) + " pc " + std::to_string(m_pc);
  if (m_main_op.active) s += " main op " + std::to_string(m_main_op.done) + "/" + std::to_string(m_main_op.total);
  for (int u = 0; u < kMaxMicrothreads; ++u) {
    if (m_ut[u].active) s += " ut" + std::to_string(u) + " " + std::to_string(m_ut[u].done) + "/" + std::to_string(m_ut[u].total);
  }
  char b[64];
  std::snprintf(b, sizeof b, " activated %llx blocked %llx", static_cast<unsigned long long>(m_activated), static_cast<unsigned long long>(m_blocked));
  return s + b;
}

}  // namespace wafersim
