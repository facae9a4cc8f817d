// `wafersim validate`: the validation suite against published CS-2 measurements
// (docs/validation.md).
#pragma once

#include <ostream>
#include <string>
#include <vector>

namespace wafersim {

int validate_command(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

}  // namespace wafersim
