// Fuzz target: an ONNX model through `wafersim compile MODEL` in-process, as the CLI runs it:
// import (pass 1), kernel graph and validation (2), then on a supported model placement,
// routing, code generation and the compile report, written to the scratch directory. The
// fabric is small (24 x 24) so that a model needing many PEs stops at placement, which keeps
// one execution short.
#include <sstream>

#include "app/fabric_cmd.h"
#include "app/train_cmd.h"
#include "fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace wafersim;
  const std::string model = fuzz::write_scratch("model.onnx", data, size);
  std::ostringstream out, err;
  const int rc = compile_command({model, "-o", fuzz::scratch_dir() + "/compile", "--fabric.width", "24",
                                  "--fabric.height", "24"},
                                 out, err);
  // 0: compiled; 2: a CompileError or ConfigError, the rejections the compiler documents. 1 is
  // the CLI's "error" for every other exception: one that no check expected.
  if (rc != kExitOk && rc != kExitUsage) fuzz::fail("wafersim compile exited " + std::to_string(rc) + ": " + err.str());
  fuzz::outcome("exit " + std::to_string(rc) + (err.str().empty() ? "" : ": " + err.str().substr(0, err.str().find('\n'))));
  return 0;
}
