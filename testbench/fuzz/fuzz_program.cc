// Fuzz target: a fabric program's program.json (docs/program.md) through `wafersim run`'s
// loading steps, in-process: load_program_file (JSON, images, data ranges), then on a fabric of
// the program's bounding box load_program (placements, routes, data, Fabric::finalize) and
// read_outputs, without running a cycle. The JSON is written into a copy of
// testbench/fuzz/program/, whose files it can name: images/*.s (kernels from `wafersim kernel`,
// send.s, recv.s), images/recv.wsimg (recv.s assembled, binary) and data.bin (make_seeds.py).
// An input may carry a binary image too: after the JSON, a NUL byte, then the bytes of
// images/fuzz.wsimg (JSON text holds no raw NUL).
// ConfigError and AsmError are the documented rejections. Bounding boxes over 16 x 16 PEs
// stop after load_program_file, so that building the fabric stays cheap.
#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "firmware/program.h"
#include "fuzz_support.h"
#include "hw/fabric.h"

namespace {

// The program directory, copied once per process.
const std::string& program_dir() {
  static const std::string dir = [] {
    using namespace wafersim;
    namespace fs = std::filesystem;
    const std::string d = fuzz::scratch_dir() + "/program";
    fs::remove_all(d);
    fs::copy(WAFERSIM_FUZZ_PROGRAM_DIR, d, fs::copy_options::recursive);
    std::ifstream in(d + "/images/recv.s");
    std::ostringstream src;
    src << in.rdbuf();
    save_image_file(assemble(src.str(), "recv.s", AsmTarget{}), d + "/images/recv.wsimg");
    return d;
  }();
  return dir;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace wafersim;
  const std::string& dir = program_dir();
  const auto* nul = static_cast<const uint8_t*>(std::memchr(data, 0, size));
  const size_t json_size = nul ? static_cast<size_t>(nul - data) : size;
  fuzz::write_scratch("program/program.json", data, json_size);
  if (nul) {
    fuzz::write_scratch("program/images/fuzz.wsimg", nul + 1, size - json_size - 1);
  } else {
    std::filesystem::remove(dir + "/images/fuzz.wsimg");
  }
  HwConfig hw;
  FabricProgram prog;
  try {
    prog = load_program_file(dir, asm_target(hw));
    // As `wafersim run` sizes the fabric when no --fabric.width/height is given.
    hw.fabric.width = std::max(1, prog.min_width);
    hw.fabric.height = std::max(1, prog.min_height);
    hw.validate();
    if (hw.fabric.width * hw.fabric.height > 16 * 16) {
      fuzz::outcome("read; bounding box too large to build");
      return 0;
    }
    Fabric fabric(hw);
    load_program(fabric, prog);
    read_outputs(fabric, prog);
    fuzz::outcome("loaded on " + std::to_string(hw.fabric.width) + " x " + std::to_string(hw.fabric.height) + " PEs");
  } catch (const ConfigError& e) {
    fuzz::outcome(e.what());
  } catch (const AsmError& e) {
    fuzz::outcome(e.what());
  }
  return 0;
}
