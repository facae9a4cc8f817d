// `wafersim compile MODEL.onnx`: the compiler (validate only, or compile with a report and the
// fabric program); `wafersim train MODEL.onnx`: compile and train on the simulated wafer.
#pragma once

#include <ostream>
#include <string>
#include <vector>

namespace wafersim {

int compile_command(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);
int train_command(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

}  // namespace wafersim
