// Fuzz target: an INI file (--config FILE) through the option parsers of every command
// (app/options.h): fabric, run, kernel, compile and train, each as the CLI calls it with only
// --config on the command line. ConfigError is the documented rejection. A file that parses
// must give a resolved configuration (config.ini, written next to every run's results) that
// parses back to the same resolved configuration.
// The command line sets trace.vcd to "" (it wins over the file): a trace file named in the
// INI would otherwise be created, with its directories, wherever the input says.
#include <sstream>

#include "app/options.h"
#include "fuzz_support.h"

namespace {

using namespace wafersim;

template <typename Config, typename Parse, typename Resolved>
void parse_and_reparse(const char* what, std::vector<std::string> args, Parse parse, Resolved resolved) {
  std::ostringstream help;
  Config c;
  std::string ini;
  try {
    if (!parse(args, &c, help)) fuzz::fail(std::string(what) + ": parse returned false without --help");
    ini = resolved(c);  // also the checks the command makes next (regions against the fabric)
  } catch (const ConfigError& e) {
    fuzz::outcome(std::string(what) + ": " + e.what());
    return;
  }
  args.back() = fuzz::write_scratch("resolved.ini", ini);  // args end with the --config value
  Config again;
  try {
    parse(args, &again, help);
  } catch (const ConfigError& e) {
    fuzz::fail(std::string(what) + ": the resolved configuration does not parse back: " + e.what() + "\n" + ini);
  }
  if (resolved(again) != ini) {
    fuzz::fail(std::string(what) + ": the resolved configuration parses back differently:\n" + ini + "\nthen\n" +
               resolved(again));
  }
  fuzz::outcome(std::string(what) + ": accepted");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = fuzz::write_scratch("config.ini", data, size);
  parse_and_reparse<FabricRunConfig>(
      "fabric", {"--trace.vcd", "", "--config", path}, parse_fabric_options,
      [](const FabricRunConfig& c) {
        parse_region(c.traffic.region, c.hw.fabric.width, c.hw.fabric.height, "traffic.region");
        return c.resolved_ini;
      });
  parse_and_reparse<RunConfig>("run", {"program-dir", "--trace.vcd", "", "--config", path}, parse_run_options,
                               [](const RunConfig& c) {
                                 run_trace_region(c);
                                 return c.resolved_ini(c.hw);
                               });
  parse_and_reparse<KernelGenConfig>("kernel", {"gemv", "--config", path}, parse_kernel_options,
                                     [](const KernelGenConfig&) { return std::string(); });
  parse_and_reparse<ValidateConfig>("validate", {"--config", path}, parse_validate_options,
                                    [](const ValidateConfig&) { return std::string(); });
  for (const bool train : {false, true}) {
    std::vector<std::string> args = {"--config", path};
    if (train) args.insert(args.begin(), {"--trace.vcd", ""});
    parse_and_reparse<TrainConfig>(
        train ? "train" : "compile", args,
        [train](const std::vector<std::string>& a, TrainConfig* c, std::ostream& out) {
          return parse_train_options(a, c, out, train);
        },
        [](const TrainConfig& c) {
          train_trace_region(c);
          return c.resolved_ini;
        });
  }
  return 0;
}
