// STREAM on every PE: one vector op over SRAM, timed by the core's cycle counter, as the CS-2
// measurements of leightonw-cerebras/stream were taken (docs/validation.md).
#include "firmware/kernels/kernels.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "hw/config.h"

namespace wafersim::kernels {

int stream_sources(const std::string& op) {
  if (op == "copy" || op == "scale") return 1;
  if (op == "add" || op == "triad") return 2;
  throw ConfigError("stream op '" + op + "' is unknown (copy, scale, add, triad)");
}

float stream_reference(const std::string& op, float a, float b, float scalar, NumFormat fmt, int cb16_bias) {
  float v = a;
  if (op == "scale") v = a * scalar;
  if (op == "add") v = a + b;
  if (op == "triad") v = std::fma(b, scalar, a);
  return round_to(fmt, v, cb16_bias);
}

double timed_span(const std::vector<OutputValues>& out) {
  double start = 1e300, end = 0;
  for (const OutputValues& o : out) {
    if (o.name.rfind("t.", 0) != 0) continue;
    if (o.values.size() != 2) throw std::runtime_error("timed output " + o.name + " needs 2 values (start, end)");
    start = std::min(start, static_cast<double>(o.values[0]));
    end = std::max(end, static_cast<double>(o.values[1]));
  }
  if (end < start) throw std::runtime_error("no timed outputs (t.X.Y) to take a span from");
  return end - start;
}

void add_stream(FabricProgram& prog, const StreamParams& p, const std::vector<std::vector<float>>& src0,
                const std::vector<std::vector<float>>& src1, const AsmTarget& t) {
  const Rect& r = p.rect;
  if (r.w < 1 || r.h < 1 || r.x0 < 0 || r.y0 < 0) throw ConfigError("stream: bad rectangle");
  const int nsrc = stream_sources(p.op);
  if (p.len < 1 || p.len > 65535) throw ConfigError("stream: len must be in [1, 65535] (one descriptor)");
  const size_t pes = static_cast<size_t>(r.w) * r.h;
  if (src0.size() != pes || (nsrc == 2 && src1.size() != pes)) throw ConfigError("stream: need one vector per PE");
  const std::string F = format_name(p.fmt);
  // The published kernel's layout: every array 16-byte aligned, the k-th operand's descriptor
  // starting k * skew elements in (1 for fp32, 3 for 16-bit), so that the operands of one step
  // fall in different banks; the arrays are declared one after another.
  const int eb = p.fmt == NumFormat::kF32 ? 4 : 2;
  const uint32_t skew = eb == 4 ? 1 : 3;
  const std::vector<std::string> arrays = nsrc == 2 ? std::vector<std::string>{"src0", "src1", "dest"}
                                                    : std::vector<std::string>{"src0", "dest"};
  PeAsm a;
  a.task("0, main, active");
  for (size_t k = 0; k < arrays.size(); ++k) {
    a.data(".align 16");
    a.data(".space " + arrays[k] + ", " + F + ", " + std::to_string(p.len + k * skew));
  }
  a.data(".align 4");
  a.data(".space cycles, i32, 1");
  a << "main:";

  auto at = [&](size_t k) {
    const std::string d = a.dsd();
    a << "dmem " + d + ", " + arrays[k] + "+" + std::to_string(k * skew * eb) + ", " + std::to_string(p.len) + ", 1";
    return d;
  };
  const std::string s0 = at(0), s1 = nsrc == 2 ? at(1) : "", dd = at(arrays.size() - 1);
  std::string op;
  if (p.op == "copy") op = "vmov." + F + " " + dd + ", " + s0;
  if (p.op == "scale") op = "vmuls." + F + " " + dd + ", " + s0 + ", r2";
  if (p.op == "add") op = "vadd." + F + " " + dd + ", " + s0 + ", " + s1;
  if (p.op == "triad") op = "vfmacs." + F + " " + dd + ", " + s0 + ", " + s1 + ", r2";
  a << "lif r2, " + f32_literal(p.scalar) << "li r0, 0";
  if (p.warmup > 0) a << "li r1, " + std::to_string(p.warmup) << "warm:" << op << "addi r1, r1, -1" << "bne r1, r0, warm";
  a << "tsc r3" << op << "tsc r4" << "sub r5, r4, r3" << "st32 [r0+cycles], r5" << "halt";
  const int img = intern_image(prog, "stream_" + p.op, a.text(), t);
  for (int y = r.y0; y < r.y0 + r.h; ++y) {
    for (int x = r.x0; x < r.x0 + r.w; ++x) {
      const size_t i = static_cast<size_t>(y - r.y0) * r.w + (x - r.x0);
      if (src0[i].size() != p.len || (nsrc == 2 && src1[i].size() != p.len)) {
        throw ConfigError("stream: every vector needs len elements");
      }
      prog.place(x, y, img);
      prog.set_data(x, y, "src0", encode(p.fmt, src0[i], t.cb16_bias));
      if (nsrc == 2) prog.set_data(x, y, "src1", encode(p.fmt, src1[i], t.cb16_bias), static_cast<uint32_t>(skew * eb));
      const std::string xy = std::to_string(x) + "." + std::to_string(y);
      prog.output("dest." + xy, x, y, "dest", p.len, static_cast<uint32_t>((arrays.size() - 1) * skew));
      prog.output("cycles." + xy, x, y, "cycles");
    }
  }
}

}  // namespace wafersim::kernels
