// The rewrite passes of the graph IR (docs/graph-compiler.md, step 2), one file each, run in a
// fixed order by run_passes: constant folding of the shape arithmetic torch exports, the
// removal of no-op ops, the fusions (LayerNorm, GELU, dense and conv with their bias and
// activation) and dead code. Each takes the graph and rewrites it in place; `verify` holds
// after each (run_passes checks it). A pass that finds nothing to do leaves the graph as it was.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "compiler/ir/graph.h"

namespace wafersim::compiler::passes {

// Each returns the number of rewrites it made (folded ops and inferred shapes, fused groups,
// removed ops).
int fold_constants(ir::Graph& g);  // ops over constants (and Shape of known shapes) become constants; shapes re-inferred
int simplify(ir::Graph& g);        // Identity, inference Dropout, same-type Cast, same-shape Reshape/Flatten, zero Pad: renames
int fold_pad(ir::Graph& g);        // a Pad of zeros around planes -> the pads of the Conv or AveragePool reading it
int fuse_layernorm(ir::Graph& g);  // LayerNormalization, or its decomposed form -> LayerNorm
int fuse_gelu(ir::Graph& g);       // the Erf form and the tanh form -> Gelu (attribute `approximate`)
int fuse_activations(ir::Graph& g);  // SiLU, HardSwish, Mish, Softsign as torch exports them -> one op each
int fuse_dense(ir::Graph& g);      // Gemm, MatMul + Add of parameters, Conv; + one activation -> Dense, Conv2d
int dead_code(ir::Graph& g);       // ops nothing reads, and the constants only they read

// The passes in order; `log` gets one line per pass that changed something ("fuse_gelu: 1"),
// and `after`, if given, sees the graph after each pass (by its name). Throws CompileError where
// the graph breaks an invariant after a pass (a bug of the pass).
using AfterPass = std::function<void(const std::string& pass, const ir::Graph& g)>;
ir::Graph run_passes(ir::Graph g, std::vector<std::string>* log = nullptr, const AfterPass& after = {});

}  // namespace wafersim::compiler::passes
