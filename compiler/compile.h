// The compiler's driver: ONNX import (pass 1), kernel graph (2), placement (3), routes and colors
// (4), code generation (5), and the compile report with its samples/s estimates
// (docs/compiler.md).
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "compiler/codegen.h"
#include "compiler/kernel_graph.h"
#include "compiler/onnx_model.h"
#include "compiler/placement.h"
#include "hw/config.h"

namespace wafersim::compiler {

struct CompileOptions {
  std::string loss = "softmax_xent";
  PlaceOptions place;
  TrainHyper hyper;
};

struct CompileResult {
  OnnxModel model;
  KernelGraph graph;
  Compiled compiled;
  nlohmann::json report;
  std::string report_text;
};

// Passes 1 and 2. Throws CompileError.
KernelGraph validate_model(const OnnxModel& m, const CompileOptions& o);
// A CompileError naming the unsupported nodes (unsupported_message), when there are any.
void require_supported(const KernelGraph& g);
// The message require_supported throws: the nodes grouped by op type, then by reason, with the
// first few names of each.
std::string unsupported_message(const std::vector<Unsupported>& list);

// All passes. `state` (optional) replaces the initializers' weights (resume). Throws CompileError.
CompileResult compile_model(const std::string& onnx_path, const HwConfig& hw, const CompileOptions& o,
                            const ModelState* state = nullptr);

// The compile report of a compiled model: estimates at the configured clock.
nlohmann::json compile_report(const KernelGraph& g, const Plan& plan, const Routing& r, const HwConfig& hw);
std::string report_text(const nlohmann::json& report);

}  // namespace wafersim::compiler
