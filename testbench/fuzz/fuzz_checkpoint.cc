// Fuzz target: a checkpoint through `wafersim train --resume CHECKPOINT` in-process, as the CLI
// reads it: the ONNX import and kernel graph, the metadata (wafersim.step, seed, batch, lr,
// momentum, mode, config), the momentum tensors and the note on changed options. The training
// data named is missing, so the run stops with that error right after the checkpoint is
// restored, before anything is compiled or simulated. The losses a checkpoint carries
// (wafersim.losses) are read later in a run: for a checkpoint that restored, they are read here
// as train_command reads them.
#include <sstream>

#include "app/fabric_cmd.h"
#include "app/train_cmd.h"
#include "app/train_util.h"
#include "fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace wafersim;
  const std::string ckpt = fuzz::write_scratch("checkpoint.onnx", data, size);
  const std::string missing = fuzz::scratch_dir() + "/no-such-data";
  std::ostringstream out, err;
  const int rc = train_command({"--resume", ckpt, "-o", fuzz::scratch_dir() + "/train", "--data.source", "idx",
                                "--data.train_x", missing, "--data.train_y", missing, "--train.eval", "false",
                                "--train.steps", "1", "--train.batch", "4", "--fabric.width", "24", "--fabric.height", "24"},
                               out, err);
  // 2: a CompileError, ConfigError or DatasetError (the missing data once the checkpoint is
  // restored). 1 is the CLI's "error" for any other exception: one that no check expected.
  if (rc != kExitUsage) fuzz::fail("wafersim train --resume exited " + std::to_string(rc) + ": " + err.str());
  fuzz::outcome("exit " + std::to_string(rc) + (err.str().empty() ? "" : ": " + err.str().substr(0, err.str().find('\n'))));
  if (out.str().find("resuming from ") == std::string::npos) return 0;
  try {
    const compiler::OnnxModel m = compiler::import_onnx(ckpt);
    TrainConfig c;
    c.resume = ckpt;
    checkpoint_losses(m, c, "step,mean_loss,cycles\n", checkpoint_number(m, c, "wafersim.step"));
    fuzz::outcome("losses accepted");
  } catch (const ConfigError& e) {
    fuzz::outcome(e.what());
  }
  return 0;
}
