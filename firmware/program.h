// A fabric program: which PEs run which image, their initial data, each PE's routes, and the
// results to read back. Kernel generators (firmware/kernels/) build one in memory; `wafersim run`
// loads one from a directory (program.json + images + data.bin, format in docs/program.md).
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "firmware/assembler.h"
#include "firmware/image.h"
#include "hw/router.h"

namespace wafersim {

class Fabric;
class PeCore;

struct ProgramImage {
  std::string name;    // unique within the program
  std::string source;  // assembly text ("" when the image came from a binary file)
  PeImage image;
};

struct Placement {
  int x = 0, y = 0;
  int image = 0;       // index into FabricProgram::images
};

struct RouteSpec {
  int x = 0, y = 0, color = 0;
  ColorRoute route;
};

// Bytes written into one PE's SRAM before the first cycle, at a data symbol of its image
// (offset in bytes from the symbol) or, with symbol empty, at an absolute address.
struct DataPatch {
  int x = 0, y = 0;
  std::string symbol;
  uint32_t offset = 0;
  std::vector<uint8_t> bytes;
};

// A result to read back after the run: `count` elements of a data symbol at one PE.
struct OutputSpec {
  std::string name;    // groups outputs: a vector spread over several PEs has one name
  int x = 0, y = 0;
  std::string symbol;
  uint32_t offset = 0; // elements from the symbol's start
  uint32_t count = 0;  // 0 = the whole symbol
};

struct FabricProgram {
  std::string name = "program";
  int min_width = 0, min_height = 0;  // smallest fabric the program needs (bounding box)
  std::vector<ProgramImage> images;
  std::vector<Placement> placements;
  std::vector<RouteSpec> routes;
  std::vector<DataPatch> data;
  std::vector<OutputSpec> outputs;
  // The kernel generators' interning (kernels::intern_image): images by the hash of their
  // source, and the next number to try per name prefix, so that a program of many distinct
  // images (one per PE) builds in linear time. Not saved.
  std::unordered_multimap<size_t, int> interned;
  std::unordered_map<std::string, int> next_number;

  // Assembles `source` for `target` (AsmError on bad text) and returns the image's index.
  int add_image(const std::string& name, const std::string& source, const AsmTarget& target);
  int find_image(const std::string& name) const;  // -1 when absent
  void place(int x, int y, int image);
  void route(int x, int y, int color, uint8_t rx, uint8_t tx);
  void route(int x, int y, int color, const ColorRoute& r);
  void set_data(int x, int y, const std::string& symbol, const std::vector<uint8_t>& bytes, uint32_t offset = 0);
  void set_f32(int x, int y, const std::string& symbol, const std::vector<float>& values);
  void output(const std::string& name, int x, int y, const std::string& symbol, uint32_t count = 0,
              uint32_t offset = 0);
  // Grows min_width/min_height to cover (x, y).
  void cover(int x, int y);
};

// The cores of a loaded program, in placement order.
struct LoadedProgram {
  std::vector<PeCore*> cores;
  std::vector<const PeImage*> images;  // image of each core (owned by the FabricProgram)
};

// Places images, routes and data on `fabric` (before its first cycle). Throws ConfigError with
// a message naming the PE for: placements or routes outside the fabric, two images on one PE,
// images that do not fit the core (SRAM, descriptor registers, microthreads), data for unknown
// symbols or larger than them, and (from Fabric::finalize) routes that leave the fabric or lead
// nowhere.
LoadedProgram load_program(Fabric& fabric, const FabricProgram& prog);

// Steps the fabric until every core of `loaded` has halted and nothing is left in flight or
// queued, or until `max_cycles` more cycles have run. Returns the cycles the program took (the
// fabric's cycle count at the end) and whether it finished. Faults and deadlocks throw as
// Fabric::step does.
struct RunResult {
  uint64_t cycles = 0;
  bool finished = false;
};
RunResult run_to_completion(Fabric& fabric, const LoadedProgram& loaded, uint64_t max_cycles);
// True when every core has halted and the fabric is empty; `first` caches the first core still
// running (start it at 0).
bool program_done(const Fabric& fabric, const LoadedProgram& loaded, size_t* first);

// A result read back from the wafer, as floats (integers are converted), in output order.
struct OutputValues {
  std::string name;
  std::vector<float> values;
};
std::vector<OutputValues> read_outputs(const Fabric& fabric, const FabricProgram& prog);

// Directory form: DIR/program.json, DIR/images/NAME.s (or NAME.wsimg), DIR/data.bin. Writing
// is atomic per file. Reading assembles sources for `target`; errors (malformed JSON, unknown
// keys, missing files, assembly errors) are ConfigError or AsmError naming the file.
void save_program(const FabricProgram& prog, const std::string& dir);
FabricProgram load_program_file(const std::string& path, const AsmTarget& target);

// The assembler target of a hardware configuration.
AsmTarget asm_target(const HwConfig& hw);

}  // namespace wafersim
