#include <onnx/checker.h>
#include <onnx/onnx_pb.h>
#include <onnx/shape_inference/implementation.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <set>
#include <sstream>

#include "compiler/onnx_model.h"
#include "hw/atomic_file.h"
#include "hw/file_read.h"

namespace wafersim::compiler {
namespace {

constexpr int64_t kMinOpset = 11, kMaxOpset = 17;

// Length of the UTF-8 sequence that starts at s[i], 0 if none does (overlong forms,
// surrogates and code points past U+10FFFF are not UTF-8).
size_t utf8_sequence_length(const std::string& s, size_t i) {
  const auto byte = [&](size_t k) { return static_cast<uint8_t>(s[k]); };
  const uint8_t c = byte(i);
  if (c < 0x80) return 1;
  size_t n = 0;
  uint32_t cp = 0, min = 0;
  if ((c & 0xe0) == 0xc0) n = 2, cp = c & 0x1f, min = 0x80;
  else if ((c & 0xf0) == 0xe0) n = 3, cp = c & 0x0f, min = 0x800;
  else if ((c & 0xf8) == 0xf0) n = 4, cp = c & 0x07, min = 0x10000;
  else return 0;
  if (i + n > s.size()) return 0;
  for (size_t k = 1; k < n; ++k) {
    if ((byte(i + k) & 0xc0) != 0x80) return 0;
    cp = cp << 6 | (byte(i + k) & 0x3f);
  }
  if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return 0;
  return n;
}

bool is_valid_utf8(const std::string& s) {
  for (size_t i = 0; i < s.size();) {
    const size_t n = utf8_sequence_length(s, i);
    if (n == 0) return false;
    i += n;
  }
  return true;
}

std::string first_line(const std::string& s) {
  std::string line = s.substr(0, s.find('\n'));
  while (!line.empty() && (line.back() == ' ' || line.back() == '\r')) line.pop_back();
  return line;
}

std::string dims_text(const std::vector<int64_t>& dims) {
  std::string s = "[";
  for (size_t i = 0; i < dims.size(); ++i) s += (i ? ", " : "") + std::to_string(dims[i]);
  return s + "]";
}

// Protobuf parses at most 2 GiB, so a larger file cannot be a model.
constexpr uint64_t kMaxModelBytes = (uint64_t{1} << 31) - 1;

std::string read_bytes(const std::string& path) {
  std::string bytes, why;
  if (!read_regular_file(path, kMaxModelBytes, &bytes, &why)) throw CompileError(path + ": " + why);
  return bytes;
}

// A string as it can be printed: bytes that are not UTF-8 shown as \xNN.
std::string printable(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size();) {
    const size_t n = utf8_sequence_length(s, i);
    if (n == 0) {
      char b[8];
      std::snprintf(b, sizeof b, "\\x%02x", static_cast<unsigned>(static_cast<uint8_t>(s[i])));
      out += b;
      ++i;
    } else {
      out.append(s, i, n);
      i += n;
    }
  }
  return out;
}

// Every string of the model that reaches a message or a report must be UTF-8 (ONNX says so; the
// JSON reports cannot hold anything else): names, op types, domains, metadata, string attributes.
void check_utf8(const onnx::ModelProto& m, const std::string& path) {
  auto need = [&](const std::string& s, const std::string& what) {
    if (!is_valid_utf8(s)) throw CompileError(path + ": " + what + " '" + printable(s) + "' is not valid UTF-8");
  };
  need(m.producer_name(), "the producer name");
  for (const auto& e : m.metadata_props()) {
    need(e.key(), "metadata key");
    need(e.value(), "the value of metadata '" + printable(e.key()) + "'");
  }
  for (const auto& o : m.opset_import()) need(o.domain(), "opset domain");
  const onnx::GraphProto& g = m.graph();
  for (const auto& t : g.initializer()) need(t.name(), "initializer name");
  for (const auto* list : {&g.input(), &g.output(), &g.value_info()}) {
    for (const auto& v : *list) need(v.name(), "value name");
  }
  for (int i = 0; i < g.node_size(); ++i) {
    const onnx::NodeProto& n = g.node(i);
    const std::string at = "node " + std::to_string(i);
    need(n.name(), at + ": name");
    need(n.op_type(), at + ": op type");
    need(n.domain(), at + ": domain");
    for (const auto& v : n.input()) need(v, at + ": input name");
    for (const auto& v : n.output()) need(v, at + ": output name");
    for (const auto& a : n.attribute()) {
      need(a.name(), at + ": attribute name");
      need(a.s(), at + ": attribute '" + printable(a.name()) + "'");
    }
  }
}

// What the ONNX library (libonnx: checker, strict shape inference) says of the model, and the
// structural faults it lets through: a graph output no node, input or initializer gives, a
// default domain imported twice. Messages name the node or value.
std::vector<onnx::ValueInfoProto> check_structure(const onnx::ModelProto& m, const std::string& path) {
  int default_domains = 0;
  for (const auto& o : m.opset_import()) default_domains += o.domain().empty() || o.domain() == "ai.onnx";
  if (default_domains > 1) {
    throw CompileError(path + ": the model imports the default ONNX domain " + std::to_string(default_domains) +
                       " times (one opset_import entry per domain)");
  }
  // The checker would look for an external data file; say first that none is supported.
  for (const onnx::TensorProto& p : m.graph().initializer()) {
    if (p.data_location() == onnx::TensorProto_DataLocation_EXTERNAL || p.external_data_size() > 0) {
      throw CompileError(path + ": initializer '" + p.name() +
                         "' keeps its data in an external file, which is not supported (save the model with its weights "
                         "inside the .onnx file)");
    }
  }
  // The library checks a copy: strict inference adds value_info to the model it is given, and
  // its checker knows the default domain only as "" (the spec also names it "ai.onnx").
  onnx::ModelProto checked = m;
  for (auto& o : *checked.mutable_opset_import()) {
    if (o.domain() == "ai.onnx") o.clear_domain();
  }
  for (auto& n : *checked.mutable_graph()->mutable_node()) {
    if (n.domain() == "ai.onnx") n.clear_domain();
  }
  try {
    onnx::checker::check_model(checked);
  } catch (const std::exception& e) {
    throw CompileError(path + ": the ONNX checker rejects the model: " + first_line(e.what()));
  }
  const onnx::GraphProto& g = m.graph();
  std::set<std::string> given;
  for (const auto& v : g.input()) given.insert(v.name());
  for (const auto& t : g.initializer()) given.insert(t.name());
  for (const auto& n : g.node()) given.insert(n.output().begin(), n.output().end());
  for (const auto& v : g.output()) {
    if (!given.count(v.name())) {
      throw CompileError(path + ": graph output '" + v.name() + "' is not produced by any node (nor an input or initializer)");
    }
  }
  // Strict inference checks every node's input types and shapes against its schema.
  try {
    onnx::shape_inference::InferShapes(checked, onnx::OpSchemaRegistry::Instance(),
                                       onnx::ShapeInferenceOptions(/*check_type=*/true, /*strict_mode=*/1));
  } catch (const std::exception& e) {
    throw CompileError(path + ": ONNX shape inference rejects the model: " + first_line(e.what()));
  }
  return {checked.graph().value_info().begin(), checked.graph().value_info().end()};
}

// An empty file parses as an empty ModelProto, so it is rejected here with the malformed ones.
onnx::ModelProto parse_model(const std::string& path) {
  const std::string bytes = read_bytes(path);
  onnx::ModelProto m;
  if (bytes.empty() || !m.ParseFromString(bytes)) {
    throw CompileError(path + ": not a valid ONNX model (truncated or malformed protobuf)");
  }
  if (!m.has_graph()) throw CompileError(path + ": the model has no graph");
  check_utf8(m, path);
  return m;
}

// Raw tensor data is little-endian whatever the host.
uint64_t load_le(const char* p, int bytes) {
  uint64_t v = 0;
  for (int i = bytes - 1; i >= 0; --i) v = v << 8 | static_cast<uint8_t>(p[i]);
  return v;
}

void store_le(std::string& out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>(v >> (8 * i) & 0xff));
}

float f32_from_bits(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

uint32_t bits_of(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof bits);
  return bits;
}

// Element count of `dims`; `what` names the tensor in the message for negative or huge dims.
int64_t checked_numel(const std::vector<int64_t>& dims, const std::string& what) {
  int64_t n = 1;
  for (int64_t d : dims) {
    if (d < 0) throw CompileError(what + " has a negative dimension: " + dims_text(dims));
    if (d > 0 && n > std::numeric_limits<int64_t>::max() / d) {
      throw CompileError(what + " is too large: " + dims_text(dims));
    }
    n *= d;
  }
  return n;
}

void check_count(size_t count, int64_t numel, const OnnxTensor& t, const std::string& what) {
  if (static_cast<int64_t>(count) != numel) {
    throw CompileError(what + " holds " + std::to_string(count) + " values but its dims " +
                       dims_text(t.dims) + " need " + std::to_string(numel));
  }
}

// `what` is "<file>: initializer 'x'" or the like, for messages.
OnnxTensor read_tensor(const onnx::TensorProto& p, const std::string& name,
                       const std::string& what) {
  if (p.data_location() == onnx::TensorProto_DataLocation_EXTERNAL || p.external_data_size() > 0) {
    throw CompileError(
        what +
        " keeps its data in an external file, which is not supported (save the model "
        "with its weights inside the .onnx file)");
  }
  OnnxTensor t;
  t.name = name;
  t.elem_type = p.data_type();
  t.dims.assign(p.dims().begin(), p.dims().end());
  const int64_t numel = checked_numel(t.dims, what);
  const std::string& raw = p.raw_data();
  auto raw_count = [&](int elem_bytes) {
    if (raw.size() % static_cast<size_t>(elem_bytes) != 0) {
      throw CompileError(what + " has " + std::to_string(raw.size()) +
                         " bytes of raw data, not a multiple of " + std::to_string(elem_bytes));
    }
    check_count(raw.size() / static_cast<size_t>(elem_bytes), numel, t, what);
    return static_cast<size_t>(numel);
  };
  switch (p.data_type()) {
    case onnx::TensorProto_DataType_FLOAT:
      if (p.has_raw_data()) {
        t.f32.resize(raw_count(4));
        for (size_t i = 0; i < t.f32.size(); ++i) {
          t.f32[i] = f32_from_bits(static_cast<uint32_t>(load_le(raw.data() + 4 * i, 4)));
        }
      } else {
        check_count(static_cast<size_t>(p.float_data_size()), numel, t, what);
        t.f32.assign(p.float_data().begin(), p.float_data().end());
      }
      break;
    case onnx::TensorProto_DataType_INT64:
      if (p.has_raw_data()) {
        t.i64.resize(raw_count(8));
        for (size_t i = 0; i < t.i64.size(); ++i)
          t.i64[i] = static_cast<int64_t>(load_le(raw.data() + 8 * i, 8));
      } else {
        check_count(static_cast<size_t>(p.int64_data_size()), numel, t, what);
        t.i64.assign(p.int64_data().begin(), p.int64_data().end());
      }
      break;
    case onnx::TensorProto_DataType_INT32:
      if (p.has_raw_data()) {
        t.i64.resize(raw_count(4));
        for (size_t i = 0; i < t.i64.size(); ++i) {
          t.i64[i] = static_cast<int32_t>(static_cast<uint32_t>(load_le(raw.data() + 4 * i, 4)));
        }
      } else {
        check_count(static_cast<size_t>(p.int32_data_size()), numel, t, what);
        t.i64.assign(p.int32_data().begin(), p.int32_data().end());
      }
      break;
    case onnx::TensorProto_DataType_BOOL:  // a mask (torch's masked_fill folds mask == 0 into one)
    case onnx::TensorProto_DataType_UINT8:
    case onnx::TensorProto_DataType_INT8:
      if (p.has_raw_data()) {
        t.i64.resize(raw_count(1));
        for (size_t i = 0; i < t.i64.size(); ++i) {
          const auto b = static_cast<uint8_t>(raw[i]);
          t.i64[i] = p.data_type() == onnx::TensorProto_DataType_INT8 ? static_cast<int8_t>(b) : b;
        }
      } else {
        check_count(static_cast<size_t>(p.int32_data_size()), numel, t, what);
        t.i64.assign(p.int32_data().begin(), p.int32_data().end());
      }
      break;
    default:
      break;
  }
  return t;
}

// Files from old writers may leave the attribute type unset; then the field that is present says.
OnnxAttr read_attr(const onnx::AttributeProto& a) {
  OnnxAttr r;
  int type = a.type();
  if (type == onnx::AttributeProto_AttributeType_UNDEFINED) {
    if (a.has_i())
      type = onnx::AttributeProto_AttributeType_INT;
    else if (a.has_f())
      type = onnx::AttributeProto_AttributeType_FLOAT;
    else if (a.has_s())
      type = onnx::AttributeProto_AttributeType_STRING;
    else if (a.ints_size())
      type = onnx::AttributeProto_AttributeType_INTS;
    else if (a.floats_size())
      type = onnx::AttributeProto_AttributeType_FLOATS;
  }
  switch (type) {
    case onnx::AttributeProto_AttributeType_INT:
      r.kind = OnnxAttr::kInt;
      r.i = a.i();
      break;
    case onnx::AttributeProto_AttributeType_FLOAT:
      r.kind = OnnxAttr::kFloat;
      r.f = a.f();
      break;
    case onnx::AttributeProto_AttributeType_INTS:
      r.kind = OnnxAttr::kInts;
      r.ints.assign(a.ints().begin(), a.ints().end());
      break;
    case onnx::AttributeProto_AttributeType_FLOATS:
      r.kind = OnnxAttr::kFloats;
      r.floats.assign(a.floats().begin(), a.floats().end());
      break;
    case onnx::AttributeProto_AttributeType_STRING:
      r.kind = OnnxAttr::kString;
      r.s = a.s();
      break;
    case onnx::AttributeProto_AttributeType_TENSOR: {
      r.kind = OnnxAttr::kOther;
      const onnx::TensorProto& t = a.t();
      long long n = 1;
      for (int64_t d : t.dims()) n *= d;
      if (n < 0 || n > 16 || t.data_location() == onnx::TensorProto_DataLocation_EXTERNAL) break;
      try {
        const OnnxTensor v = read_tensor(t, a.name(), "attribute '" + a.name() + "'");
        if (v.elem_type == kOnnxFloat && static_cast<long long>(v.f32.size()) == n) {
          r.tensor_type = kOnnxFloat;
          r.floats = v.f32;
        } else if (v.elem_type != kOnnxFloat && static_cast<long long>(v.i64.size()) == n) {
          r.tensor_type = v.elem_type;
          r.ints = v.i64;
        }
      } catch (const CompileError&) {
        r.tensor_type = 0;  // a type read_tensor refuses: not read (the op stays unfolded)
      }
      break;
    }
    default:
      r.kind = OnnxAttr::kOther;
      break;
  }
  return r;
}

// The value of a Constant node, named after its output.
OnnxTensor constant_value(const onnx::NodeProto& n, const std::string& what) {
  if (n.output_size() != 1 || n.output(0).empty())
    throw CompileError(what + " must have exactly one output");
  const std::string& name = n.output(0);
  for (const onnx::AttributeProto& a : n.attribute()) {
    OnnxTensor t;
    t.name = name;
    if (a.name() == "value") return read_tensor(a.t(), name, what);
    if (a.name() == "value_float") {
      t.elem_type = kOnnxFloat;
      t.f32 = {a.f()};
    } else if (a.name() == "value_floats") {
      t.elem_type = kOnnxFloat;
      t.dims = {a.floats_size()};
      t.f32.assign(a.floats().begin(), a.floats().end());
    } else if (a.name() == "value_int") {
      t.elem_type = kOnnxInt64;
      t.i64 = {a.i()};
    } else if (a.name() == "value_ints") {
      t.elem_type = kOnnxInt64;
      t.dims = {a.ints_size()};
      t.i64.assign(a.ints().begin(), a.ints().end());
    } else if (a.name() == "value_string") {
      t.elem_type = onnx::TensorProto_DataType_STRING;
    } else if (a.name() == "value_strings") {
      t.elem_type = onnx::TensorProto_DataType_STRING;
      t.dims = {a.strings_size()};
    } else if (a.name() == "sparse_value") {
      throw CompileError(what + " holds a sparse tensor, which is not supported");
    } else {
      continue;
    }
    return t;
  }
  throw CompileError(what + " has no value attribute");
}

OnnxValue read_value(const onnx::ValueInfoProto& v) {
  OnnxValue r;
  r.name = v.name();
  if (!v.type().has_tensor_type()) return r;
  const onnx::TypeProto_Tensor& tt = v.type().tensor_type();
  r.elem_type = tt.elem_type();
  r.has_shape = tt.has_shape();
  for (const onnx::TensorShapeProto_Dimension& d : tt.shape().dim()) {
    r.dims.push_back(d.has_dim_value() ? d.dim_value() : -1);
    r.dim_params.push_back(d.has_dim_param() ? d.dim_param() : "");
  }
  return r;
}

int64_t default_opset(const onnx::ModelProto& m, const std::string& path) {
  for (const onnx::OperatorSetIdProto& o : m.opset_import()) {
    if (o.domain().empty() || o.domain() == "ai.onnx") return o.version();
  }
  throw CompileError(path +
                     ": the model imports no opset of the default ONNX domain (supported: opset " +
                     std::to_string(kMinOpset) + " to " + std::to_string(kMaxOpset) + ")");
}

void set_f32_data(onnx::TensorProto& p, const std::vector<float>& values) {
  std::string raw;
  raw.reserve(values.size() * 4);
  for (float f : values) store_le(raw, bits_of(f), 4);
  p.clear_float_data();
  p.clear_external_data();
  p.clear_data_location();
  p.set_raw_data(std::move(raw));
}

// An OnnxTensor as a new initializer: float from f32, or int64 from i64.
onnx::TensorProto make_initializer(const OnnxTensor& t, const std::string& what) {
  onnx::TensorProto p;
  p.set_name(t.name);
  for (int64_t d : t.dims) p.add_dims(d);
  const int64_t numel = checked_numel(t.dims, what);
  if (t.elem_type == kOnnxInt64) {
    check_count(t.i64.size(), numel, t, what);
    p.set_data_type(onnx::TensorProto_DataType_INT64);
    std::string raw;
    raw.reserve(t.i64.size() * 8);
    for (int64_t v : t.i64) store_le(raw, static_cast<uint64_t>(v), 8);
    p.set_raw_data(std::move(raw));
  } else if (t.elem_type == kOnnxFloat || t.elem_type == 0) {
    check_count(t.f32.size(), numel, t, what);
    p.set_data_type(onnx::TensorProto_DataType_FLOAT);
    set_f32_data(p, t.f32);
  } else {
    throw CompileError(what + " is of type " + onnx_elem_type_name(t.elem_type) +
                       "; only float and int64 tensors can be added");
  }
  return p;
}

}  // namespace

const char* onnx_elem_type_name(int elem_type) {
  // Indexed by TensorProto.DataType; the complex types are not named.
  static const char* const kNames[] = {nullptr,  "float",  "uint8",  "int8",  "uint16",  "int16",
                                       "int32",  "int64",  "string", "bool",  "float16", "double",
                                       "uint32", "uint64", nullptr,  nullptr, "bfloat16"};
  if (elem_type >= 0 && elem_type < static_cast<int>(std::size(kNames)) && kNames[elem_type]) {
    return kNames[elem_type];
  }
  // One buffer per thread, so the pointer stays valid until that thread's next unknown type.
  thread_local std::string other;
  other = "type " + std::to_string(elem_type);
  return other.c_str();
}

namespace {

bool is_file_initializer(const OnnxModel& m, const std::string& name) {
  return std::find(m.initializer_order.begin(), m.initializer_order.end(), name) != m.initializer_order.end();
}

bool is_graph_output(const onnx::GraphProto& g, const std::string& name) {
  for (const onnx::ValueInfoProto& v : g.output()) {
    if (v.name() == name) return true;
  }
  return false;
}

}  // namespace

OnnxModel import_onnx(const std::string& path) {
  const onnx::ModelProto m = parse_model(path);
  OnnxModel out;
  out.path = path;
  out.ir_version = m.ir_version();
  out.producer = m.producer_name();
  out.opset = default_opset(m, path);
  if (out.opset < kMinOpset || out.opset > kMaxOpset) {
    throw CompileError(path + ": opset " + std::to_string(out.opset) +
                       " is not supported (supported: opset " + std::to_string(kMinOpset) + " to " +
                       std::to_string(kMaxOpset) +
                       "; re-export the model with opset_version in that range)");
  }
  const std::vector<onnx::ValueInfoProto> inferred = check_structure(m, path);
  for (const onnx::StringStringEntryProto& e : m.metadata_props())
    out.metadata[e.key()] = e.value();

  const onnx::GraphProto& g = m.graph();
  if (g.sparse_initializer_size() > 0) {
    throw CompileError(path + ": sparse initializer '" + g.sparse_initializer(0).values().name() +
                       "' is not supported");
  }
  for (const onnx::TensorProto& p : g.initializer()) {
    const std::string what = path + ": initializer '" + p.name() + "'";
    if (!out.initializers.emplace(p.name(), read_tensor(p, p.name(), what)).second) {
      throw CompileError(what + " is defined twice");
    }
    out.initializer_order.push_back(p.name());
  }
  for (const onnx::ValueInfoProto& v : g.input()) {
    if (!out.initializers.count(v.name())) out.inputs.push_back(read_value(v));
  }
  for (const onnx::ValueInfoProto& v : g.output()) out.outputs.push_back(read_value(v));
  for (const onnx::ValueInfoProto& v : inferred) out.value_info[v.name()] = read_value(v);

  for (int i = 0; i < g.node_size(); ++i) {
    const onnx::NodeProto& n = g.node(i);
    const std::string name = n.name().empty() ? "node_" + std::to_string(i) : n.name();
    const bool default_domain = n.domain().empty() || n.domain() == "ai.onnx";
    if (n.op_type() == "Constant" && default_domain) {
      const std::string what = path + ": Constant node '" + name + "'";
      OnnxTensor t = constant_value(n, what);
      const std::string key = t.name;
      if (!out.initializers.emplace(key, std::move(t)).second) {
        throw CompileError(what + " defines '" + key +
                           "', which is already an initializer or constant");
      }
      continue;
    }
    // An Identity of a parameter is torch's way of sharing initializers that were equal at
    // export (two LayerNorms' all-ones scales): a parameter of its own here, and in checkpoints
    // (write_onnx_with_weights).
    if (n.op_type() == "Identity" && default_domain && n.input_size() == 1 && n.output_size() == 1 && is_file_initializer(out, n.input(0)) &&
        !is_graph_output(g, n.output(0)) && !out.initializers.count(n.output(0))) {
      OnnxTensor t = out.initializers.at(n.input(0));
      t.name = n.output(0);
      out.initializers.emplace(t.name, std::move(t));
      out.initializer_order.push_back(n.output(0));
      continue;
    }
    OnnxNode node;
    node.name = name;
    node.op_type = n.op_type();
    node.domain = n.domain();
    node.inputs.assign(n.input().begin(), n.input().end());
    node.outputs.assign(n.output().begin(), n.output().end());
    for (const onnx::AttributeProto& a : n.attribute()) node.attrs[a.name()] = read_attr(a);
    out.nodes.push_back(std::move(node));
  }
  return out;
}

void write_onnx_with_weights(const std::string& src_path, const std::string& dst_path,
                             const std::map<std::string, std::vector<float>>& weights,
                             const std::vector<OnnxTensor>& extra,
                             const std::map<std::string, std::string>& metadata) {
  onnx::ModelProto m = parse_model(src_path);
  onnx::GraphProto& g = *m.mutable_graph();
  std::map<std::string, onnx::TensorProto*> by_name;  // element pointers survive add_initializer
  for (onnx::TensorProto& p : *g.mutable_initializer()) by_name.emplace(p.name(), &p);

  for (const auto& [name, values] : weights) {
    auto it = by_name.find(name);
    if (it == by_name.end()) {
      // A parameter import_onnx made of an Identity of an initializer: an initializer of its
      // own now (the source's type and dims), its Identity node gone.
      for (int i = 0; i < g.node_size(); ++i) {
        const onnx::NodeProto& n = g.node(i);
        if (n.op_type() != "Identity" || n.input_size() != 1 || n.output_size() != 1 || n.output(0) != name) continue;
        const auto src = by_name.find(n.input(0));
        if (src == by_name.end()) break;
        onnx::TensorProto* added = g.add_initializer();
        *added = *src->second;
        added->set_name(name);
        by_name.emplace(name, added);
        g.mutable_node()->DeleteSubrange(i, 1);
        break;
      }
      it = by_name.find(name);
    }
    if (it == by_name.end())
      throw CompileError(src_path + ": has no initializer '" + name + "' to replace");
    onnx::TensorProto& p = *it->second;
    const std::string what = dst_path + ": initializer '" + name + "'";
    if (p.data_type() != onnx::TensorProto_DataType_FLOAT) {
      throw CompileError(what + " is " + onnx_elem_type_name(p.data_type()) + ", not float");
    }
    OnnxTensor shape;
    shape.dims.assign(p.dims().begin(), p.dims().end());
    check_count(values.size(), checked_numel(shape.dims, what), shape, what);
    set_f32_data(p, values);
  }

  for (const OnnxTensor& t : extra) {
    onnx::TensorProto p = make_initializer(t, dst_path + ": extra tensor '" + t.name + "'");
    const auto it = by_name.find(t.name);
    if (it != by_name.end()) {
      it->second->Swap(&p);
    } else {
      onnx::TensorProto* added = g.add_initializer();
      added->Swap(&p);
      by_name.emplace(t.name, added);
    }
  }

  for (const auto& [key, value] : metadata) {
    onnx::StringStringEntryProto* entry = nullptr;
    for (onnx::StringStringEntryProto& e : *m.mutable_metadata_props()) {
      if (e.key() == key) entry = &e;
    }
    if (!entry) {
      entry = m.add_metadata_props();
      entry->set_key(key);
    }
    entry->set_value(value);
  }

  std::string bytes;
  if (!m.SerializeToString(&bytes)) {
    throw CompileError(dst_path + ": cannot serialize the model (protobuf limits a model to 2 GB)");
  }
  write_file_atomic(dst_path, bytes, /*durable=*/true);  // checkpoints; an I/O error is a runtime error (exit 1)
}

}  // namespace wafersim::compiler
