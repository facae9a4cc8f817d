// Fuzz target: a route file (traffic.pattern file, traffic.routes FILE; docs/fabric.md) through
// what `wafersim fabric` does with it before the first cycle: read_route_file via
// program_traffic on an 8 x 8 fabric, then Fabric::finalize, which checks that every route
// stays on the fabric and is accepted where it leads. ConfigError is the documented rejection.
#include "fuzz_support.h"
#include "hw/fabric.h"
#include "hw/traffic_gen.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace wafersim;
  TrafficConfig traffic;
  traffic.pattern = "file";
  traffic.routes = fuzz::write_scratch("routes.txt", data, size);
  HwConfig hw;
  hw.fabric.width = 8;
  hw.fabric.height = 8;
  hw.io.spacing = 2;  // channels on the east and west edges, for routes that leave the fabric
  try {
    Fabric fabric(hw);
    program_traffic(fabric, traffic);
    fabric.allow_vector();
    fabric.finalize();
    fuzz::outcome("routes accepted");
  } catch (const ConfigError& e) {
    fuzz::outcome(e.what());
  }
  return 0;
}
