#include "compiler/activation.h"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <stdexcept>

#include "firmware/kernels/kernel_util.h"
#include "hw/vector_math.h"

namespace wafersim::compiler {

namespace {

const char* slot_name(Slot s) {
  static const char* const kNames[kSlots] = {"Z", "Y", "G", "ones", "T0", "T1", "T2", "T3"};
  return kNames[static_cast<int>(s)];
}

const char* mnemonic(Op op) {
  switch (op) {
    case Op::kVadd: return "vadd";
    case Op::kVsub: return "vsub";
    case Op::kVmul: return "vmul";
    case Op::kVmax: return "vmax";
    case Op::kVfmac: return "vfmac";
    case Op::kVrelu: return "vrelu";
    case Op::kVdrelu: return "vdrelu";
    case Op::kVexp: return "vexp";
    case Op::kVrecip: return "vrecip";
    case Op::kVlog: return "vlog";
    case Op::kVcmpgt: return "vcmpgt";
    case Op::kVsel: return "vsel";
    case Op::kVmov: return "vmov";
    case Op::kVmuls: return "vmuls";
    case Op::kVfmacs: return "vfmacs";
    case Op::kVfill: return "vfill";
    default: throw std::logic_error("an activation program step with no mnemonic");
  }
}

bool scalar_op(Op op) { return op == Op::kVmuls || op == Op::kVfmacs || op == Op::kVfill; }

void emit(kernels::PeAsm& a, const ActProgram& p, const ActDsds& d, const char* act, const char* pass) {
  auto dsd = [&](Slot s) -> const std::string& {
    const std::string& r = d[static_cast<size_t>(s)];
    if (r.empty()) throw std::logic_error(std::string("activation ") + act + " (" + pass + ") uses " + slot_name(s) + ", which the kernel does not provide");
    return r;
  };
  // r13 holds the last scalar loaded (vector ops leave it): load one only when it differs.
  bool loaded = false;
  float last = 0;
  for (const ActProgram::Step& st : p.steps()) {
    if (scalar_op(st.op) && !(loaded && std::memcmp(&last, &st.s, sizeof last) == 0)) {
      a << "lif r13, " + kernels::f32_literal(st.s);
      loaded = true;
      last = st.s;
    }
    std::string line = std::string(mnemonic(st.op)) + ".fp32 " + dsd(st.d);
    const Slot src[3] = {st.a, st.b, st.c};
    for (int i = 0; i < st.nsrc; ++i) line += ", " + dsd(src[i]);
    if (scalar_op(st.op)) line += ", r13";
    a << line;
  }
}

}  // namespace

ActProgram& ActProgram::op(Op o, Slot d, std::initializer_list<Slot> src, float s) {
  Step st{o, d, Slot::kZ, Slot::kZ, Slot::kZ, static_cast<int>(src.size()), s};
  Slot* to[3] = {&st.a, &st.b, &st.c};
  int i = 0;
  for (Slot x : src) {
    // A scratch vector holds what the caller left in it until a step writes it: reading it first
    // would differ between the wafer and the host (which starts it at 0).
    const int t = static_cast<int>(x) - static_cast<int>(Slot::kT0);
    if (t >= 0 && !((m_written >> t) & 1)) throw std::logic_error(std::string("an activation program reads ") + slot_name(x) + " before writing it");
    *to[i++] = x;
  }
  if (d == Slot::kOnes) throw std::logic_error("an activation program writes the vector of 1.0s");
  if (const int t = static_cast<int>(d) - static_cast<int>(Slot::kT0); t >= 0) m_written |= static_cast<uint8_t>(1u << t);
  m_steps.push_back(st);
  return *this;
}

ActProgram& ActProgram::append(const ActProgram& other, const std::array<Slot, kSlots>& to) {
  for (const Step& st : other.steps()) {
    auto r = [&](Slot x) { return to[static_cast<size_t>(x)]; };
    switch (st.nsrc) {
      case 0: op(st.op, r(st.d), {}, st.s); break;
      case 1: op(st.op, r(st.d), {r(st.a)}, st.s); break;
      case 2: op(st.op, r(st.d), {r(st.a), r(st.b)}, st.s); break;
      default: op(st.op, r(st.d), {r(st.a), r(st.b), r(st.c)}, st.s); break;
    }
  }
  return *this;
}

bool ActProgram::uses(Slot s) const {
  for (const Step& st : m_steps) {
    const Slot src[3] = {st.a, st.b, st.c};
    if (st.d == s) return true;
    for (int i = 0; i < st.nsrc; ++i) {
      if (src[i] == s) return true;
    }
  }
  return false;
}

int ActProgram::temps() const {
  int n = 0;
  for (int t = 0; t < 4; ++t) {
    if (uses(static_cast<Slot>(static_cast<int>(Slot::kT0) + t))) n = t + 1;
  }
  return n;
}

float ActProgram::run(float z, float y, float g, Slot out) const {
  float v[kSlots] = {z, y, g, 1.0f, 0, 0, 0, 0};
  for (const Step& st : m_steps) {
    const float src[3] = {v[static_cast<int>(st.a)], v[static_cast<int>(st.b)], v[static_cast<int>(st.c)]};
    v[static_cast<int>(st.d)] = st.op == Op::kVmov ? src[0] : vector_element(st.op, src, st.s);
  }
  return v[static_cast<int>(out)];
}

const ActivationDef& activation(Activation a) {
  // Indexed by the enum once (every value has a definition: Activations.* tests it).
  static const std::vector<const ActivationDef*> by_value = [] {
    std::vector<const ActivationDef*> v;
    for (const ActivationDef* d : activations()) {
      const size_t i = static_cast<size_t>(d->act);
      if (v.size() <= i) v.resize(i + 1, nullptr);
      v[i] = d;
    }
    return v;
  }();
  const size_t i = static_cast<size_t>(a);
  if (i >= by_value.size() || !by_value[i]) throw std::logic_error("an activation without a definition in compiler/activations/");
  return *by_value[i];
}

const ActivationDef* activation_by_onnx(const std::string& op_type) {
  for (const ActivationDef* d : activations()) {
    if (!op_type.empty() && op_type == d->onnx) return d;
  }
  return nullptr;
}

const ActivationDef* activation_by_kind(const std::string& ir_kind) {
  for (const ActivationDef* d : activations()) {
    if (!ir_kind.empty() && ir_kind == d->kind) return d;
  }
  return nullptr;
}

const ActivationDef* activation_by_name(const std::string& name) {
  for (const ActivationDef* d : activations()) {
    if (name == d->name) return d;
  }
  return nullptr;
}

bool act_needs_pre(Activation a) { return activation(a).pre; }
const char* activation_name(Activation a) { return activation(a).name; }

std::string activation_text(Activation a, const ActParams& p) {
  if (a != Activation::kChain) return activation_name(a);
  std::string s = p.base == Activation::kNone ? "x" : activation_name(p.base);
  auto num = [](float v) {
    char b[32];
    std::snprintf(b, sizeof b, "%.9g", static_cast<double>(v));
    return std::string(b);
  };
  for (int i = 0; i < p.posts; ++i) {
    if (p.mul[i] != 1.0f) s += " * " + num(p.mul[i]);
    if (p.add[i] != 0.0f) s += (p.add[i] < 0 ? " - " : " + ") + num(std::fabs(p.add[i]));
  }
  return s;
}

namespace {

// The references evaluate an activation element by element: its programs are built once per
// (activation, parameters) in a row, per thread.
const ActProgram& program(Activation a, const ActParams& p, bool fwd) {
  struct Entry {
    bool valid = false;
    Activation a = Activation::kNone;
    ActParams p;
    ActProgram prog;
  };
  thread_local Entry cache[2];
  Entry& e = cache[fwd ? 0 : 1];
  if (!e.valid || e.a != a || std::memcmp(&e.p, &p, sizeof p) != 0) {
    e.prog = fwd ? activation(a).fwd(p) : activation(a).bwd(p);
    e.a = a;
    e.p = p;
    e.valid = true;
  }
  return e.prog;
}

}  // namespace

float act_fwd(Activation a, float z, const ActParams& p) { return program(a, p, true).run(z, 0, 0, Slot::kY); }
float act_bwd(Activation a, float y, float g, const ActParams& p) { return program(a, p, false).run(0, y, g, Slot::kG); }
float act_bwd_pre(Activation a, float z, float g, const ActParams& p) { return program(a, p, false).run(z, 0, g, Slot::kG); }

void emit_act_fwd(kernels::PeAsm& a, Activation act, const ActParams& p, const ActDsds& d) {
  emit(a, activation(act).fwd(p), d, activation(act).name, "forward");
}
void emit_act_bwd(kernels::PeAsm& a, Activation act, const ActParams& p, const ActDsds& d) {
  emit(a, activation(act).bwd(p), d, activation(act).name, "backward");
}

}  // namespace wafersim::compiler
