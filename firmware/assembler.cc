#include "firmware/assembler.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <climits>
#include <cmath>
#include <cstdint>
#include <map>
#include <set>
#include <sstream>
#include <vector>

#include "hw/wavelet.h"

namespace wafersim {

AsmError::AsmError(const std::string& file, int line, int column, const std::string& msg)
    : std::runtime_error(file + ":" + std::to_string(line) + ":" + std::to_string(column) + ": " +
                         msg),
      m_line(line),
      m_column(column) {}

namespace {

// Immediates are 32-bit fields; both signed values and unsigned bit patterns are accepted.
constexpr int64_t kI32Min = INT32_MIN;
constexpr int64_t kI32Max = INT32_MAX;
constexpr int64_t kU32Max = UINT32_MAX;
constexpr int64_t kMaxBase = (1 << 20) - 1;

// What a numeric operand may name besides a literal.
constexpr unsigned kEqu = 1, kData = 2;

std::string hex(uint64_t v) {
  std::ostringstream os;
  os << "0x" << std::hex << v;
  return os.str();
}

// "an offset", "a color": for messages naming what was expected.
std::string article(const std::string& noun) {
  return (std::string("aeiou").find(noun[0]) != std::string::npos ? "an " : "a ") + noun;
}

bool ident_start(char c) { return std::isalpha(static_cast<unsigned char>(c)) || c == '_'; }
bool ident_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.';
}
size_t ident_length(const std::string& s) {
  if (s.empty() || !ident_start(s[0])) return 0;
  size_t n = 1;
  while (n < s.size() && ident_char(s[n])) ++n;
  return n;
}

// r7 or d12 would read as registers wherever a register is allowed, so no symbol may look so.
bool register_like(const std::string& s) {
  if (s.size() < 2 || (s[0] != 'r' && s[0] != 'd')) return false;
  for (size_t i = 1; i < s.size(); ++i) {
    if (!std::isdigit(static_cast<unsigned char>(s[i]))) return false;
  }
  return true;
}

// Decimal or 0x hex, optionally negative. Values beyond every field saturate at 2^40 so that the
// range check, not an overflow, reports them.
bool parse_int(const std::string& s, int64_t* out) {
  size_t i = 0;
  const bool neg = !s.empty() && s[0] == '-';
  if (neg) ++i;
  int base = 10;
  if (s.compare(i, 2, "0x") == 0 || s.compare(i, 2, "0X") == 0) {
    base = 16;
    i += 2;
  }
  if (i == s.size()) return false;
  constexpr int64_t kSaturate = int64_t{1} << 40;
  int64_t v = 0;
  for (; i < s.size(); ++i) {
    const char c = static_cast<char>(std::tolower(static_cast<unsigned char>(s[i])));
    int d;
    if (c >= '0' && c <= '9') {
      d = c - '0';
    } else if (base == 16 && c >= 'a' && c <= 'f') {
      d = c - 'a' + 10;
    } else {
      return false;
    }
    v = std::min(kSaturate, v * base + d);
  }
  *out = neg ? -v : v;
  return true;
}

// A piece of a source line and the 1-based column where it starts.
struct Piece {
  std::string text;
  int col = 1;

  Piece sub(size_t pos, size_t n = std::string::npos) const {
    return Piece{text.substr(std::min(pos, text.size()), n), col + static_cast<int>(pos)};
  }
  Piece trimmed() const {
    size_t b = 0, e = text.size();
    while (b < e && std::isspace(static_cast<unsigned char>(text[b]))) ++b;
    while (e > b && std::isspace(static_cast<unsigned char>(text[e - 1]))) --e;
    return sub(b, e - b);
  }
  bool empty() const { return text.empty(); }
};

struct Stmt {
  int line = 0;
  std::vector<Piece> labels;
  Piece head;  // mnemonic with suffixes, or .directive; empty on a label-only line
  std::vector<Piece> args;
  bool is_instr() const { return !head.empty() && head.text[0] != '.'; }
};

enum class SymKind { kCode, kData, kEqu };
struct SymDef {
  SymKind kind;
  int64_t value;
  int line;
};

const char* operand_name(char sig) {
  switch (sig) {
    case 'r':
      return "register";
    case 'd':
      return "descriptor";
    case 'c':
      return "color";
    case 't':
      return "task";
    case 'i':
      return "immediate";
    case 'F':
      return "float";
    case 'm':
      return "[rA+offset]";
    case 'l':
      return "label";
    case 'B':
      return "base";
    case 'L':
      return "length";
    case 'S':
      return "stride";
    default:
      return "?";
  }
}

// Three passes, because a program names things before defining them: (1) split lines, place
// code labels and count instructions, which fixes where data starts; (2) directives in order,
// laying out data; (3) instructions, which may use any label, data symbol or .equ.
class Assembler {
 public:
  Assembler(const std::string& file, const AsmTarget& target) : m_file(file), m_target(target) {}
  PeImage run(const std::string& text);

 private:
  [[noreturn]] void fail(const Piece& at, const std::string& msg) const {
    throw AsmError(m_file, m_line, at.col, msg);
  }
  void scan(const std::string& text);
  uint64_t code_bytes() const { return uint64_t{m_ninstr} * kInstrBytes; }
  Stmt lex(const std::string& line) const;
  void define(const Piece& name, SymKind kind, int64_t value);
  void directive(const Stmt& st);
  void instruction(const Stmt& st);
  void finish();

  void arg_count(const Stmt& st, size_t lo, size_t hi, const char* usage) const;
  void bind_queue(const Stmt& st, bool input);
  void task(const Stmt& st);
  void data(const Stmt& st, bool space);

  int64_t symbol(const Piece& name, unsigned allow, const std::string& what) const;
  int64_t value(const Piece& p, unsigned allow, const std::string& what) const;
  int64_t ranged(const Piece& p, unsigned allow, int64_t lo, int64_t hi,
                 const std::string& what) const;
  uint8_t reg(const Piece& p, char kind) const;
  uint32_t code_target(const Piece& p, const std::string& what) const;
  uint32_t float_bits(const Piece& p, NumFormat fmt) const;
  void mem(const Piece& p, uint8_t* reg_out, int32_t* off_out) const;

  const std::string& m_file;
  const AsmTarget& m_target;
  PeImage m_img;
  std::vector<Stmt> m_stmts;
  std::map<std::string, SymDef> m_syms;
  std::set<std::string> m_declared;  // every .data/.space/.equ name, for a better error
  int m_line = 0;                    // of the statement being processed, for errors
  uint32_t m_ninstr = 0;
  uint64_t m_dloc = 0;      // data location counter
  uint64_t m_data_end = 0;  // end of the last data block
  std::string m_last_data;  // its name
  int m_inq_line[kNumInputQueues] = {};
  int m_outq_line[kNumOutputQueues] = {};
  std::map<int, int> m_task_line;   // task id -> line of its .task
  std::map<int, int> m_color_task;  // color -> data task it triggers
  struct TaskColor {
    int line;
    Piece at;
    int color;
  };
  std::vector<TaskColor> m_task_colors;  // checked against the .inq bindings at the end
};

PeImage Assembler::run(const std::string& text) {
  if (!cb16_bias_valid(m_target.cb16_bias) || m_target.colors < 1 || m_target.colors > kMaxColors ||
      m_target.dsd_regs < 1 || m_target.dsd_regs > kMaxDsdRegs) {
    throw std::invalid_argument("invalid assembler target (cb16 bias, colors or dsd_regs)");
  }
  scan(text);
  // The code is not encoded yet, but its size is known: data starts after it, 8-byte aligned.
  m_dloc = m_data_end = (code_bytes() + 7) / 8 * 8;
  for (const Stmt& st : m_stmts) {
    m_line = st.line;
    if (!st.head.empty() && !st.is_instr()) directive(st);
  }
  for (const Stmt& st : m_stmts) {
    m_line = st.line;
    if (st.is_instr()) instruction(st);
  }
  finish();
  return std::move(m_img);
}

Stmt Assembler::lex(const std::string& raw) const {
  std::string line = raw;
  if (!line.empty() && line.back() == '\r') line.pop_back();
  const size_t semi = line.find(';'), slashes = line.find("//");
  line = line.substr(0, std::min(semi, slashes));
  Stmt st;
  st.line = m_line;
  Piece rest = Piece{line, 1}.trimmed();
  // Labels: identifiers followed by ':' at the start of the statement.
  for (;;) {
    const size_t n = ident_length(rest.text);
    if (n == 0) break;
    const Piece after = rest.sub(n).trimmed();
    if (after.empty() || after.text[0] != ':') break;
    st.labels.push_back(rest.sub(0, n));
    rest = after.sub(1).trimmed();
  }
  if (rest.empty()) return st;
  size_t h = 0;
  while (h < rest.text.size() && !std::isspace(static_cast<unsigned char>(rest.text[h]))) ++h;
  st.head = rest.sub(0, h);
  const Piece ops = rest.sub(h);
  if (ops.trimmed().empty()) return st;
  size_t start = 0;
  for (;;) {
    const size_t comma = ops.text.find(',', start);
    const Piece arg = ops.sub(start, comma == std::string::npos ? comma : comma - start).trimmed();
    if (arg.empty()) {
      if (comma != std::string::npos) fail(ops.sub(comma, 1), "missing operand before ','");
      fail(ops.sub(start - 1, 1), "missing operand after ','");
    }
    st.args.push_back(arg);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return st;
}

void Assembler::scan(const std::string& text) {
  std::istringstream in(text);
  std::string raw;
  std::vector<int> instr_lines;
  while (std::getline(in, raw)) {
    ++m_line;
    Stmt st = lex(raw);
    if (!st.labels.empty() && !st.head.empty() && !st.is_instr()) {
      fail(st.labels[0],
           "label '" + st.labels[0].text + "' before a directive: labels name instructions");
    }
    for (const Piece& l : st.labels) define(l, SymKind::kCode, m_ninstr);
    if (st.is_instr()) {
      ++m_ninstr;
      instr_lines.push_back(st.line);
    } else if (!st.head.empty() && !st.args.empty() &&
               (st.head.text == ".data" || st.head.text == ".space" || st.head.text == ".equ")) {
      m_declared.insert(st.args[0].text);
    }
    if (!st.labels.empty() || !st.head.empty()) m_stmts.push_back(std::move(st));
  }
  if (code_bytes() > m_target.sram_bytes) {
    const Stmt* first_over = nullptr;
    for (const Stmt& st : m_stmts) {
      if (st.is_instr() && st.line == instr_lines[m_target.sram_bytes / kInstrBytes]) {
        first_over = &st;
      }
    }
    m_line = first_over->line;
    fail(first_over->head, "image does not fit in SRAM: the code alone needs " +
                               std::to_string(code_bytes()) + " bytes, " +
                               std::to_string(code_bytes() - m_target.sram_bytes) +
                               " more than the target's " + std::to_string(m_target.sram_bytes));
  }
  m_img.code.reserve(m_ninstr);
}

void Assembler::define(const Piece& name, SymKind kind, int64_t value) {
  if (ident_length(name.text) != name.text.size()) {
    fail(name, "bad name '" + name.text + "': expected [A-Za-z_][A-Za-z0-9_.]*");
  }
  if (register_like(name.text)) fail(name, "'" + name.text + "' is a register name");
  const auto it = m_syms.find(name.text);
  if (it != m_syms.end()) {
    fail(name, std::string(kind == SymKind::kCode ? "duplicate label '" : "duplicate symbol '") +
                   name.text + "' (first defined on line " + std::to_string(it->second.line) + ")");
  }
  m_syms[name.text] = SymDef{kind, value, m_line};
  if (kind == SymKind::kCode) {
    Symbol s;
    s.name = name.text;
    s.addr = static_cast<uint32_t>(value);
    s.code = true;
    m_img.symbols.push_back(s);
  }
}

// ---- operands ----

int64_t Assembler::symbol(const Piece& name, unsigned allow, const std::string& what) const {
  const auto it = m_syms.find(name.text);
  if (it == m_syms.end()) {
    if (m_declared.count(name.text)) {
      fail(name, "'" + name.text +
                     "' is defined further down; directives can only use names defined above");
    }
    fail(name, "unknown symbol '" + name.text + "'");
  }
  if (it->second.kind == SymKind::kCode) {
    fail(name, "'" + name.text + "' is a code label; expected " + article(what) +
                   " (code labels are branch and .task targets)");
  }
  if (it->second.kind == SymKind::kData && !(allow & kData)) {
    fail(name, "'" + name.text + "' is a data address, but " + article(what) +
                   " must be a number or an .equ constant");
  }
  return it->second.value;
}

// A literal, or NAME, NAME+N, NAME-N for a .equ constant or (if allowed) a data symbol.
int64_t Assembler::value(const Piece& p, unsigned allow, const std::string& what) const {
  const std::string& t = p.text;
  int64_t v;
  const size_t n = ident_length(t);
  if (n == 0) {
    if (!parse_int(t, &v)) fail(p, "expected " + article(what) + ", got '" + t + "'");
    return v;
  }
  if (register_like(t.substr(0, n))) {
    fail(p, "expected " + article(what) + ", got register '" + t + "'");
  }
  const int64_t base = symbol(p.sub(0, n), allow, what);
  const Piece rest = p.sub(n).trimmed();
  if (rest.empty()) return base;
  const char op = rest.text[0];
  const Piece num = rest.sub(1).trimmed();
  if (op != '+' && op != '-') fail(rest, "unexpected '" + rest.text + "' after a name");
  if (num.empty() || num.text[0] == '-' || !parse_int(num.text, &v)) {
    fail(num.empty() ? rest : num, std::string("expected a number after '") + op + "'");
  }
  return op == '+' ? base + v : base - v;
}

int64_t Assembler::ranged(const Piece& p, unsigned allow, int64_t lo, int64_t hi,
                          const std::string& what) const {
  const int64_t v = value(p, allow, what);
  if (v < lo || v > hi) {
    std::string shown = p.text;
    if (ident_start(p.text[0])) shown += " (= " + std::to_string(v) + ")";
    fail(p, what + " " + shown + " out of range (" + std::to_string(lo) + ".." +
                std::to_string(hi) + ")");
  }
  return v;
}

uint8_t Assembler::reg(const Piece& p, char kind) const {
  const int limit = kind == 'r' ? kNumGprs : m_target.dsd_regs;
  const std::string want = std::string(kind == 'r' ? "general register " : "descriptor register ") +
                           kind + "0.." + kind + std::to_string(limit - 1) +
                           (kind == 'r' ? "" : " (the target has core.dsd_regs = " + std::to_string(limit) + ")");
  if (register_like(p.text) && p.text[0] == kind) {
    const std::string digits = p.text.substr(1);
    if (digits.size() <= 3 && (digits.size() == 1 || digits[0] != '0') &&
        std::stoi(digits) < limit) {
      return static_cast<uint8_t>(std::stoi(digits));
    }
    fail(p, "bad register '" + p.text + "': expected a " + want);
  }
  fail(p, "expected a " + want + ", got '" + p.text + "'");
}

uint32_t Assembler::code_target(const Piece& p, const std::string& what) const {
  int64_t v = -1;
  if (!p.empty() && p.text[0] == '@') {
    if (p.text.size() < 2 || !std::isdigit(static_cast<unsigned char>(p.text[1])) ||
        !parse_int(p.text.substr(1), &v)) {
      fail(p, "expected an instruction index @N, got '" + p.text + "'");
    }
  } else {
    if (ident_length(p.text) != p.text.size() || p.empty()) {
      fail(p, "expected a code label or @N, got '" + p.text + "'");
    }
    const auto it = m_syms.find(p.text);
    if (it == m_syms.end()) fail(p, "unknown label '" + p.text + "'");
    if (it->second.kind != SymKind::kCode) fail(p, "'" + p.text + "' is not a code label");
    v = it->second.value;
  }
  if (v >= m_ninstr) {
    fail(p, what + " '" + p.text + "' is past the end of code (" + std::to_string(m_ninstr) +
                " instructions)");
  }
  return static_cast<uint32_t>(v);
}

// A float literal (decimal, scientific, inf, nan) rounded to `fmt`, or 0x... taken as the raw
// bit pattern.
uint32_t Assembler::float_bits(const Piece& p, NumFormat fmt) const {
  const std::string& t = p.text;
  const int bits = fmt == NumFormat::kF32 ? 32 : 16;
  if (t.compare(0, 3, "-0x") == 0 || t.compare(0, 3, "-0X") == 0) {
    fail(p, "a raw bit pattern cannot be negative");
  }
  if (t.compare(0, 2, "0x") == 0 || t.compare(0, 2, "0X") == 0) {
    int64_t v;
    if (!parse_int(t, &v)) fail(p, "bad bit pattern '" + t + "'");
    if (v >= (int64_t{1} << bits)) {
      fail(p, "bit pattern " + t + " does not fit " + format_name(fmt) + " (" +
                  std::to_string(bits) + " bits)");
    }
    return static_cast<uint32_t>(v);
  }
  const char* b = t.data();
  const char* e = b + t.size();
  if (b != e && *b == '+') ++b;
  float f = 0;
  const auto r = std::from_chars(b, e, f);
  if (b == e || r.ptr != e || r.ec == std::errc::invalid_argument) {
    fail(p, "expected a float literal, got '" + t + "'");
  }
  if (r.ec == std::errc::result_out_of_range) fail(p, t + " is out of fp32 range");
  const uint32_t out = from_f32(fmt, f, m_target.cb16_bias);
  if (std::isfinite(f) && !std::isfinite(to_f32(fmt, out, m_target.cb16_bias))) {
    fail(p, t + " overflows " + format_name(fmt));
  }
  return out;
}

void Assembler::mem(const Piece& p, uint8_t* reg_out, int32_t* off_out) const {
  const std::string& t = p.text;
  if (t.size() < 2 || t.front() != '[' || t.back() != ']') {
    fail(p, "expected a memory operand [rA], [rA+N] or [rA-N], got '" + t + "'");
  }
  const Piece inner = p.sub(1, t.size() - 2).trimmed();
  size_t n = 0;
  while (n < inner.text.size() && std::isalnum(static_cast<unsigned char>(inner.text[n]))) ++n;
  *reg_out = reg(inner.sub(0, n), 'r');
  const Piece rest = inner.sub(n).trimmed();
  int64_t v = 0;
  if (!rest.empty()) {
    const Piece e = rest.sub(1).trimmed();
    if (rest.text[0] == '+') {
      v = value(e, kEqu | kData, "offset");
    } else if (rest.text[0] == '-' && !e.empty() &&
               std::isdigit(static_cast<unsigned char>(e.text[0]))) {
      v = -value(e, 0, "offset");
    } else {
      fail(rest, "expected '+NAME', '+N' or '-N' after the register, got '" + rest.text + "'");
    }
  }
  if (v < kI32Min || v > kI32Max) fail(p, "memory offset " + t + " out of range (int32)");
  *off_out = static_cast<int32_t>(v);
}

// ---- instructions ----

void Assembler::instruction(const Stmt& st) {
  const Piece& head = st.head;
  const size_t dot = head.text.find('.');
  const Piece mnem = head.sub(0, dot);
  Op op;
  if (!find_op(mnem.text, &op)) fail(mnem, "unknown mnemonic '" + mnem.text + "'");
  const OpInfo& info = op_info(op);
  Instr in;
  in.op = op;

  std::vector<Piece> fmts;
  for (size_t pos = dot; pos != std::string::npos;) {
    const size_t next = head.text.find('.', pos + 1);
    fmts.push_back(head.sub(pos + 1, next == std::string::npos ? next : next - pos - 1));
    pos = next;
  }
  const size_t max_fmts = !info.vector ? 0 : info.two_fmts ? 2 : 1;
  if (fmts.size() > max_fmts) {
    const Piece& extra = fmts[max_fmts];
    if (max_fmts == 0) fail(extra, "'" + mnem.text + "' takes no format suffix");
    fail(extra,
         "'" + mnem.text + "' takes " +
             (max_fmts == 1 ? "one format suffix" : "at most two format suffixes (.SRC.DST)"));
  }
  if (info.vector && fmts.empty()) {
    fail(head, "'" + mnem.text + "' needs a format suffix, e.g. " + mnem.text + ".fp32");
  }
  NumFormat parsed[2];
  for (size_t k = 0; k < fmts.size(); ++k) {
    if (!parse_format(fmts[k].text, &parsed[k])) {
      fail(fmts[k], "unknown format '" + fmts[k].text + "' (fp32, fp16, cb16, bf16)");
    }
  }
  if (!fmts.empty()) in.fmt = in.fmt2 = parsed[0];
  if (fmts.size() == 2) in.fmt2 = parsed[1];

  // Positional operands first, then keyword operands (async=, done=).
  std::vector<Piece> pos;
  std::vector<Piece> kw;
  for (const Piece& a : st.args) {
    const size_t n = ident_length(a.text);
    if (n > 0 && n < a.text.size() && a.text[n] == '=') {
      kw.push_back(a);
    } else if (!kw.empty()) {
      fail(a, "operand after '" + kw[0].text + "': keyword operands come last");
    } else {
      pos.push_back(a);
    }
  }
  std::string sig, usage;
  for (const char* s = info.signature; *s; ++s) {
    if (*s == ',') continue;
    sig += *s;
    usage += std::string(usage.empty() ? "" : ", ") + operand_name(*s);
  }
  if (pos.size() != sig.size()) {
    const std::string msg = "'" + mnem.text + "' takes " + std::to_string(sig.size()) + " operand" +
                            (sig.size() == 1 ? "" : "s") +
                            (usage.empty() ? "" : " (" + usage + ")") + ", got " +
                            std::to_string(pos.size());
    fail(pos.size() > sig.size() ? pos[sig.size()] : head, msg);
  }
  int slot = 0;
  for (size_t k = 0; k < sig.size(); ++k) {
    const Piece& p = pos[k];
    switch (sig[k]) {
      case 'r':
      case 'd':
        in.reg[slot++] = reg(p, sig[k]);
        break;
      case 'c':
        in.reg[slot++] = static_cast<uint8_t>(ranged(p, kEqu, 0, m_target.colors - 1, "color"));
        break;
      case 't':
        in.reg[slot++] = static_cast<uint8_t>(ranged(p, kEqu, 0, kMaxTasks - 1, "task"));
        break;
      case 'i':
        in.imm = static_cast<int32_t>(
            static_cast<uint32_t>(ranged(p, kEqu | kData, kI32Min, kU32Max, "immediate")));
        break;
      case 'F':
        in.imm = static_cast<int32_t>(float_bits(p, NumFormat::kF32));
        break;
      case 'm':
        mem(p, &in.reg[slot++], &in.imm);
        break;
      case 'l':
        in.imm = static_cast<int32_t>(code_target(p, "branch target"));
        break;
      case 'B':
        in.imm = static_cast<int32_t>(ranged(p, kEqu | kData, 0, kMaxBase, "dmem base"));
        break;
      case 'L':
        in.imm2 = static_cast<int32_t>(ranged(p, kEqu, 0, 65535, "length"));
        break;
      case 'S':
        in.imm3 = static_cast<int32_t>(ranged(p, kEqu, -2048, 2047, "stride"));
        break;
    }
  }

  const Piece* done_at = nullptr;
  for (const Piece& a : kw) {
    const size_t eq = a.text.find('=');
    const std::string key = a.text.substr(0, eq);
    const Piece val = a.sub(eq + 1).trimmed();
    if (key != "async" && key != "done") {
      fail(a, "unknown keyword operand '" + key + "=' (async=, done=)");
    }
    if (!info.vector) {
      fail(a, key + "= is only valid on vector ops; '" + mnem.text + "' is not one");
    }
    if (key == "async") {
      if (in.async) fail(a, "async= given twice");
      in.async = true;
      in.ut = static_cast<uint8_t>(ranged(val, kEqu, 0, kMaxMicrothreads - 1, "microthread"));
    } else {
      if (done_at) fail(a, "done= given twice");
      done_at = &a;
      const size_t colon = val.text.find(':');
      const Piece action = val.sub(0, colon);
      if (action.text == "activate") {
        in.done = DoneAction::kActivate;
      } else if (action.text == "unblock") {
        in.done = DoneAction::kUnblock;
      } else {
        fail(action, "unknown completion action '" + action.text + "' (activate, unblock)");
      }
      if (colon == std::string::npos) fail(val, "expected done=" + action.text + ":TASK");
      in.done_task = static_cast<uint8_t>(
          ranged(val.sub(colon + 1).trimmed(), kEqu, 0, kMaxTasks - 1, "task"));
    }
  }
  if (done_at && !in.async) {
    fail(*done_at, "done= needs async=: only an async op signals its completion");
  }
  try {
    m_img.code.push_back(encode(in));
  } catch (const std::invalid_argument& e) {
    fail(head, e.what());  // the checks above should make this unreachable
  }
}

// ---- directives ----

void Assembler::arg_count(const Stmt& st, size_t lo, size_t hi, const char* usage) const {
  if (st.args.size() < lo || st.args.size() > hi) {
    fail(st.args.size() > hi ? st.args[hi] : st.head,
         "wrong number of operands: expected " + st.head.text + " " + usage);
  }
}

void Assembler::directive(const Stmt& st) {
  const std::string& d = st.head.text;
  if (d == ".inq" || d == ".outq") {
    bind_queue(st, d == ".inq");
  } else if (d == ".task") {
    task(st);
  } else if (d == ".data" || d == ".space") {
    data(st, d == ".space");
  } else if (d == ".align") {
    arg_count(st, 1, 1, "N");
    const int64_t a = ranged(st.args[0], kEqu, 1, int64_t{1} << 20, "alignment");
    if (a & (a - 1)) fail(st.args[0], "alignment " + st.args[0].text + " is not a power of two");
    m_dloc = (m_dloc + a - 1) / a * a;
  } else if (d == ".org") {
    arg_count(st, 1, 1, "ADDR");
    const Piece& p = st.args[0];
    const int64_t a = ranged(p, kEqu | kData, 0, kU32Max, "address");
    if (a < static_cast<int64_t>(code_bytes())) {
      fail(p, ".org " + hex(a) + " is inside the code, which ends at " + hex(code_bytes()));
    }
    if (a < static_cast<int64_t>(m_data_end)) {
      fail(p, "overlapping data: .org " + hex(a) + " is below the end of '" + m_last_data + "' (" +
                  hex(m_data_end) + ")");
    }
    if (a > m_target.sram_bytes) {
      fail(p, ".org " + hex(a) + " is beyond SRAM (" + std::to_string(m_target.sram_bytes) +
                  " bytes)");
    }
    m_dloc = static_cast<uint64_t>(a);
  } else if (d == ".equ") {
    arg_count(st, 2, 2, "NAME, VALUE");
    define(st.args[0], SymKind::kEqu, ranged(st.args[1], kEqu | kData, kI32Min, kU32Max, "value"));
  } else {
    fail(st.head, "unknown directive '" + d + "'");
  }
}

void Assembler::bind_queue(const Stmt& st, bool input) {
  arg_count(st, 2, 2, "QUEUE, COLOR");
  const char* kind = input ? "input queue" : "output queue";
  const int n = input ? kNumInputQueues : kNumOutputQueues;
  int8_t* colors = input ? m_img.inq_color : m_img.outq_color;
  int* lines = input ? m_inq_line : m_outq_line;
  const int q = static_cast<int>(ranged(st.args[0], kEqu, 0, n - 1, kind));
  const int c = static_cast<int>(ranged(st.args[1], kEqu, 0, m_target.colors - 1, "color"));
  if (colors[q] >= 0) {
    fail(st.args[0], std::string(kind) + " " + std::to_string(q) + " is already bound to color " +
                         std::to_string(colors[q]) + " (line " + std::to_string(lines[q]) + ")");
  }
  for (int k = 0; k < n; ++k) {
    if (colors[k] == c) {
      fail(st.args[1], "color " + std::to_string(c) + " is already bound to " + kind + " " +
                           std::to_string(k) + " (line " + std::to_string(lines[k]) + ")");
    }
  }
  colors[q] = static_cast<int8_t>(c);
  lines[q] = m_line;
}

void Assembler::task(const Stmt& st) {
  arg_count(st, 2, 5, "ID, LABEL[, color=C][, active][, blocked]");
  TaskDecl t;
  const int id = static_cast<int>(ranged(st.args[0], kEqu, 0, kMaxTasks - 1, "task id"));
  const auto prev = m_task_line.find(id);
  if (prev != m_task_line.end()) {
    fail(st.args[0], "task " + std::to_string(id) + " is already declared (line " +
                         std::to_string(prev->second) + ")");
  }
  t.id = static_cast<uint8_t>(id);
  const Piece& entry = st.args[1];
  t.entry = code_target(entry, "task " + std::to_string(id) + " entry");
  if (entry.text[0] != '@') t.name = entry.text;
  std::set<std::string> seen;
  for (size_t k = 2; k < st.args.size(); ++k) {
    const Piece& a = st.args[k];
    const std::string key = a.text.substr(0, a.text.find('='));
    if (!seen.insert(key).second) fail(a, "duplicate .task option '" + key + "'");
    if (a.text == "active") {
      t.active = true;
    } else if (a.text == "blocked") {
      t.blocked = true;
    } else if (key == "color" && key.size() < a.text.size()) {
      const Piece c = a.sub(key.size() + 1).trimmed();
      t.color = static_cast<int>(ranged(c, kEqu, 0, m_target.colors - 1, "color"));
      const auto other = m_color_task.find(t.color);
      if (other != m_color_task.end()) {
        fail(c, "color " + std::to_string(t.color) + " already triggers task " +
                    std::to_string(other->second));
      }
      m_color_task[t.color] = id;
      m_task_colors.push_back(TaskColor{m_line, c, t.color});
    } else {
      fail(a, "unknown .task option '" + a.text + "' (color=C, active, blocked)");
    }
  }
  m_task_line[id] = m_line;
  m_img.tasks.push_back(t);
}

void Assembler::data(const Stmt& st, bool space) {
  if (space) {
    arg_count(st, 3, 3, "NAME, FORMAT, COUNT");
  } else {
    arg_count(st, 3, SIZE_MAX, "NAME, FORMAT, VALUE[, VALUE...]");
  }
  const Piece& name = st.args[0];
  const Piece& fp = st.args[1];
  Symbol sym;
  sym.name = name.text;
  if (fp.text == "i16" || fp.text == "i32") {
    sym.is_int = true;
    sym.elem_bytes = fp.text == "i16" ? 2 : 4;
  } else if (parse_format(fp.text, &sym.fmt)) {
    sym.elem_bytes = sym.fmt == NumFormat::kF32 ? 4 : 2;
  } else {
    fail(fp, "unknown data format '" + fp.text + "' (fp32, fp16, cb16, bf16, i16, i32)");
  }
  const uint32_t eb = sym.elem_bytes;
  // Elements are naturally aligned. The name is defined before the values are read, so a table
  // may hold its own address.
  const uint64_t addr = (m_dloc + eb - 1) / eb * eb;
  define(name, SymKind::kData, static_cast<int64_t>(addr));
  const uint64_t count =
      space ? static_cast<uint64_t>(ranged(st.args[2], kEqu, 1, m_target.sram_bytes, "count"))
            : st.args.size() - 2;
  const uint64_t end = addr + count * eb;
  if (end > m_target.sram_bytes) {
    fail(name, "image does not fit in SRAM: '" + name.text + "' ends at byte " +
                   std::to_string(end) + ", " + std::to_string(end - m_target.sram_bytes) +
                   " more than the target's " + std::to_string(m_target.sram_bytes));
  }
  DataBlock block;
  block.addr = static_cast<uint32_t>(addr);
  block.bytes.assign(count * eb, 0);
  for (size_t k = 0; !space && k < count; ++k) {
    const Piece& p = st.args[k + 2];
    uint32_t v;
    if (sym.is_int) {
      const int64_t lo = eb == 2 ? INT16_MIN : kI32Min;
      const int64_t hi = eb == 2 ? UINT16_MAX : kU32Max;
      v = static_cast<uint32_t>(ranged(p, kEqu | kData, lo, hi, fp.text + " value"));
    } else {
      v = float_bits(p, sym.fmt);
    }
    for (uint32_t b = 0; b < eb; ++b) block.bytes[k * eb + b] = static_cast<uint8_t>(v >> (8 * b));
  }
  sym.addr = block.addr;
  sym.count = static_cast<uint32_t>(count);
  m_img.symbols.push_back(sym);
  m_img.data.push_back(std::move(block));
  m_dloc = m_data_end = end;
  m_last_data = name.text;
}

void Assembler::finish() {
  if (m_img.tasks.empty()) {
    m_line = 1;
    fail(Piece{"", 1}, "no tasks: declare at least one .task");
  }
  for (const TaskColor& tc : m_task_colors) {
    const int color = tc.color;
    bool bound = false;
    for (int8_t q : m_img.inq_color) bound = bound || q == color;
    if (!bound) {
      m_line = tc.line;
      fail(tc.at, "no input queue takes color " + std::to_string(color) +
                      ", so this data task can never fire (add '.inq Q, " + std::to_string(color) +
                      "')");
    }
  }
}

}  // namespace

PeImage assemble(const std::string& text, const std::string& filename, const AsmTarget& target) {
  return Assembler(filename, target).run(text);
}

}  // namespace wafersim
