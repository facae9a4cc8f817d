// The compiler's tensor-graph IR (docs/graph-compiler.md, steps 1 and 2): a DAG of ops over
// tensors with static shapes except the batch, built from the imported ONNX model with the
// shapes the ONNX library's strict inference gives, then rewritten by the passes of
// compiler/passes/ (constant folding, fusion, dead code). Today it is built beside the
// dense-chain path: every model is imported into it, rewritten and verified, `--validate-only`
// reports through it, and the kernel matching (kernel_graph.cc) still reads the ONNX nodes.
//
// Shapes: a dimension d >= 0 is a number; d < 0 is (-d) times the symbolic batch N (-1 is N,
// -12 is 12 N, as a multi-head reshape of [S, N, 12 x 64] to [S, 12 N, 64] gives). The batch is
// the data input's first dimension; ONNX's inference names it wherever it moves (a transpose
// puts it second), and the IR follows it there.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "compiler/onnx_model.h"

namespace wafersim::compiler::ir {

// What a tensor is to training: a graph input (data or labels), a trained parameter (a float
// initializer), a constant (any other initializer or a Constant node's value), an op's result,
// or optimizer state that lives from step to step (a parameter's momentum, added by autodiff).
enum class TensorKind { kInput, kParameter, kConstant, kValue, kState };
const char* tensor_kind_name(TensorKind k);

struct Tensor {
  std::string name;
  TensorKind kind = TensorKind::kValue;
  int elem_type = 0;              // ONNX TensorProto element type (1 float, 7 int64, ...)
  bool shape_known = false;       // rank and every dimension known (the batch may be symbolic)
  std::vector<int64_t> shape;     // d < 0: (-d) times the symbolic batch N (see above)
  int producer = -1;              // index of the op that produces it; -1 for inputs and initializers
  std::vector<int> consumers;     // ops that read it, in op order (an op that reads it twice, once)
  const OnnxTensor* data = nullptr;  // parameters and constants: their values (the OnnxModel's, or `owned`)
  std::shared_ptr<const OnnxTensor> owned;  // a folded constant's values (data points here)
  // A folded integer constant whose elements depend on the batch (a shape computed from
  // Shape(x)): element i is batch_multiple[i] x N where that is not 0, else data->i64[i].
  std::vector<int64_t> batch_multiple;

  bool symbolic() const {
    for (int64_t m : batch_multiple) {
      if (m != 0) return true;
    }
    return false;
  }
};

// Where an op sits in training. Import gives forward ops only; autodiff (step 3) adds the rest.
enum class Role { kForward, kLoss, kBackward, kUpdate };

struct Op {
  std::string kind;                        // the ONNX op type, or a fused kind (Dense, LayerNorm, Gelu, Conv2d)
  std::string domain;                      // "" for the default ONNX domain
  std::map<std::string, OnnxAttr> attrs;
  std::vector<int> inputs;                 // tensor indices; -1 for an omitted optional input
  std::vector<int> outputs;                // tensor indices; -1 for an omitted optional output
  std::vector<std::string> sources;        // the ONNX node(s) it came from (names)
  Role role = Role::kForward;

  const OnnxAttr* attr(const std::string& key) const {
    auto it = attrs.find(key);
    return it == attrs.end() ? nullptr : &it->second;
  }
};

struct Graph {
  std::string path;       // the model file, for messages
  int64_t opset = 0;
  std::vector<Tensor> tensors;
  std::map<std::string, int> by_name;
  std::vector<Op> ops;    // in a topological order
  std::vector<int> inputs, outputs;

  int find(const std::string& name) const {
    auto it = by_name.find(name);
    return it == by_name.end() ? -1 : it->second;
  }
  // "14 ops (3 Gemm, 2 Relu, ...), 31 tensors (1 input, 6 parameters, 2 constants, 22 values)"
  std::string summary() const;
};

// Builds the IR of an imported model (import_onnx has run the checker and strict inference).
// A value whose shape inference leaves a dimension other than the first unknown (a symbolic
// one, or a shape computed at run time) gets shape_known = false: constant folding (step 2)
// will give it; the kernel graph names a symbolic input dimension. Throws CompileError for a
// node that reads a value nothing gives, and a value given twice.
Graph from_onnx(const OnnxModel& m);

// The IR's invariants, checked after import (and, later, after every pass); throws CompileError
// ("IR check: ...") naming the op and tensor: ops in topological order, every tensor produced
// once (by an op, or as an input or initializer), producers and consumers consistent, outputs
// produced, no op without outputs, and each op's output shapes equal to its shape rule where
// the IR has one for the op and its inputs' shapes are known.
void verify(const Graph& g);

// The shape rule of op `o` over its inputs' shapes (nullptr for an omitted input): the shape of
// output `k`, or false where the IR has no rule for the op (or the inputs' shapes are not all
// known). A rule that finds the inputs inconsistent throws CompileError.
bool infer_output_shape(const Graph& g, const Op& o, int k, std::vector<int64_t>* shape);

// Integer operands of an op: from its attribute `key` (older opsets) or its constant input
// `input` (newer); false when the input is not a constant of batch-free integers. `given`: found.
bool ints_of(const Graph& g, const Op& o, const char* key, size_t input, std::vector<int64_t>* v, bool* given);

// Attribute values of the ops the passes and autodiff make.
OnnxAttr attr_int(int64_t v);
OnnxAttr attr_float(float v);
OnnxAttr attr_str(const std::string& s);
OnnxAttr attr_ints(std::vector<int64_t> v);

// "[N, 6, 16]", "[6, 2N, 8]": a shape as messages and reports write it.
std::string shape_str(const std::vector<int64_t>& d);

}  // namespace wafersim::compiler::ir
