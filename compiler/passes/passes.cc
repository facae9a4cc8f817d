#include "compiler/passes/passes.h"

namespace wafersim::compiler::passes {

ir::Graph run_passes(ir::Graph g, std::vector<std::string>* log, const AfterPass& after) {
  struct Pass {
    const char* name;
    int (*run)(ir::Graph&);
  };
  static const Pass kPasses[] = {{"fold_constants", fold_constants}, {"simplify", simplify},     {"fold_pad", fold_pad}, {"fuse_layernorm", fuse_layernorm},
                                 {"fuse_gelu", fuse_gelu},           {"fuse_activations", fuse_activations},
                                 {"fuse_dense", fuse_dense},         {"dead_code", dead_code}};
  for (const Pass& p : kPasses) {
    const int n = p.run(g);
    try {
      ir::verify(g);
    } catch (const CompileError& e) {
      throw CompileError(std::string("after pass ") + p.name + ": " + e.what());
    }
    if (n && log) log->push_back(std::string(p.name) + ": " + std::to_string(n));
    if (after) after(p.name, g);
  }
  return g;
}

}  // namespace wafersim::compiler::passes
