// Weight-streaming mode of `wafersim compile` and `wafersim train`, and the auto mode's choice
// (docs/weight-streaming.md).
#pragma once

#include <ostream>
#include <string>

#include "app/options.h"
#include "compiler/kernel_graph.h"
#include "compiler/onnx_model.h"

namespace wafersim {

// "layer-pipelined" or "weight-streaming" for c.mode; for auto, layer-pipelined when the model
// fits the configured fabric on one system, and the reason is printed either way.
std::string resolve_mode(const TrainConfig& c, const compiler::KernelGraph& g, std::ostream& out);

// After validation: the weight-streaming compile report (and the program with --compile-only).
void ws_compile(const TrainConfig& c, const compiler::KernelGraph& g, std::ostream& out);

// Trains in weight-streaming mode on c.ws.systems wafers. `m` is the ONNX file training starts
// from (the model, or the checkpoint being resumed). Throws on errors. Returns the exit code:
// 0, or 128 + the signal when SIGINT/SIGTERM stopped it early (its outputs are written).
int ws_train(const TrainConfig& c, const compiler::OnnxModel& m, const compiler::KernelGraph& g,
             const std::string& model_path, std::ostream& out);

}  // namespace wafersim
