// `wafersim fabric`: the router fabric under synthetic traffic, with stats and traces.
#pragma once

#include <ostream>
#include <string>
#include <vector>

namespace wafersim {

// Exit codes shared by all subcommands.
constexpr int kExitOk = 0, kExitRuntime = 1, kExitUsage = 2, kExitDeadlock = 3;

int run_fabric_command(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

}  // namespace wafersim
