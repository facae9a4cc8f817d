// The fabric-program loader and its directory form: what it accepts and every bad input it
// must reject with a message naming the place.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <tuple>

#include <gtest/gtest.h>

#include "app/fabric_cmd.h"
#include "app/run_cmd.h"
#include "firmware/kernels/kernels.h"
#include "firmware/program.h"
#include "hw/fabric.h"
#include "test_support.h"

namespace wafersim::test {
namespace {

const char kHalt[] = ".task 0, main, active\n.space buf, fp32, 4\nmain:\n    halt\n";
const char kSend[] = ".outq 0, 2\n.task 0, main, active\n.space buf, fp32, 4\nmain:\n    dfout d0, 2, 4\n"
                     "    dmem d1, buf, 4, 1\n    vmov.fp32 d0, d1\n    halt\n";
const char kRecv[] = ".inq 0, 2\n.task 0, main, active\n.space buf, fp32, 4\nmain:\n    dfin d0, 2, 4\n"
                     "    dmem d1, buf, 4, 1\n    vmov.fp32 d1, d0\n    halt\n";

// The message of the ConfigError that loading `prog` on a w x h fabric throws ("" if none).
std::string load_error(const FabricProgram& prog, int w, int h, HwConfig hw = HwConfig{}) {
  hw.fabric.width = w;
  hw.fabric.height = h;
  Fabric f(hw);
  try {
    load_program(f, prog);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

FabricProgram two_pe_program() {
  FabricProgram p;
  const AsmTarget t;
  const int s = p.add_image("send", kSend, t), r = p.add_image("recv", kRecv, t);
  p.place(0, 0, s);
  p.place(2, 0, r);
  p.route(0, 0, 2, R, E);
  p.route(1, 0, 2, W, E);
  p.route(2, 0, 2, W, R);
  p.set_f32(0, 0, "buf", {1, 2, 3, 4});
  p.output("got", 2, 0, "buf");
  return p;
}

TEST(Program, ATwoPeProgramRunsAndReadsBack) {
  const FabricProgram p = two_pe_program();
  Fabric f(small_config(3, 1));
  const LoadedProgram lp = load_program(f, p);
  const RunResult r = run_to_completion(f, lp, 1000);
  EXPECT_TRUE(r.finished);
  const auto out = read_outputs(f, p);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].values, (std::vector<float>{1, 2, 3, 4}));
}

TEST(Program, OverlappingPlacementsAreRejected) {
  FabricProgram p = two_pe_program();
  p.place(2, 0, p.find_image("send"));
  const std::string e = load_error(p, 3, 1);
  EXPECT_NE(e.find("overlapping placements: PE (2, 0)"), std::string::npos) << e;
  EXPECT_NE(e.find("'recv'"), std::string::npos) << e;
}

TEST(Program, PlacementsAndRoutesOutsideTheFabricAreRejected) {
  const FabricProgram p = two_pe_program();
  std::string e = load_error(p, 2, 1);
  EXPECT_NE(e.find("PE (2, 0) is outside the 2 x 1 fabric"), std::string::npos) << e;
  EXPECT_NE(e.find("needs at least 3 x 1"), std::string::npos) << e;
  FabricProgram q = two_pe_program();
  q.route(2, 0, 2, W, R | N);  // the receiver also forwards north, off the fabric
  e = load_error(q, 3, 1);
  EXPECT_NE(e.find("leaves the fabric edge"), std::string::npos) << e;
  FabricProgram off;
  off.place(0, 0, off.add_image("h", kHalt, AsmTarget{}));
  off.route(5, 0, 1, W, E);
  e = load_error(off, 3, 1);
  EXPECT_NE(e.find("route of color 1 at PE (5, 0) is outside"), std::string::npos) << e;
}

TEST(Program, AnImageThatDoesNotFitTheCoreIsRejected) {
  FabricProgram p;
  AsmTarget big;
  big.sram_bytes = 64 * 1024;
  p.place(0, 0, p.add_image("huge", ".task 0, main, active\n.space big, fp32, 13000\nmain:\n    halt\n", big));
  const std::string e = load_error(p, 1, 1);  // the default core has 48 KB
  EXPECT_NE(e.find("image 'huge' at PE (0, 0) does not fit"), std::string::npos) << e;
}

TEST(Program, DataForUnknownSymbolsOrTooLargeIsRejected) {
  FabricProgram p = two_pe_program();
  p.set_f32(2, 0, "nope", {1});
  std::string e = load_error(p, 3, 1);
  EXPECT_NE(e.find("image 'recv' has no data symbol 'nope'"), std::string::npos) << e;
  FabricProgram q = two_pe_program();
  q.set_f32(0, 0, "buf", {1, 2, 3, 4, 5});
  e = load_error(q, 3, 1);
  EXPECT_NE(e.find("20 bytes at offset 0 do not fit its 16 bytes"), std::string::npos) << e;
  FabricProgram r = two_pe_program();
  r.set_f32(1, 0, "buf", {1});
  e = load_error(r, 3, 1);
  EXPECT_NE(e.find("PE (1, 0), which runs no image"), std::string::npos) << e;
}

// --- the directory form ---

class ProgramFile : public ::testing::Test {
 protected:
  void SetUp() override {
    dir = tmp_path(std::string("prog_") + ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir);
    save_program(two_pe_program(), dir);
  }
  void write(const std::string& rel, const std::string& text) {
    std::ofstream(dir + "/" + rel) << text;
  }
  std::string error() {
    try {
      load_program_file(dir, AsmTarget{});
    } catch (const std::exception& e) {
      return e.what();
    }
    return "";
  }
  std::string dir;
};

TEST_F(ProgramFile, RoundTripsThroughTheDirectoryForm) {
  const FabricProgram p = load_program_file(dir, AsmTarget{});
  const FabricProgram q = two_pe_program();
  ASSERT_EQ(p.images.size(), q.images.size());
  for (size_t i = 0; i < p.images.size(); ++i) EXPECT_TRUE(p.images[i].image == q.images[i].image);
  EXPECT_EQ(p.routes.size(), q.routes.size());
  ASSERT_EQ(p.data.size(), 1u);
  EXPECT_EQ(p.data[0].bytes, q.data[0].bytes);
  EXPECT_EQ(p.min_width, 3);
}

// Format /2 (docs/program.md): placements and routes as runs of PEs east and south, data and
// outputs as rows in order, zero patches without bytes. A program of every shape reads back as
// the same placements and routes (as sets: a PE has one image, a (PE, color) one route) and the
// same data and outputs in the same order; with a route given twice, the rows keep the order so
// that the last still wins; with an address patch, the data stay objects.
TEST_F(ProgramFile, CompactRowsReadBackAsTheSameProgram) {
  auto key_routes = [](const FabricProgram& p) {
    std::map<std::tuple<int, int, int>, std::string> m;
    for (const RouteSpec& r : p.routes) {
      std::string v = std::to_string(r.route.npos) + (r.route.hold ? "h" : "");
      for (int i = 0; i < r.route.npos; ++i) v += ":" + std::to_string(r.route.pos[i].rx) + "/" + std::to_string(r.route.pos[i].tx);
      m[{r.x, r.y, r.color}] = v;  // the last one wins, as on the fabric
    }
    return m;
  };
  auto key_places = [](const FabricProgram& p) {
    std::set<std::tuple<int, int, int>> s;
    for (const Placement& q : p.placements) s.insert({q.x, q.y, q.image});
    return s;
  };
  for (const bool twice : {false, true}) {
    for (const bool address : {false, true}) {
      FabricProgram q;
      const AsmTarget t;
      const int h = q.add_image("h", kHalt, t), s2 = q.add_image("s", kSend, t);
      for (int y = 0; y < 6; ++y) {
        for (int x = 0; x < 7; ++x) {
          if ((x + 2 * y) % 5 == 0) continue;  // holes: runs of every length, east and south
          q.place(x, y, (x * y) % 3 == 0 ? h : s2);
          q.route(x, y, 1, W, E | R);
          if (x == 3) q.route(x, y, 2, N, S);
          q.set_f32(x, y, "buf", {static_cast<float>(x), static_cast<float>(y), 0, 1});
          q.set_f32(x, y, "buf", {0, 0});  // zeros: no bytes stored
          q.output("o" + std::to_string(y), x, y, "buf", 2, 1);
        }
      }
      ColorRoute sw;
      sw.npos = 2;
      sw.pos[0] = {W, E};
      sw.pos[1] = {W, R};
      q.route(1, 1, 3, sw);
      if (twice) q.route(2, 2, 1, N, S);  // a second route for (2, 2) color 1: it wins
      if (address) q.set_data(0, 1, "", {1, 2, 3, 4}, 4096);
      std::filesystem::remove_all(dir);
      save_program(q, dir);
      std::ifstream f(dir + "/program.json");
      const std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
      EXPECT_NE(text.find("\"wafersim-program/2\""), std::string::npos);
      EXPECT_NE(text.find("\"placement_rows\""), std::string::npos);
      EXPECT_EQ(text.find("\"data_rows\"") == std::string::npos, address) << "address patches keep the object form";
      const FabricProgram p = load_program_file(dir, t);
      EXPECT_EQ(key_places(p), key_places(q));
      EXPECT_EQ(key_routes(p), key_routes(q));
      ASSERT_EQ(p.data.size(), q.data.size());
      for (size_t i = 0; i < p.data.size(); ++i) {
        EXPECT_EQ(p.data[i].x, q.data[i].x);
        EXPECT_EQ(p.data[i].y, q.data[i].y);
        EXPECT_EQ(p.data[i].symbol, q.data[i].symbol);
        EXPECT_EQ(p.data[i].offset, q.data[i].offset);
        EXPECT_EQ(p.data[i].bytes, q.data[i].bytes) << i;
      }
      ASSERT_EQ(p.outputs.size(), q.outputs.size());
      for (size_t i = 0; i < p.outputs.size(); ++i) {
        EXPECT_EQ(std::tie(p.outputs[i].name, p.outputs[i].x, p.outputs[i].y, p.outputs[i].symbol, p.outputs[i].offset, p.outputs[i].count),
                  std::tie(q.outputs[i].name, q.outputs[i].x, q.outputs[i].y, q.outputs[i].symbol, q.outputs[i].offset, q.outputs[i].count));
      }
      if (!twice) {  // 34 placements and 41 routes in runs: fewer than half a line each
        const size_t a = text.find("\"placement_rows\""), b = text.find("\"routes\"");
        ASSERT_LT(a, b);
        EXPECT_LT(std::count(text.begin() + static_cast<long>(a), text.begin() + static_cast<long>(b), '\n'), 37);
      }
    }
  }
  // Bad rows are named.
  write("program.json", R"({"format": "wafersim-program/2", "images": [{"name": "h", "source": "images/h.s"}],
    "placement_rows": [[0, 0, 0, 0]]})");
  EXPECT_NE(error().find("placement_rows[0]: n (element 2) must not be 0"), std::string::npos) << error();
  write("program.json", R"({"format": "wafersim-program/2", "images": [{"name": "h", "source": "images/h.s"}],
    "placement_rows": [[0, 0, 1, 0]], "data_rows": [[0, 0, "buf", 0, 16, 99999999]]})");
  EXPECT_NE(error().find("data_rows[0]: 16 bytes at offset 99999999 are past the end of 'data.bin'"), std::string::npos) << error();
  write("program.json", R"({"format": "wafersim-program/1", "route_rows": []})");
  EXPECT_NE(error().find("'route_rows' needs format \"wafersim-program/2\""), std::string::npos) << error();
  write("program.json", R"({"format": "wafersim-program/2", "output_rows": [["y", 0, 0, "buf", 0]]})");
  EXPECT_NE(error().find("output_rows[0]: must be a list of 6 elements"), std::string::npos) << error();
}

TEST_F(ProgramFile, HandWrittenJsonWithValuesAndSwitchPositions) {
  write("program.json", R"({"format": "wafersim-program/1", "images": [{"name": "h", "source": "images/send.s"}],
    "placements": [{"at": [0, 0], "image": "h"}],
    "routes": [{"at": [0, 0], "color": 2, "positions": [{"rx": "R", "tx": "E"}, {"rx": "R", "tx": "S"}]}],
    "data": [{"at": [0, 0], "symbol": "buf", "values": [1.5, 2, 3, 4]}]})");
  const FabricProgram p = load_program_file(dir, AsmTarget{});
  // Both switch positions, each with its own ports, in the order written.
  ASSERT_EQ(p.routes.size(), 1u);
  const RouteSpec& r = p.routes[0];
  EXPECT_EQ(r.x, 0);
  EXPECT_EQ(r.y, 0);
  EXPECT_EQ(r.color, 2);
  ASSERT_EQ(r.route.npos, 2);
  EXPECT_EQ(r.route.pos[0].rx, R);
  EXPECT_EQ(r.route.pos[0].tx, E);
  EXPECT_EQ(r.route.pos[1].rx, R);
  EXPECT_EQ(r.route.pos[1].tx, S);
  EXPECT_FALSE(r.route.hold);
  // Every value, as fp32 in order (the integer 2 included), and nothing more.
  ASSERT_EQ(p.data.size(), 1u);
  EXPECT_EQ(p.data[0].symbol, "buf");
  EXPECT_EQ(p.data[0].offset, 0u);
  ASSERT_EQ(p.data[0].bytes.size(), 16u);
  std::vector<float> v(4);
  std::memcpy(v.data(), p.data[0].bytes.data(), 16);
  EXPECT_EQ(v, (std::vector<float>{1.5f, 2, 3, 4}));
}

// "hold" (the last switch position stays) is kept through the directory form.
TEST_F(ProgramFile, HoldingSwitchPositionsRoundTrip) {
  FabricProgram q = two_pe_program();
  ColorRoute cr;
  cr.npos = 2;
  cr.hold = true;
  cr.pos[0] = {R, E};
  cr.pos[1] = {W, E};
  q.route(1, 0, 7, cr);
  save_program(q, dir);
  const FabricProgram p = load_program_file(dir, AsmTarget{});
  bool seen = false;
  for (const RouteSpec& r : p.routes) {
    if (r.color != 7) continue;
    seen = true;
    EXPECT_TRUE(r.route.hold);
    ASSERT_EQ(r.route.npos, 2);
    EXPECT_EQ(r.route.pos[1].rx, W);
  }
  EXPECT_TRUE(seen);
}

TEST_F(ProgramFile, MalformedFilesGiveClearErrors) {
  write("program.json", "{\"format\": \"wafersim-program/1\", \"images\": [");
  EXPECT_NE(error().find("not valid JSON"), std::string::npos) << error();
  write("program.json", R"({"format": "wafersim-program/1", "placement": []})");
  EXPECT_NE(error().find("unknown key 'placement'"), std::string::npos) << error();
  write("program.json", R"({"format": "other"})");
  EXPECT_NE(error().find("'format' must be"), std::string::npos) << error();
  write("program.json", R"({"format": "wafersim-program/1", "images": [{"name": "a", "source": "images/none.s"}]})");
  EXPECT_NE(error().find("cannot read image source"), std::string::npos) << error();
  write("program.json", R"({"format": "wafersim-program/1", "placements": [{"at": [0, 0], "image": "x"}]})");
  EXPECT_NE(error().find("placements[0]: unknown image 'x'"), std::string::npos) << error();
  write("program.json", R"({"format": "wafersim-program/1", "routes": [{"at": [0, 0], "color": 30, "rx": "R", "tx": "E"}]})");
  EXPECT_NE(error().find("routes[0]: 'color' must be an integer in [0, 23]"), std::string::npos) << error();
  write("program.json", R"({"format": "wafersim-program/1", "routes": [{"at": [0, 0], "color": 1, "rx": "Q", "tx": "E"}]})");
  EXPECT_NE(error().find("ports are N, S, E, W, R"), std::string::npos) << error();
  write("program.json", R"({"format": "wafersim-program/1", "routes": [{"at": [0, 0], "color": 1, "rx": "R", "tx": "E", "hold": true}]})");
  EXPECT_NE(error().find("routes[0]: 'hold' needs 'positions'"), std::string::npos) << error();
  write("program.json", R"({"format": "wafersim-program/1", "routes": [{"at": [0, 0], "color": 1, "hold": 1,
    "positions": [{"rx": "R", "tx": "E"}, {"rx": "W", "tx": "E"}]}]})");
  EXPECT_NE(error().find("'hold' must be true or false"), std::string::npos) << error();
  write("program.json", R"({"format": "wafersim-program/1", "routes": [{"at": [-1, 0], "color": 1, "rx": "R", "tx": "E"}]})");
  EXPECT_NE(error().find("non-negative PE coordinates"), std::string::npos) << error();
  write("images/bad.s", ".task 0, main, active\nmain:\n    vadx d0, d1, d2\n");
  write("program.json", R"({"format": "wafersim-program/1", "images": [{"name": "b", "source": "images/bad.s"}]})");
  EXPECT_NE(error().find("bad.s:3:5: unknown mnemonic 'vadx'"), std::string::npos) << error();
  write("program.json", R"({"format": "wafersim-program/1", "images": [{"name": "h", "source": "images/send.s"}],
    "placements": [{"at": [0, 0], "image": "h"}],
    "data": [{"at": [0, 0], "symbol": "buf", "file": "data.bin", "file_offset": 8, "bytes": 100}]})");
  EXPECT_NE(error().find("past the end of 'data.bin'"), std::string::npos) << error();
}

// --- the commands' bad input (in-process; each returns before the simulation starts) ---

int run_cmd(const std::vector<std::string>& args, std::string* err_text) {
  std::ostringstream out, err;
  const int rc = run_program_command(args, out, err);
  *err_text = err.str();
  return rc;
}

TEST_F(ProgramFile, RunCommandRejectsBadInputWithUsageExit) {
  std::string e;
  EXPECT_EQ(run_cmd({}, &e), kExitUsage);
  EXPECT_NE(e.find("no program given"), std::string::npos) << e;
  EXPECT_EQ(run_cmd({dir, "--core.sram_kb", "0"}, &e), kExitUsage);
  EXPECT_NE(e.find("core.sram_kb"), std::string::npos) << e;
  EXPECT_EQ(run_cmd({dir, "--core.fancy", "1"}, &e), kExitUsage);
  EXPECT_NE(e.find("unrecognised option"), std::string::npos) << e;
  EXPECT_EQ(run_cmd({dir, "--fabric.width", "2"}, &e), kExitUsage);
  EXPECT_NE(e.find("outside the 2 x 1 fabric"), std::string::npos) << e;
  EXPECT_EQ(run_cmd({dir + "/missing"}, &e), kExitUsage);
  EXPECT_NE(e.find("cannot read program"), std::string::npos) << e;
  EXPECT_EQ(run_cmd({dir, "--trace.vcd", "x.vcd"}, &e), kExitUsage);
  EXPECT_NE(e.find("trace.region"), std::string::npos) << e;
}

// A number no double can hold is malformed JSON too: a usage error naming the file, not an
// internal error (fuzz_program found the JSON parser's out_of_range escaping as exit 1).
TEST_F(ProgramFile, NumberTooLargeForJsonIsUsageError) {
  write("program.json", R"({"format": "wafersim-program/1", "fabric": {"min_width": 1e999}})");
  std::string e;
  EXPECT_EQ(run_cmd({dir}, &e), kExitUsage);
  EXPECT_NE(e.find(dir + "/program.json: not valid JSON"), std::string::npos) << e;
}

TEST(KernelCommand, RejectsUnknownKernelsAndShapes) {
  auto run = [](const std::vector<std::string>& args) {
    std::ostringstream out, err;
    const int rc = kernel_command(args, out, err);
    return std::make_pair(rc, err.str());
  };
  const std::string out = tmp_path("kernel_cmd");
  auto [rc, e] = run({"sort", "-o", out});
  EXPECT_EQ(rc, kExitUsage);
  EXPECT_NE(e.find("kernel 'sort' is unknown"), std::string::npos) << e;
  std::tie(rc, e) = run({"gemv", "--kernel.m", "100", "--kernel.w", "3", "-o", out});
  EXPECT_EQ(rc, kExitUsage);
  EXPECT_NE(e.find("does not tile evenly"), std::string::npos) << e;
  std::tie(rc, e) = run({"gemv", "--kernel.m", "1024", "--kernel.n", "1024", "--kernel.w", "2", "--kernel.h", "2", "-o", out});
  EXPECT_EQ(rc, kExitUsage);
  EXPECT_NE(e.find("use more PEs"), std::string::npos) << e;
  std::tie(rc, e) = run({"gemv", "--kernel.format", "fp8", "-o", out});
  EXPECT_EQ(rc, kExitUsage);
  EXPECT_NE(e.find("kernel.format 'fp8' is unknown"), std::string::npos) << e;
  std::tie(rc, e) = run({"elementwise", "--kernel.op", "tanh", "-o", out});
  EXPECT_EQ(rc, kExitUsage);
  EXPECT_NE(e.find("elementwise op 'tanh' is unknown"), std::string::npos) << e;
}

// Shapes no fabric can hold, or that would wrap around, are usage errors before anything is
// built (a 4096 x 4096 gemv used to run out of memory; kernel.len -1 to hang).
TEST(KernelCommand, RejectsShapesBeforeBuildingThem) {
  const std::string out = tmp_path("kernel_cmd_shapes");
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"reduce", "--kernel.len", "-1"}, "kernel.len must not be negative"},
      {{"gemv", "--kernel.m", "-1"}, "kernel.m must not be negative"},
      {{"broadcast", "--kernel.len", "0"}, "kernel.len must be in [1, 24576]"},
      {{"reduce", "--kernel.len", "1000000"}, "kernel.len must be in [1, 24576]"},
      {{"gemv", "--kernel.w", "4096", "--kernel.h", "4096"}, "16777216 PEs; at most 1048576"},
      {{"gemv", "--kernel.w", "8", "--kernel.h", "4096", "--kernel.n", "8"}, "kernel.h must be at most 4095"},
      {{"gemv", "--kernel.m", "65536", "--kernel.n", "65536"}, "is over 2^30 elements"},
      {{"pingpong", "--kernel.distance", "99999"}, "kernel.distance must be in [1, 4095]"},
      {{"pingpong", "--kernel.rounds", "0"}, "kernel.rounds must be at least 1"},
      {{"gemv", "--kernel.reps", "0"}, "kernel.reps and kernel.rounds must be at least 1"},
  };
  for (const auto& [args, msg] : cases) {
    std::vector<std::string> a = args;
    a.insert(a.end(), {"-o", out});
    std::ostringstream o, e;
    EXPECT_EQ(kernel_command(a, o, e), kExitUsage) << args[0] << " " << args[1];
    EXPECT_NE(e.str().find(msg), std::string::npos) << e.str();
  }
  std::ostringstream o, e;
  EXPECT_EQ(kernel_command({"gemv", "-o", ""}, o, e), kExitUsage);
  EXPECT_NE(e.str().find("-o needs the directory"), std::string::npos) << e.str();
}

}  // namespace
}  // namespace wafersim::test
