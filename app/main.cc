// wafersim: one executable, one subcommand per job.
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <string>
#include <vector>

#include <systemc>

#include "app/fabric_cmd.h"
#include "app/run_cmd.h"
#include "app/train_cmd.h"
#include "app/validate_cmd.h"

namespace {

const char kUsage[] =
    "usage: wafersim <command> [options]\n"
    "\n"
    "commands:\n"
    "  fabric   simulate the router fabric under synthetic traffic (wafersim fabric --help)\n"
    "  run      run a fabric program of PE firmware until it finishes (wafersim run --help)\n"
    "  kernel   write a kernel of the library as a fabric program (wafersim kernel --help)\n"
    "  compile  compile an ONNX model for the wafer: validate, place, route, report (wafersim compile --help)\n"
    "  train    train an ONNX model on the simulated wafer, layer-pipelined or weight streaming (wafersim train --help)\n"
    "  validate run the validation cases and compare their cycles with published CS-2 figures (wafersim validate --help)\n"
    "\n"
    "Every dotted option (fabric.width, train.steps, ...) can also come from an INI file (--config FILE,\n"
    "[fabric] width = 64); the command line wins. The model, --mode and --systems are command-line only.\n";

}  // namespace

int sc_main(int argc, char** argv) {
  if (argc < 2 || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h")) {
    std::cout << kUsage;
    return argc < 2 ? wafersim::kExitUsage : wafersim::kExitOk;
  }
  // SystemC's informational notes (trace time units and the like) are not news to the user.
  sc_core::sc_report_handler::set_actions(sc_core::SC_INFO, sc_core::SC_DO_NOTHING);
  const std::string cmd = argv[1];
  const std::vector<std::string> args(argv + 2, argv + argc);
  if (cmd == "fabric") return wafersim::run_fabric_command(args, std::cout, std::cerr);
  if (cmd == "run") return wafersim::run_program_command(args, std::cout, std::cerr);
  if (cmd == "compile") return wafersim::compile_command(args, std::cout, std::cerr);
  if (cmd == "train") return wafersim::train_command(args, std::cout, std::cerr);
  if (cmd == "kernel") return wafersim::kernel_command(args, std::cout, std::cerr);
  if (cmd == "validate") return wafersim::validate_command(args, std::cout, std::cerr);
  std::cerr << "wafersim: error: unknown command '" << cmd << "'\n\n" << kUsage;
  return wafersim::kExitUsage;
}

int main(int argc, char** argv) {
  setenv("SYSTEMC_DISABLE_COPYRIGHT_MESSAGE", "1", 0);  // before SystemC prints its banner
  return sc_core::sc_elab_and_sim(argc, argv);
}
