// Elementwise ops on every PE of a rectangle, and the ping-pong bandwidth test.
#include "firmware/kernels/kernels.h"

#include "hw/config.h"

namespace wafersim::kernels {

bool elementwise_binary(const std::string& op) {
  if (op == "add" || op == "sub" || op == "mul" || op == "max" || op == "cmpgt") return true;
  if (op == "relu" || op == "exp" || op == "recip") return false;
  throw ConfigError("elementwise op '" + op + "' is unknown (add, sub, mul, max, cmpgt, relu, exp, recip)");
}

void add_elementwise(FabricProgram& prog, const ElementwiseParams& p, const std::vector<std::vector<float>>& data_a,
                     const std::vector<std::vector<float>>& data_b, const AsmTarget& t) {
  const Rect& r = p.rect;
  if (r.w < 1 || r.h < 1 || r.x0 < 0 || r.y0 < 0) throw ConfigError("elementwise: bad rectangle");
  const bool binary = elementwise_binary(p.op);
  const size_t pes = static_cast<size_t>(r.w) * r.h;
  if (data_a.size() != pes || (binary && data_b.size() != pes)) throw ConfigError("elementwise: need one vector per PE");
  const std::string F = format_name(p.fmt), L = std::to_string(p.len);
  PeAsm a;
  a.task("0, main, active");
  a.data(".space a, " + F + ", " + L);
  if (binary) a.data(".space b, " + F + ", " + L);
  a.data(".space c, " + F + ", " + L);
  a << "main:";
  const std::string da = a.mem("a", p.len), db = binary ? a.mem("b", p.len) : "", dc = a.mem("c", p.len);
  a << "v" + p.op + "." + F + " " + dc + ", " + da + (binary ? ", " + db : "") << "halt";
  const int img = intern_image(prog, "elementwise_" + p.op, a.text(), t);
  for (int y = r.y0; y < r.y0 + r.h; ++y) {
    for (int x = r.x0; x < r.x0 + r.w; ++x) {
      const size_t i = static_cast<size_t>(y - r.y0) * r.w + (x - r.x0);
      if (data_a[i].size() != p.len || (binary && data_b[i].size() != p.len)) {
        throw ConfigError("elementwise: every vector needs len elements");
      }
      prog.place(x, y, img);
      prog.set_data(x, y, "a", encode(p.fmt, data_a[i], t.cb16_bias));
      if (binary) prog.set_data(x, y, "b", encode(p.fmt, data_b[i], t.cb16_bias));
      prog.output("c." + std::to_string(x) + "." + std::to_string(y), x, y, "c");
    }
  }
}

void add_pingpong(FabricProgram& prog, const PingPongParams& p, const std::vector<float>& data, const AsmTarget& t) {
  if (p.distance < 1 || p.x0 < 0 || p.y0 < 0) throw ConfigError("pingpong: distance must be at least 1");
  if (p.len < 1 || p.rounds < 1) throw ConfigError("pingpong: len and rounds must be at least 1");
  if (data.size() != p.len) throw ConfigError("pingpong: need len values");
  need_colors("pingpong", p.color_base, 2, t);
  const int go = p.color_base, back = p.color_base + 1;
  const std::string L = std::to_string(p.len), R = std::to_string(p.rounds);
  PeAsm a;  // the initiator: sends on a microthread while the main thread takes the echo
  a.task("0, main, active");
  a.data(".space buf, fp32, " + L);
  a.data(".space echo, fp32, " + L);
  a << "main:" << "li r0, 0" << "li r1, " + R;
  const std::string out = a.fout(go, p.len), in = a.fin(back, p.len), db = a.mem("buf", p.len),
                    de = a.mem("echo", p.len);
  a << "loop:" << "vmov.fp32 " + out + ", " + db + ", async=0" << "vmov.fp32 " + de + ", " + in
    << "addi r1, r1, -1" << "bne r1, r0, loop" << "halt";
  PeAsm b;  // the echo: fabric to fabric
  b.task("0, main, active");
  b << "main:" << "li r0, 0" << "li r1, " + R;
  const std::string bin = b.fin(go, p.len), bout = b.fout(back, p.len);
  b << "loop:" << "vmov.fp32 " + bout + ", " + bin << "addi r1, r1, -1" << "bne r1, r0, loop" << "halt";
  const int xa = p.x0, xb = p.x0 + p.distance, y = p.y0;
  prog.place(xa, y, intern_image(prog, "ping", a.text(), t));
  prog.place(xb, y, intern_image(prog, "pong", b.text(), t));
  prog.set_f32(xa, y, "buf", data);
  RouteTable routes;
  routes.path(xa, y, xb, y, go);
  routes.path(xb, y, xa, y, back);
  routes.emit(prog);
  prog.output("echo", xa, y, "echo");
}

}  // namespace wafersim::kernels
