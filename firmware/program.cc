#include "firmware/program.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <cstdlib>
#include <tuple>
#include <unordered_set>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "hw/atomic_file.h"
#include "hw/fabric.h"
#include "hw/file_read.h"
#include "hw/pe_core.h"

namespace wafersim {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// Written: /2 (rows of numbers for placements, routes, data and outputs, built without a JSON
// document in memory); read: /1 and /2.
constexpr const char* kFormat = "wafersim-program/2";
constexpr const char* kFormat1 = "wafersim-program/1";

std::string at(int x, int y) { return "(" + std::to_string(x) + ", " + std::to_string(y) + ")"; }

// Where each PE's placement is, for data, outputs and symbol look-ups.
std::map<std::pair<int, int>, int> placement_map(const FabricProgram& p, bool reject_duplicates) {
  std::map<std::pair<int, int>, int> m;
  for (const Placement& pl : p.placements) {
    auto [it, fresh] = m.emplace(std::make_pair(pl.x, pl.y), pl.image);
    if (!fresh && reject_duplicates) {
      throw ConfigError("overlapping placements: PE " + at(pl.x, pl.y) + " is given image '" +
                        p.images[static_cast<size_t>(it->second)].name + "' and image '" +
                        p.images[static_cast<size_t>(pl.image)].name + "'");
    }
  }
  return m;
}

const Symbol& data_symbol(const FabricProgram& p, const std::map<std::pair<int, int>, int>& where, int x, int y,
                          const std::string& sym, const char* what) {
  const auto it = where.find({x, y});
  if (it == where.end()) {
    throw ConfigError(std::string(what) + " for PE " + at(x, y) + ", which runs no image");
  }
  const ProgramImage& im = p.images[static_cast<size_t>(it->second)];
  const Symbol* s = im.image.find(sym);
  if (!s || s->code) {
    throw ConfigError(std::string(what) + " for PE " + at(x, y) + ": image '" + im.name + "' has no data symbol '" +
                      sym + "'");
  }
  return *s;
}

}  // namespace

AsmTarget asm_target(const HwConfig& hw) {
  AsmTarget t;
  t.sram_bytes = static_cast<uint32_t>(hw.core.sram_kb) * 1024;
  t.colors = hw.router.colors;
  t.dsd_regs = hw.core.dsd_regs;
  t.cb16_bias = hw.core.cb16_bias;
  return t;
}

// --- building ---

int FabricProgram::add_image(const std::string& name, const std::string& source, const AsmTarget& target) {
  if (find_image(name) >= 0) throw ConfigError("program '" + this->name + "': image '" + name + "' defined twice");
  images.push_back({name, source, assemble(source, name + ".s", target)});
  return static_cast<int>(images.size()) - 1;
}

int FabricProgram::find_image(const std::string& n) const {
  for (size_t i = 0; i < images.size(); ++i) {
    if (images[i].name == n) return static_cast<int>(i);
  }
  return -1;
}

void FabricProgram::cover(int x, int y) {
  min_width = std::max(min_width, x + 1);
  min_height = std::max(min_height, y + 1);
}

void FabricProgram::place(int x, int y, int image) {
  placements.push_back({x, y, image});
  cover(x, y);
}

void FabricProgram::route(int x, int y, int color, uint8_t rx, uint8_t tx) {
  route(x, y, color, ColorRoute::simple(rx, tx));
}

void FabricProgram::route(int x, int y, int color, const ColorRoute& r) {
  routes.push_back({x, y, color, r});
  cover(x, y);
}

void FabricProgram::set_data(int x, int y, const std::string& symbol, const std::vector<uint8_t>& bytes,
                             uint32_t offset) {
  data.push_back({x, y, symbol, offset, bytes});
}

void FabricProgram::set_f32(int x, int y, const std::string& symbol, const std::vector<float>& values) {
  std::vector<uint8_t> b(values.size() * 4);
  if (!values.empty()) std::memcpy(b.data(), values.data(), b.size());
  set_data(x, y, symbol, b);
}

void FabricProgram::output(const std::string& n, int x, int y, const std::string& symbol, uint32_t count,
                           uint32_t offset) {
  outputs.push_back({n, x, y, symbol, offset, count});
}

// --- loading onto a fabric ---

LoadedProgram load_program(Fabric& fabric, const FabricProgram& prog) {
  const HwConfig& hw = fabric.config();
  auto inside = [&](int x, int y, const std::string& what) {
    if (!fabric.contains(x, y)) {
      throw ConfigError(what + " at PE " + at(x, y) + " is outside the " + std::to_string(fabric.width()) + " x " +
                        std::to_string(fabric.height()) + " fabric (program '" + prog.name + "' needs at least " +
                        std::to_string(prog.min_width) + " x " + std::to_string(prog.min_height) + ")");
    }
  };
  for (const Placement& pl : prog.placements) {
    if (pl.image < 0 || static_cast<size_t>(pl.image) >= prog.images.size()) {
      throw ConfigError("placement at PE " + at(pl.x, pl.y) + " names image #" + std::to_string(pl.image) +
                        ", which does not exist");
    }
    inside(pl.x, pl.y, "image '" + prog.images[static_cast<size_t>(pl.image)].name + "'");
  }
  const auto where = placement_map(prog, true);
  for (const RouteSpec& r : prog.routes) inside(r.x, r.y, "route of color " + std::to_string(r.color));
  for (const DataPatch& d : prog.data) {
    if (d.symbol.empty()) continue;
    const Symbol& s = data_symbol(prog, where, d.x, d.y, d.symbol, "data");
    const uint64_t room = uint64_t{s.elem_bytes} * s.count;
    if (d.offset + d.bytes.size() > room) {
      throw ConfigError("data for PE " + at(d.x, d.y) + " symbol '" + d.symbol + "': " +
                        std::to_string(d.bytes.size()) + " bytes at offset " + std::to_string(d.offset) +
                        " do not fit its " + std::to_string(room) + " bytes");
    }
  }

  LoadedProgram out;
  std::map<std::pair<int, int>, PeCore*> core_at;
  for (const Placement& pl : prog.placements) {
    const ProgramImage& im = prog.images[static_cast<size_t>(pl.image)];
    std::unique_ptr<PeCore> core;
    try {
      core = std::make_unique<PeCore>(hw.core, im.image, static_cast<uint32_t>(pl.y) * fabric.width() + pl.x,
                                      Fabric::pe_name(pl.x, pl.y));
    } catch (const ConfigError& e) {
      throw ConfigError("image '" + im.name + "' at PE " + at(pl.x, pl.y) + " does not fit: " + e.what());
    }
    out.cores.push_back(core.get());
    out.images.push_back(&im.image);
    core_at[{pl.x, pl.y}] = core.get();
    fabric.attach_agent(pl.x, pl.y, std::move(core));
  }
  for (const RouteSpec& r : prog.routes) fabric.set_route(r.x, r.y, r.color, r.route);
  for (const DataPatch& d : prog.data) {
    PeCore* core = core_at.count({d.x, d.y}) ? core_at[{d.x, d.y}] : nullptr;
    if (!core) throw ConfigError("data for PE " + at(d.x, d.y) + ", which runs no image");
    uint64_t addr = d.offset;
    if (!d.symbol.empty()) addr += data_symbol(prog, where, d.x, d.y, d.symbol, "data").addr;
    const PeImage& img = prog.images[static_cast<size_t>(where.at({d.x, d.y}))].image;
    if (addr < img.code_bytes() || addr + d.bytes.size() > core->sram_bytes()) {
      throw ConfigError("data for PE " + at(d.x, d.y) + " at address " + std::to_string(addr) + " (" +
                        std::to_string(d.bytes.size()) + " bytes) overlaps code or leaves SRAM");
    }
    if (!d.bytes.empty()) {
      core->write_bytes(static_cast<uint32_t>(addr), d.bytes.data(), static_cast<uint32_t>(d.bytes.size()));
    }
  }
  fabric.finalize();
  return out;
}

bool program_done(const Fabric& fabric, const LoadedProgram& loaded, size_t* first) {
  while (*first < loaded.cores.size() && loaded.cores[*first]->halted()) ++*first;
  if (*first < loaded.cores.size()) return false;
  for (const PeCore* c : loaded.cores) {
    if (c->has_work()) return false;
  }
  return fabric.in_flight() == 0;
}

RunResult run_to_completion(Fabric& fabric, const LoadedProgram& loaded, uint64_t max_cycles) {
  size_t first = 0;
  const uint64_t stop = fabric.cycle() + max_cycles;
  while (!program_done(fabric, loaded, &first)) {
    if (fabric.cycle() >= stop) return {fabric.cycle(), false};
    fabric.step();
  }
  return {fabric.cycle(), true};
}

std::vector<OutputValues> read_outputs(const Fabric& fabric, const FabricProgram& prog) {
  const auto where = placement_map(prog, false);
  std::vector<OutputValues> res;
  for (const OutputSpec& o : prog.outputs) {
    const Symbol& s = data_symbol(prog, where, o.x, o.y, o.symbol, "output");
    const uint32_t count = o.count ? o.count : s.count;
    if (o.offset + uint64_t{count} > s.count) {
      throw ConfigError("output '" + o.name + "' at PE " + at(o.x, o.y) + " reads past symbol '" + o.symbol + "'");
    }
    const auto* core = dynamic_cast<const PeCore*>(fabric.agent(o.x, o.y));
    if (!core) throw ConfigError("output '" + o.name + "': PE " + at(o.x, o.y) + " has no core");
    // A binary image's symbol table is not bounded by the image's bytes: what an output reads
    // must lie in the core's SRAM.
    const uint64_t first = s.addr + uint64_t{o.offset} * s.elem_bytes, bytes = uint64_t{count} * s.elem_bytes;
    if (first + bytes > core->sram_bytes()) {
      throw ConfigError("output '" + o.name + "' at PE " + at(o.x, o.y) + " reads " + std::to_string(bytes) + " bytes of symbol '" + o.symbol +
                        "' at address " + std::to_string(first) + ", past the core's " + std::to_string(core->sram_bytes()) + " bytes of SRAM");
    }
    if (res.empty() || res.back().name != o.name) res.push_back({o.name, {}});
    std::vector<uint8_t> raw(size_t{count} * s.elem_bytes);
    core->read_bytes(s.addr + o.offset * s.elem_bytes, raw.data(), static_cast<uint32_t>(raw.size()));
    for (uint32_t i = 0; i < count; ++i) {
      uint32_t bits = 0;
      std::memcpy(&bits, &raw[size_t{i} * s.elem_bytes], s.elem_bytes);
      float v;
      if (s.is_int) {
        v = s.elem_bytes == 2 ? static_cast<float>(static_cast<int16_t>(bits)) : static_cast<float>(static_cast<int32_t>(bits));
      } else {
        v = to_f32(s.fmt, bits, fabric.config().core.cb16_bias);
      }
      res.back().values.push_back(v);
    }
  }
  return res;
}

// --- the directory form ---

namespace {

json xy(int x, int y) { return json::array({x, y}); }

json route_json(const RouteSpec& r) {
  json j = {{"at", xy(r.x, r.y)}, {"color", r.color}};
  if (r.route.npos == 1) {
    j["rx"] = port_set_name(r.route.pos[0].rx);
    j["tx"] = port_set_name(r.route.pos[0].tx);
  } else {
    json pos = json::array();
    for (int i = 0; i < r.route.npos; ++i) {
      pos.push_back({{"rx", port_set_name(r.route.pos[i].rx)}, {"tx", port_set_name(r.route.pos[i].tx)}});
    }
    j["positions"] = pos;
    if (r.route.hold) j["hold"] = true;
  }
  return j;
}

}  // namespace

namespace {

// The PEs of one kind (one image, one route) as runs: [x, y, n] covers n PEs eastward from
// (x, y) when n > 0, -n southward when n < 0. East runs first, over the PEs sorted by row; the
// PEs left alone then go into south runs.
std::vector<std::array<int, 3>> pe_runs(std::vector<std::pair<int, int>> pes) {
  std::vector<std::array<int, 3>> runs;
  std::sort(pes.begin(), pes.end(), [](const auto& a, const auto& b) { return a.second != b.second ? a.second < b.second : a.first < b.first; });
  std::vector<std::pair<int, int>> single;
  for (size_t i = 0; i < pes.size();) {
    size_t j = i + 1;
    while (j < pes.size() && pes[j].second == pes[i].second && pes[j].first == pes[j - 1].first + 1) ++j;
    if (j - i == 1) single.push_back(pes[i]);
    else runs.push_back({pes[i].first, pes[i].second, static_cast<int>(j - i)});
    i = j;
  }
  std::sort(single.begin(), single.end());
  for (size_t i = 0; i < single.size();) {
    size_t j = i + 1;
    while (j < single.size() && single[j].first == single[i].first && single[j].second == single[j - 1].second + 1) ++j;
    runs.push_back({single[i].first, single[i].second, j - i == 1 ? 1 : -static_cast<int>(j - i)});
    i = j;
  }
  return runs;
}

// A JSON string (the library's escaping; bytes that are not UTF-8 replaced, as before).
std::string jstr(const std::string& s) { return json(s).dump(-1, ' ', false, json::error_handler_t::replace); }

}  // namespace

// The program is written as text directly, row by row (format /2): a 50 M-parameter model has
// millions of data patches, routes and outputs, and a JSON document of them took ten times the
// memory of the compile itself. Placements and single-position routes are written as runs of
// PEs (pe_runs); data and output rows keep the order of their lists (the loader applies them in
// it); a data patch of zeros stores no bytes.
void save_program(const FabricProgram& prog, const std::string& dir) {
  fs::create_directories(fs::path(dir) / "images");
  std::string t;
  t.reserve(64 * (prog.placements.size() + prog.routes.size() + prog.data.size() + prog.outputs.size()) / 2 + 4096);
  auto num = [&](long long v) { t += std::to_string(v); };
  t += "{\n \"format\": \"";
  t += kFormat;
  t += "\",\n \"name\": " + jstr(prog.name) + ",\n \"fabric\": {\"min_width\": " + std::to_string(prog.min_width) +
       ", \"min_height\": " + std::to_string(prog.min_height) + "},\n \"images\": [";
  for (size_t i = 0; i < prog.images.size(); ++i) {
    const ProgramImage& im = prog.images[i];
    t += i ? ",\n  " : "\n  ";
    if (!im.source.empty()) {
      const std::string rel = "images/" + im.name + ".s";
      write_file_atomic((fs::path(dir) / rel).string(), im.source);
      t += "{\"name\": " + jstr(im.name) + ", \"source\": " + jstr(rel) + "}";
    } else {
      const std::string rel = "images/" + im.name + ".wsimg";
      save_image_file(im.image, (fs::path(dir) / rel).string());
      t += "{\"name\": " + jstr(im.name) + ", \"binary\": " + jstr(rel) + "}";
    }
  }
  // [x, y, n, image] and [x, y, n, color, rx, tx]: runs of PEs (pe_runs) with the same image,
  // the same single-position route. A PE has one image; a PE's route for a color is its last
  // one, so routes are grouped only when no (PE, color) is given twice (else a row per route,
  // in order).
  t += "],\n \"placement_rows\": [";
  {
    std::map<int, std::vector<std::pair<int, int>>> by;
    for (const Placement& p : prog.placements) by[p.image].push_back({p.x, p.y});
    bool first_row = true;
    for (const auto& [image, pes] : by) {
      for (const auto& r : pe_runs(pes)) {
        t += first_row ? "\n[" : ",\n[";
        first_row = false;
        num(r[0]), t += ",", num(r[1]), t += ",", num(r[2]), t += ",", num(image), t += "]";
      }
    }
  }
  t += "],\n \"route_rows\": [";
  {
    std::unordered_set<uint64_t> seen;
    bool twice = false;
    for (const RouteSpec& r : prog.routes) {
      twice = twice || !seen.insert((static_cast<uint64_t>(r.x) << 40) | (static_cast<uint64_t>(r.y) << 16) | static_cast<uint64_t>(r.color)).second;
    }
    std::map<std::tuple<int, uint8_t, uint8_t>, std::vector<std::pair<int, int>>> by;
    bool first_row = true;
    auto put = [&](int x, int y, int n, int color, uint8_t rx, uint8_t tx) {
      t += first_row ? "\n[" : ",\n[";
      first_row = false;
      num(x), t += ",", num(y), t += ",", num(n), t += ",", num(color);
      t += ",\"" + port_set_name(rx) + "\",\"" + port_set_name(tx) + "\"]";
    };
    for (const RouteSpec& r : prog.routes) {
      if (r.route.npos != 1) continue;
      if (twice) put(r.x, r.y, 1, r.color, r.route.pos[0].rx, r.route.pos[0].tx);
      else by[{r.color, r.route.pos[0].rx, r.route.pos[0].tx}].push_back({r.x, r.y});
    }
    for (const auto& [key, pes] : by) {
      for (const auto& r : pe_runs(pes)) put(r[0], r[1], r[2], std::get<0>(key), std::get<1>(key), std::get<2>(key));
    }
  }
  t += "],\n \"routes\": [";
  bool first = true;
  for (const RouteSpec& r : prog.routes) {
    if (r.route.npos == 1) continue;
    t += first ? "\n  " : ",\n  ";
    first = false;
    t += route_json(r).dump();
  }
  // Data: [x, y, symbol, offset, bytes, file_offset] rows (file_offset -1: zeros, no bytes
  // stored) while every patch names a symbol; a program with an address patch keeps the objects
  // (the two lists would lose their relative order).
  std::string blob;
  const bool rows = std::all_of(prog.data.begin(), prog.data.end(), [](const DataPatch& d) { return !d.symbol.empty(); });
  t += "],\n \"";
  t += rows ? "data_rows" : "data";
  t += "\": [";
  for (size_t i = 0; i < prog.data.size(); ++i) {
    const DataPatch& d = prog.data[i];
    const bool zero = std::all_of(d.bytes.begin(), d.bytes.end(), [](uint8_t b) { return b == 0; });
    t += i ? ",\n" : "\n";
    if (rows) {
      t += "[", num(d.x), t += ",", num(d.y), t += "," + jstr(d.symbol) + ",", num(d.offset), t += ",";
      num(static_cast<long long>(d.bytes.size())), t += ",", num(zero ? -1 : static_cast<long long>(blob.size())), t += "]";
    } else {
      json e = {{"at", xy(d.x, d.y)}, {"file", "data.bin"}, {"file_offset", blob.size()}, {"bytes", d.bytes.size()}};
      if (!d.symbol.empty()) e["symbol"] = d.symbol;
      e[d.symbol.empty() ? "address" : "offset"] = d.offset;
      t += e.dump(-1, ' ', false, json::error_handler_t::replace);
    }
    if (!rows || !zero) blob.append(reinterpret_cast<const char*>(d.bytes.data()), d.bytes.size());
  }
  // [name, x, y, symbol, offset, count], in order (consecutive names form one vector).
  t += "],\n \"output_rows\": [";
  for (size_t i = 0; i < prog.outputs.size(); ++i) {
    const OutputSpec& o = prog.outputs[i];
    t += i ? ",\n[" : "\n[";
    t += jstr(o.name) + ",", num(o.x), t += ",", num(o.y), t += "," + jstr(o.symbol) + ",", num(o.offset), t += ",", num(o.count), t += "]";
  }
  t += "]\n}\n";
  write_file_atomic((fs::path(dir) / "data.bin").string(), blob);
  write_file_atomic((fs::path(dir) / "program.json").string(), t);
}

namespace {

// Reads JSON fields with user-facing errors: "program.json: routes[3]: 'color' must be ...".
class Reader {
 public:
  explicit Reader(std::string file) : m_file(std::move(file)) {}
  [[noreturn]] void fail(const std::string& where, const std::string& msg) const {
    throw ConfigError(m_file + ": " + where + (where.empty() ? "" : ": ") + msg);
  }
  void only(const json& j, const std::string& where, std::initializer_list<const char*> keys) const {
    if (!j.is_object()) fail(where, "must be an object");
    for (auto it = j.begin(); it != j.end(); ++it) {
      if (std::none_of(keys.begin(), keys.end(), [&](const char* k) { return it.key() == k; })) {
        fail(where, "unknown key '" + it.key() + "'");
      }
    }
  }
  const json& need(const json& j, const std::string& where, const char* key) const {
    if (!j.contains(key)) fail(where, std::string("missing '") + key + "'");
    return j[key];
  }
  int integer(const json& j, const std::string& where, const char* key, int lo, int hi) const {
    const json& v = need(j, where, key);
    if (!v.is_number_integer() || v.get<int64_t>() < lo || v.get<int64_t>() > hi) {
      fail(where, std::string("'") + key + "' must be an integer in [" + std::to_string(lo) + ", " +
                      std::to_string(hi) + "]");
    }
    return static_cast<int>(v.get<int64_t>());
  }
  // A whole number in [0, hi]; a larger one is an error, never wrapped to fit the field.
  uint64_t count(const json& j, const std::string& where, const char* key, uint64_t dflt, uint64_t hi) const {
    if (!j.contains(key)) return dflt;
    const json& v = j[key];
    if ((!v.is_number_unsigned() && !(v.is_number_integer() && v.get<int64_t>() >= 0)) || v.get<uint64_t>() > hi) {
      fail(where, std::string("'") + key + "' must be an integer in [0, " + std::to_string(hi) + "]");
    }
    return v.get<uint64_t>();
  }
  std::string str(const json& j, const std::string& where, const char* key) const {
    const json& v = need(j, where, key);
    if (!v.is_string()) fail(where, std::string("'") + key + "' must be a string");
    return v.get<std::string>();
  }
  std::pair<int, int> pos(const json& j, const std::string& where) const {
    const json& v = need(j, where, "at");
    if (!v.is_array() || v.size() != 2 || !v[0].is_number_integer() || !v[1].is_number_integer()) {
      fail(where, "'at' must be [x, y]");
    }
    const int64_t x = v[0].get<int64_t>(), y = v[1].get<int64_t>();
    if (x < 0 || y < 0 || x > 100000 || y > 100000) fail(where, "'at' must be non-negative PE coordinates");
    return {static_cast<int>(x), static_cast<int>(y)};
  }
  uint8_t ports(const json& j, const std::string& where, const char* key) const {
    const std::string s = str(j, where, key);
    uint8_t m = 0;
    for (char c : s) {
      int p = 0;
      if (c == '+' || c == ',' || c == ' ') continue;
      if (!parse_port(c, &p)) fail(where, std::string("'") + key + "' = '" + s + "': ports are N, S, E, W, R");
      m |= port_bit(p);
    }
    return m;
  }

 private:
  std::string m_file;
};

// Program files, image sources and data files are read whole; none is near this size.
constexpr uint64_t kMaxProgramFileBytes = uint64_t{1} << 30;

std::string read_text(const fs::path& p, const std::string& what) {
  std::string bytes, why;
  if (!read_regular_file(p.string(), kMaxProgramFileBytes, &bytes, &why)) {
    throw ConfigError("cannot read " + what + " '" + p.string() + "': it " + why);
  }
  return bytes;
}

}  // namespace

FabricProgram load_program_file(const std::string& path, const AsmTarget& target) {
  fs::path file(path);
  if (fs::is_directory(file)) file /= "program.json";
  const fs::path dir = file.parent_path();
  const Reader rd(file.string());
  json j;
  try {
    j = json::parse(read_text(file, "program"));
  } catch (const json::exception& e) {  // parse_error, or out_of_range for a number no double holds
    rd.fail("", std::string("not valid JSON (") + e.what() + ")");
  }
  rd.only(j, "", {"format", "name", "fabric", "images", "placements", "routes", "data", "outputs", "placement_rows", "route_rows",
                  "data_rows", "output_rows"});
  const std::string format = rd.str(j, "", "format");
  if (format != kFormat && format != kFormat1) rd.fail("", std::string("'format' must be \"") + kFormat + "\" (or \"" + kFormat1 + "\")");
  if (format == kFormat1) {
    for (const char* k : {"placement_rows", "route_rows", "data_rows", "output_rows"}) {
      if (j.contains(k)) rd.fail("", std::string("'") + k + "' needs format \"" + kFormat + "\"");
    }
  }
  // A row of a /2 list: an array of exactly `n` elements.
  auto row = [&](const json& e, const std::string& w, size_t n) {
    if (!e.is_array() || e.size() != n) rd.fail(w, "must be a list of " + std::to_string(n) + " elements");
  };
  auto row_int = [&](const json& e, const std::string& w, size_t i, int64_t lo, int64_t hi, const char* what) {
    if (!e[i].is_number_integer() || e[i].get<int64_t>() < lo || e[i].get<int64_t>() > hi) {
      rd.fail(w, std::string(what) + " (element " + std::to_string(i) + ") must be an integer in [" + std::to_string(lo) + ", " +
                     std::to_string(hi) + "]");
    }
    return e[i].get<int64_t>();
  };
  auto row_str = [&](const json& e, const std::string& w, size_t i, const char* what) {
    if (!e[i].is_string()) rd.fail(w, std::string(what) + " (element " + std::to_string(i) + ") must be a string");
    return e[i].get<std::string>();
  };
  FabricProgram p;
  if (j.contains("name")) p.name = rd.str(j, "", "name");
  if (j.contains("fabric")) {
    rd.only(j["fabric"], "fabric", {"min_width", "min_height"});
    p.min_width = static_cast<int>(rd.count(j["fabric"], "fabric", "min_width", 0, kMaxFabricSide));
    p.min_height = static_cast<int>(rd.count(j["fabric"], "fabric", "min_height", 0, kMaxFabricSide));
  }
  auto list = [&](const char* key) -> const json& {
    static const json empty = json::array();
    if (!j.contains(key)) return empty;
    if (!j[key].is_array()) rd.fail(key, "must be a list");
    return j[key];
  };
  int n = 0;
  for (const json& e : list("images")) {
    const std::string w = "images[" + std::to_string(n++) + "]";
    rd.only(e, w, {"name", "source", "binary"});
    const std::string name = rd.str(e, w, "name");
    if (p.find_image(name) >= 0) rd.fail(w, "image '" + name + "' defined twice");
    if (e.contains("source") == e.contains("binary")) rd.fail(w, "give exactly one of 'source' and 'binary'");
    if (e.contains("source")) {
      const fs::path src = dir / rd.str(e, w, "source");
      p.images.push_back({name, read_text(src, "image source"), {}});
      p.images.back().image = assemble(p.images.back().source, src.string(), target);
    } else {
      const fs::path bin = dir / rd.str(e, w, "binary");
      try {
        p.images.push_back({name, "", load_image_file(bin.string())});
      } catch (const std::runtime_error& ex) {
        rd.fail(w, ex.what());
      }
    }
  }
  n = 0;
  for (const json& e : list("placements")) {
    const std::string w = "placements[" + std::to_string(n++) + "]";
    rd.only(e, w, {"at", "image"});
    const auto [x, y] = rd.pos(e, w);
    const std::string name = rd.str(e, w, "image");
    const int im = p.find_image(name);
    if (im < 0) rd.fail(w, "unknown image '" + name + "'");
    p.place(x, y, im);
  }
  // The PEs of a run [x, y, n, ...]: n eastward from (x, y) when n > 0, -n southward when n < 0.
  auto run_pes = [&](const json& e, const std::string& w) {
    const int64_t x = row_int(e, w, 0, 0, 100000, "x"), y = row_int(e, w, 1, 0, 100000, "y");
    const int64_t count = row_int(e, w, 2, -100000, 100000, "n");
    if (count == 0) rd.fail(w, "n (element 2) must not be 0");
    std::vector<std::pair<int, int>> pes;
    for (int64_t k = 0; k < std::abs(count); ++k) pes.emplace_back(static_cast<int>(count > 0 ? x + k : x), static_cast<int>(count > 0 ? y : y + k));
    return pes;
  };
  n = 0;
  for (const json& e : list("placement_rows")) {
    const std::string w = "placement_rows[" + std::to_string(n++) + "]";
    row(e, w, 4);
    const auto pes = run_pes(e, w);
    const int64_t im = row_int(e, w, 3, 0, static_cast<int64_t>(p.images.size()) - 1, "image");
    for (const auto& [x, y] : pes) p.place(x, y, static_cast<int>(im));
  }
  n = 0;
  for (const json& e : list("route_rows")) {
    const std::string w = "route_rows[" + std::to_string(n++) + "]";
    row(e, w, 6);
    const auto pes = run_pes(e, w);
    const int color = static_cast<int>(row_int(e, w, 3, 0, target.colors - 1, "color"));
    const json ports = {{"rx", e[4]}, {"tx", e[5]}};
    if (!e[4].is_string() || !e[5].is_string()) rd.fail(w, "rx and tx (elements 4 and 5) must be strings");
    const ColorRoute r = ColorRoute::simple(rd.ports(ports, w, "rx"), rd.ports(ports, w, "tx"));
    for (const auto& [x, y] : pes) p.route(x, y, color, r);
  }
  n = 0;
  for (const json& e : list("routes")) {
    const std::string w = "routes[" + std::to_string(n++) + "]";
    rd.only(e, w, {"at", "color", "rx", "tx", "positions", "hold"});
    const auto [x, y] = rd.pos(e, w);
    const int color = rd.integer(e, w, "color", 0, target.colors - 1);
    ColorRoute r;
    if (e.contains("positions")) {
      if (e.contains("rx") || e.contains("tx")) rd.fail(w, "give either 'rx'/'tx' or 'positions'");
      const json& ps = e["positions"];
      if (!ps.is_array() || ps.empty() || ps.size() > kMaxSwitchPositions) {
        rd.fail(w, "'positions' must list 1 to " + std::to_string(kMaxSwitchPositions) + " switch positions");
      }
      r.npos = static_cast<uint8_t>(ps.size());
      for (size_t i = 0; i < ps.size(); ++i) {
        const std::string wi = w + ".positions[" + std::to_string(i) + "]";
        rd.only(ps[i], wi, {"rx", "tx"});
        r.pos[i] = {rd.ports(ps[i], wi, "rx"), rd.ports(ps[i], wi, "tx")};
      }
      if (e.contains("hold")) {
        if (!e["hold"].is_boolean()) rd.fail(w, "'hold' must be true or false");
        r.hold = e["hold"].get<bool>();
      }
    } else {
      if (e.contains("hold")) rd.fail(w, "'hold' needs 'positions'");
      r.pos[0] = {rd.ports(e, w, "rx"), rd.ports(e, w, "tx")};
    }
    p.route(x, y, color, r);
  }
  n = 0;
  std::string blob;
  bool have_blob = false;
  const auto where = placement_map(p, false);
  for (const json& e : list("data")) {
    const std::string w = "data[" + std::to_string(n++) + "]";
    rd.only(e, w, {"at", "symbol", "offset", "address", "values", "file", "file_offset", "bytes"});
    const auto [x, y] = rd.pos(e, w);
    DataPatch d;
    d.x = x;
    d.y = y;
    if (e.contains("symbol") == e.contains("address")) rd.fail(w, "give exactly one of 'symbol' and 'address'");
    if (e.contains("symbol")) {
      d.symbol = rd.str(e, w, "symbol");
      d.offset = static_cast<uint32_t>(rd.count(e, w, "offset", 0, UINT32_MAX));
    } else {
      d.offset = static_cast<uint32_t>(rd.count(e, w, "address", 0, UINT32_MAX));
    }
    if (e.contains("values") == e.contains("file")) rd.fail(w, "give exactly one of 'values' and 'file'");
    if (e.contains("values")) {
      if (d.symbol.empty()) rd.fail(w, "'values' need a 'symbol' (its format converts them)");
      const Symbol& s = data_symbol(p, where, x, y, d.symbol, (file.string() + ": " + w + ": data").c_str());
      const json& vs = e["values"];
      if (!vs.is_array()) rd.fail(w, "'values' must be a list of numbers");
      for (const json& v : vs) {
        if (!v.is_number()) rd.fail(w, "'values' must be a list of numbers");
        uint32_t bits;
        if (s.is_int) {
          if (!v.is_number_integer()) rd.fail(w, "symbol '" + d.symbol + "' holds integers");
          bits = static_cast<uint32_t>(v.get<int64_t>());
        } else {
          bits = from_f32(s.fmt, v.get<float>(), target.cb16_bias);
        }
        for (uint32_t b = 0; b < s.elem_bytes; ++b) d.bytes.push_back(static_cast<uint8_t>(bits >> (8 * b)));
      }
    } else {
      const std::string rel = rd.str(e, w, "file");
      if (!have_blob || rel != "data.bin") {
        blob = read_text(dir / rel, "data file");
        have_blob = rel == "data.bin";
      }
      const uint64_t off = rd.count(e, w, "file_offset", 0, UINT64_MAX);
      const uint64_t len = rd.count(e, w, "bytes", blob.size() > off ? blob.size() - off : 0, UINT64_MAX);
      if (off > blob.size() || len > blob.size() - off) {
        rd.fail(w, std::to_string(len) + " bytes at offset " + std::to_string(off) + " are past the end of '" + rel +
                       "' (" + std::to_string(blob.size()) + " bytes)");
      }
      d.bytes.assign(blob.begin() + static_cast<std::ptrdiff_t>(off), blob.begin() + static_cast<std::ptrdiff_t>(off + len));
    }
    p.data.push_back(std::move(d));
  }
  n = 0;
  for (const json& e : list("data_rows")) {
    const std::string w = "data_rows[" + std::to_string(n++) + "]";
    row(e, w, 6);
    DataPatch d;
    d.x = static_cast<int>(row_int(e, w, 0, 0, 100000, "x"));
    d.y = static_cast<int>(row_int(e, w, 1, 0, 100000, "y"));
    d.symbol = row_str(e, w, 2, "symbol");
    d.offset = static_cast<uint32_t>(row_int(e, w, 3, 0, UINT32_MAX, "offset"));
    const auto len = static_cast<uint64_t>(row_int(e, w, 4, 0, UINT32_MAX, "bytes"));
    const int64_t off = row_int(e, w, 5, -1, INT64_MAX, "file_offset");
    if (off < 0) {
      d.bytes.assign(len, 0);
    } else {
      if (!have_blob) {
        blob = read_text(dir / "data.bin", "data file");
        have_blob = true;
      }
      if (static_cast<uint64_t>(off) > blob.size() || len > blob.size() - static_cast<uint64_t>(off)) {
        rd.fail(w, std::to_string(len) + " bytes at offset " + std::to_string(off) + " are past the end of 'data.bin' (" +
                       std::to_string(blob.size()) + " bytes)");
      }
      d.bytes.assign(blob.begin() + static_cast<std::ptrdiff_t>(off), blob.begin() + static_cast<std::ptrdiff_t>(off + static_cast<int64_t>(len)));
    }
    p.data.push_back(std::move(d));
  }
  n = 0;
  for (const json& e : list("outputs")) {
    const std::string w = "outputs[" + std::to_string(n++) + "]";
    rd.only(e, w, {"name", "at", "symbol", "offset", "count"});
    const auto [x, y] = rd.pos(e, w);
    p.output(rd.str(e, w, "name"), x, y, rd.str(e, w, "symbol"), static_cast<uint32_t>(rd.count(e, w, "count", 0, UINT32_MAX)),
             static_cast<uint32_t>(rd.count(e, w, "offset", 0, UINT32_MAX)));
  }
  n = 0;
  for (const json& e : list("output_rows")) {
    const std::string w = "output_rows[" + std::to_string(n++) + "]";
    row(e, w, 6);
    const std::string name = row_str(e, w, 0, "name");
    const int x = static_cast<int>(row_int(e, w, 1, 0, 100000, "x")), y = static_cast<int>(row_int(e, w, 2, 0, 100000, "y"));
    const std::string sym = row_str(e, w, 3, "symbol");
    const auto off = static_cast<uint32_t>(row_int(e, w, 4, 0, UINT32_MAX, "offset"));
    p.output(name, x, y, sym, static_cast<uint32_t>(row_int(e, w, 5, 0, UINT32_MAX, "count")), off);
  }
  return p;
}

}  // namespace wafersim
