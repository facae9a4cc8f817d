// `wafersim run PROGRAM`: a fabric program on the simulated wafer; `wafersim kernel NAME`: a
// kernel of the library written out as a fabric program.
#pragma once

#include <ostream>
#include <string>
#include <vector>

namespace wafersim {

int run_program_command(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);
int kernel_command(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

}  // namespace wafersim
