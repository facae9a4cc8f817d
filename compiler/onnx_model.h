// The ONNX model as the compiler sees it: nodes, graph inputs/outputs and initializers, read
// through the Debian-packaged ONNX protobuf library (libonnx-dev). Pass 1 of the compiler
// (docs/compiler.md); checkpoints are written back in the same form.
#pragma once

#include <cstdint>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

namespace wafersim::compiler {

// Every compile-time failure: a message for the user, no stack trace. Exit code 2.
class CompileError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// ONNX TensorProto element types the compiler names in messages.
enum OnnxElemType : int { kOnnxFloat = 1, kOnnxInt32 = 6, kOnnxInt64 = 7, kOnnxDouble = 11, kOnnxFloat16 = 10 };
const char* onnx_elem_type_name(int elem_type);  // "float", "int64", ... or "type N"

struct OnnxAttr {
  enum Kind { kInt, kFloat, kInts, kFloats, kString, kOther } kind = kOther;
  int64_t i = 0;
  float f = 0;
  std::vector<int64_t> ints;
  std::vector<float> floats;
  std::string s;
  // A TENSOR attribute (kind kOther) of at most 16 float or integer elements: its element type
  // (0: none read) and values, in floats or ints (ConstantOfShape's `value`).
  int tensor_type = 0;
};

struct OnnxNode {
  std::string name;  // as exported ("/fc1/Gemm"); "node_N" (its index) when the file has none
  std::string op_type, domain;
  std::vector<std::string> inputs, outputs;  // "" for an omitted optional input
  std::map<std::string, OnnxAttr> attrs;

  const OnnxAttr* attr(const std::string& key) const {
    auto it = attrs.find(key);
    return it == attrs.end() ? nullptr : &it->second;
  }
};

// A graph input or output. dims: -1 where the dimension is symbolic or missing (dim_params
// holds the symbol, "" if missing).
struct OnnxValue {
  std::string name;
  int elem_type = 0;
  std::vector<int64_t> dims;
  std::vector<std::string> dim_params;
  bool has_shape = false;  // the value info gives a shape (an empty one: a scalar)
};

// An initializer or a Constant node's value. Float tensors fill `f32`; int64 (and int32) tensors
// fill `i64`; other types keep only name, dims and elem_type.
struct OnnxTensor {
  std::string name;
  int elem_type = 0;
  std::vector<int64_t> dims;
  std::vector<float> f32;
  std::vector<int64_t> i64;

  int64_t numel() const {
    int64_t n = 1;
    for (int64_t d : dims) n *= d;
    return n;
  }
};

struct OnnxModel {
  std::string path;
  int64_t ir_version = 0;
  int64_t opset = 0;  // of the default ("" or "ai.onnx") domain
  std::string producer;
  std::vector<OnnxNode> nodes;                     // in file order (topological, as exporters write)
  std::vector<OnnxValue> inputs;                   // graph inputs that are not initializers
  std::vector<OnnxValue> outputs;
  std::map<std::string, OnnxTensor> initializers;  // initializers and Constant-node values by name
  std::vector<std::string> initializer_order;      // initializer names in file order (not Constants)
  std::map<std::string, std::string> metadata;     // metadata_props
  // Every intermediate value's type and shape as the library's strict shape inference gives
  // them (graph inputs and outputs are in `inputs` and `outputs`).
  std::map<std::string, OnnxValue> value_info;
};

// Reads and checks a model file. Throws CompileError naming the file for: a missing or
// unreadable file, a path that is not a regular file (a directory, a device, a pipe), bytes that
// do not parse as a ModelProto (malformed or truncated), a model without a graph, a name or
// string that is not UTF-8, an opset outside 11..17, and whatever the ONNX library's checker
// and strict shape inference refuse (wrong input or output counts, a tensor name produced twice,
// tensors with two data fields, a bad ir_version, mismatched types or shapes), as well as a graph
// output that nothing produces and a default domain imported twice. Constant nodes are folded
// into `initializers` (and kept out of `nodes`). External-data tensors are rejected with a message.
OnnxModel import_onnx(const std::string& path);

// Writes a copy of the model at `src_path` to `dst_path` with the float initializers named in
// `weights` replaced by those values (same dims required), the tensors in `extra` appended as
// additional float initializers (replacing any of the same name), and `metadata` merged into
// metadata_props. Atomic: written to dst_path + ".tmp", then renamed. Throws CompileError for a
// model it cannot write back, std::runtime_error for an I/O failure (a full disk: exit code 1).
void write_onnx_with_weights(const std::string& src_path, const std::string& dst_path,
                             const std::map<std::string, std::vector<float>>& weights,
                             const std::vector<OnnxTensor>& extra,
                             const std::map<std::string, std::string>& metadata);

}  // namespace wafersim::compiler
