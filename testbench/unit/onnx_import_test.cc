// The ONNX reader (compiler pass 1) on small models built here with the protobuf API: every field
// it fills, every bad file it must reject with a message naming the problem, and the checkpoint
// writer's round trip.
#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "compiler/onnx_model.h"
#include "test_support.h"

namespace wafersim::test {
namespace {

using compiler::CompileError;
using compiler::import_onnx;
using compiler::OnnxAttr;
using compiler::OnnxModel;
using compiler::OnnxTensor;
using compiler::write_onnx_with_weights;

std::string le_f32(const std::vector<float>& v) {
  std::string raw;
  for (float f : v) {
    uint32_t bits;
    std::memcpy(&bits, &f, 4);
    for (int i = 0; i < 4; ++i) raw.push_back(static_cast<char>(bits >> (8 * i) & 0xff));
  }
  return raw;
}

std::string le_i64(const std::vector<int64_t>& v) {
  std::string raw;
  for (int64_t x : v) {
    for (int i = 0; i < 8; ++i)
      raw.push_back(static_cast<char>(static_cast<uint64_t>(x) >> (8 * i) & 0xff));
  }
  return raw;
}

onnx::TensorProto* add_tensor(onnx::TensorProto* t, const std::string& name, int type,
                              std::vector<int64_t> dims) {
  t->set_name(name);
  t->set_data_type(type);
  for (int64_t d : dims) t->add_dims(d);
  return t;
}

// A tensor value named `name`; a dim < 0 is the symbol `sym`, a dim of -2 has neither.
void add_value(onnx::ValueInfoProto* v, const std::string& name, int type,
               std::vector<int64_t> dims, const std::string& sym = "N") {
  v->set_name(name);
  onnx::TypeProto_Tensor* tt = v->mutable_type()->mutable_tensor_type();
  tt->set_elem_type(type);
  onnx::TensorShapeProto* shape = tt->mutable_shape();
  for (int64_t d : dims) {
    onnx::TensorShapeProto_Dimension* dim = shape->add_dim();
    if (d >= 0) dim->set_dim_value(d);
    if (d == -1) dim->set_dim_param(sym);
  }
}

onnx::AttributeProto* add_attr(onnx::NodeProto* n, const std::string& name,
                               onnx::AttributeProto_AttributeType type) {
  onnx::AttributeProto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(type);
  return a;
}

// y = Gemm(x, W, b); z = Relu(y) (no node name); out = Custom(z, "", k) with one attribute of
// each kind; two Constant nodes. W is listed as a graph input too, as old exporters do.
onnx::ModelProto gemm_model(int64_t opset = 13) {
  onnx::ModelProto m;
  m.set_ir_version(8);
  m.set_producer_name("wafersim-test");
  m.add_opset_import()->set_version(opset);
  onnx::OperatorSetIdProto* ml = m.add_opset_import();
  ml->set_domain("ai.onnx.ml");
  ml->set_version(3);
  onnx::OperatorSetIdProto* custom_domain = m.add_opset_import();  // the Custom node's
  custom_domain->set_domain("wafersim.test");
  custom_domain->set_version(1);
  onnx::StringStringEntryProto* md = m.add_metadata_props();
  md->set_key("author");
  md->set_value("test");

  onnx::GraphProto* g = m.mutable_graph();
  g->set_name("gemm");
  add_value(g->add_input(), "x", onnx::TensorProto_DataType_FLOAT, {-1, 4}, "batch");
  add_value(g->add_input(), "W", onnx::TensorProto_DataType_FLOAT, {3, 4});
  add_value(g->add_output(), "out", onnx::TensorProto_DataType_FLOAT, {-1, 3, -2}, "batch");

  onnx::TensorProto* w =
      add_tensor(g->add_initializer(), "W", onnx::TensorProto_DataType_FLOAT, {3, 4});
  for (int i = 0; i < 12; ++i) w->add_float_data(0.5f * static_cast<float>(i));
  add_tensor(g->add_initializer(), "b", onnx::TensorProto_DataType_FLOAT, {3})
      ->set_raw_data(le_f32({1.5f, -2.0f, 3.25f}));
  add_tensor(g->add_initializer(), "shape", onnx::TensorProto_DataType_INT64, {2})
      ->set_raw_data(le_i64({-1, 5000000000}));
  onnx::TensorProto* i32 =
      add_tensor(g->add_initializer(), "i32", onnx::TensorProto_DataType_INT32, {2});
  i32->add_int32_data(-7);
  i32->add_int32_data(9);
  onnx::TensorProto* ints =
      add_tensor(g->add_initializer(), "i64", onnx::TensorProto_DataType_INT64, {1});
  ints->add_int64_data(42);
  add_tensor(g->add_initializer(), "half", onnx::TensorProto_DataType_FLOAT16, {2})
      ->set_raw_data("abcd");

  onnx::NodeProto* c1 = g->add_node();  // node_0
  c1->set_op_type("Constant");
  c1->add_output("c");
  onnx::AttributeProto* value = add_attr(c1, "value", onnx::AttributeProto_AttributeType_TENSOR);
  onnx::TensorProto* ct = add_tensor(value->mutable_t(), "", onnx::TensorProto_DataType_FLOAT, {2});
  ct->add_float_data(0.25f);
  ct->add_float_data(4.0f);
  onnx::NodeProto* c2 = g->add_node();
  c2->set_name("k_const");
  c2->set_op_type("Constant");
  c2->add_output("k");
  if (opset >= 12) {  // value_ints came with opset 12
    onnx::AttributeProto* vi = add_attr(c2, "value_ints", onnx::AttributeProto_AttributeType_INTS);
    vi->add_ints(1);
    vi->add_ints(-1);
  } else {
    onnx::TensorProto* kt = add_tensor(add_attr(c2, "value", onnx::AttributeProto_AttributeType_TENSOR)->mutable_t(), "",
                                       onnx::TensorProto_DataType_INT64, {2});
    kt->add_int64_data(1);
    kt->add_int64_data(-1);
  }

  onnx::NodeProto* gemm = g->add_node();
  gemm->set_name("/fc1/Gemm");
  gemm->set_op_type("Gemm");
  for (const char* in : {"x", "W", "b"}) gemm->add_input(in);
  gemm->add_output("y");
  add_attr(gemm, "alpha", onnx::AttributeProto_AttributeType_FLOAT)->set_f(1.0f);
  add_attr(gemm, "beta", onnx::AttributeProto_AttributeType_FLOAT)->set_f(0.5f);
  add_attr(gemm, "transB", onnx::AttributeProto_AttributeType_INT)->set_i(1);

  onnx::NodeProto* relu = g->add_node();  // node_3
  relu->set_op_type("Relu");
  relu->add_input("y");
  relu->add_output("z");

  onnx::NodeProto* custom = g->add_node();
  custom->set_name("custom");
  custom->set_op_type("Custom");
  custom->set_domain("wafersim.test");
  for (const char* in : {"z", "", "k"}) custom->add_input(in);
  custom->add_output("out");
  onnx::AttributeProto* is = add_attr(custom, "perm", onnx::AttributeProto_AttributeType_INTS);
  is->add_ints(1);
  is->add_ints(0);
  onnx::AttributeProto* fs = add_attr(custom, "scales", onnx::AttributeProto_AttributeType_FLOATS);
  fs->add_floats(2.0f);
  fs->add_floats(0.5f);
  add_attr(custom, "mode", onnx::AttributeProto_AttributeType_STRING)->set_s("nearest");
  add_tensor(add_attr(custom, "t", onnx::AttributeProto_AttributeType_TENSOR)->mutable_t(), "t",
             onnx::TensorProto_DataType_FLOAT, {})
      ->add_float_data(1.0f);  // a scalar holds one value
  return m;
}

std::string save(const onnx::ModelProto& m, const std::string& name) {
  const std::string path = test_tmp_dir() + "/" + name;
  std::ofstream out(path, std::ios::binary);
  EXPECT_TRUE(m.SerializeToOstream(&out));
  return path;
}

std::string save_bytes(const std::string& bytes, const std::string& name) {
  const std::string path = test_tmp_dir() + "/" + name;
  std::ofstream(path, std::ios::binary) << bytes;
  return path;
}

std::string import_error(const std::string& path) {
  try {
    import_onnx(path);
  } catch (const CompileError& e) {
    return e.what();
  }
  return "";
}

std::vector<float> iota_f32(size_t n, float base) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = base + static_cast<float>(i);
  return v;
}

TEST(OnnxImport, ReadsHeaderInputsOutputsAndMetadata) {
  const std::string path = save(gemm_model(), "model.onnx");
  const OnnxModel m = import_onnx(path);
  EXPECT_EQ(m.path, path);
  EXPECT_EQ(m.ir_version, 8);
  EXPECT_EQ(m.opset, 13);  // the default domain's, not ai.onnx.ml's
  EXPECT_EQ(m.producer, "wafersim-test");
  EXPECT_EQ(m.metadata, (std::map<std::string, std::string>{{"author", "test"}}));

  ASSERT_EQ(m.inputs.size(), 1u);  // W is an initializer
  EXPECT_EQ(m.inputs[0].name, "x");
  EXPECT_EQ(m.inputs[0].elem_type, compiler::kOnnxFloat);
  EXPECT_EQ(m.inputs[0].dims, (std::vector<int64_t>{-1, 4}));
  EXPECT_EQ(m.inputs[0].dim_params, (std::vector<std::string>{"batch", ""}));
  ASSERT_EQ(m.outputs.size(), 1u);
  EXPECT_EQ(m.outputs[0].name, "out");
  EXPECT_EQ(m.outputs[0].dims, (std::vector<int64_t>{-1, 3, -1}));
  EXPECT_EQ(m.outputs[0].dim_params, (std::vector<std::string>{"batch", "", ""}));
}

TEST(OnnxImport, ReadsNodesAndEveryAttributeKind) {
  const OnnxModel m = import_onnx(save(gemm_model(), "model.onnx"));
  ASSERT_EQ(m.nodes.size(), 3u);  // the two Constants are folded away
  const compiler::OnnxNode& gemm = m.nodes[0];
  EXPECT_EQ(gemm.name, "/fc1/Gemm");
  EXPECT_EQ(gemm.op_type, "Gemm");
  EXPECT_EQ(gemm.domain, "");
  EXPECT_EQ(gemm.inputs, (std::vector<std::string>{"x", "W", "b"}));
  EXPECT_EQ(gemm.outputs, (std::vector<std::string>{"y"}));
  ASSERT_NE(gemm.attr("alpha"), nullptr);
  EXPECT_EQ(gemm.attr("alpha")->kind, OnnxAttr::kFloat);
  EXPECT_EQ(gemm.attr("alpha")->f, 1.0f);
  EXPECT_EQ(gemm.attr("beta")->f, 0.5f);
  ASSERT_NE(gemm.attr("transB"), nullptr);
  EXPECT_EQ(gemm.attr("transB")->kind, OnnxAttr::kInt);
  EXPECT_EQ(gemm.attr("transB")->i, 1);
  EXPECT_EQ(gemm.attr("transA"), nullptr);

  EXPECT_EQ(m.nodes[1].name, "node_3");  // unnamed: its index among all nodes, Constants included
  EXPECT_EQ(m.nodes[1].op_type, "Relu");
  EXPECT_TRUE(m.nodes[1].attrs.empty());

  const compiler::OnnxNode& c = m.nodes[2];
  EXPECT_EQ(c.name, "custom");
  EXPECT_EQ(c.domain, "wafersim.test");
  EXPECT_EQ(c.inputs, (std::vector<std::string>{"z", "", "k"}));
  EXPECT_EQ(c.attr("perm")->kind, OnnxAttr::kInts);
  EXPECT_EQ(c.attr("perm")->ints, (std::vector<int64_t>{1, 0}));
  EXPECT_EQ(c.attr("scales")->kind, OnnxAttr::kFloats);
  EXPECT_EQ(c.attr("scales")->floats, (std::vector<float>{2.0f, 0.5f}));
  EXPECT_EQ(c.attr("mode")->kind, OnnxAttr::kString);
  EXPECT_EQ(c.attr("mode")->s, "nearest");
  EXPECT_EQ(c.attr("t")->kind, OnnxAttr::kOther);
}

TEST(OnnxImport, ReadsInitializersInEveryEncodingAndFoldsConstants) {
  const OnnxModel m = import_onnx(save(gemm_model(), "model.onnx"));
  EXPECT_EQ(m.initializer_order,
            (std::vector<std::string>{"W", "b", "shape", "i32", "i64", "half"}));
  ASSERT_EQ(m.initializers.size(), 8u);  // and the two Constant values

  const OnnxTensor& w = m.initializers.at("W");  // float_data
  EXPECT_EQ(w.name, "W");
  EXPECT_EQ(w.elem_type, compiler::kOnnxFloat);
  EXPECT_EQ(w.dims, (std::vector<int64_t>{3, 4}));
  EXPECT_EQ(w.numel(), 12);
  ASSERT_EQ(w.f32.size(), 12u);
  EXPECT_EQ(w.f32[11], 5.5f);
  EXPECT_TRUE(w.i64.empty());
  EXPECT_EQ(m.initializers.at("b").f32, (std::vector<float>{1.5f, -2.0f, 3.25f}));    // raw_data
  EXPECT_EQ(m.initializers.at("shape").i64, (std::vector<int64_t>{-1, 5000000000}));  // raw_data
  EXPECT_EQ(m.initializers.at("i32").elem_type, 6);
  EXPECT_EQ(m.initializers.at("i32").i64, (std::vector<int64_t>{-7, 9}));
  EXPECT_EQ(m.initializers.at("i64").i64, (std::vector<int64_t>{42}));
  const OnnxTensor& half = m.initializers.at("half");  // kept without data
  EXPECT_EQ(half.elem_type, compiler::kOnnxFloat16);
  EXPECT_EQ(half.dims, (std::vector<int64_t>{2}));
  EXPECT_TRUE(half.f32.empty() && half.i64.empty());

  const OnnxTensor& c = m.initializers.at("c");  // Constant `value`, named after its output
  EXPECT_EQ(c.name, "c");
  EXPECT_EQ(c.dims, (std::vector<int64_t>{2}));
  EXPECT_EQ(c.f32, (std::vector<float>{0.25f, 4.0f}));
  const OnnxTensor& k = m.initializers.at("k");  // Constant `value_ints`
  EXPECT_EQ(k.elem_type, compiler::kOnnxInt64);
  EXPECT_EQ(k.dims, (std::vector<int64_t>{2}));
  EXPECT_EQ(k.i64, (std::vector<int64_t>{1, -1}));
}

TEST(OnnxImport, ScalarConstantsBecomeZeroRankTensors) {
  onnx::ModelProto p = gemm_model();
  onnx::NodeProto* f = p.mutable_graph()->add_node();
  f->set_op_type("Constant");
  f->add_output("eps");
  add_attr(f, "value_float", onnx::AttributeProto_AttributeType_FLOAT)->set_f(1e-5f);
  onnx::NodeProto* fs = p.mutable_graph()->add_node();
  fs->set_op_type("Constant");
  fs->add_output("fs");
  add_attr(fs, "value_floats", onnx::AttributeProto_AttributeType_FLOATS)->add_floats(7.0f);
  onnx::NodeProto* i = p.mutable_graph()->add_node();
  i->set_op_type("Constant");
  i->set_domain("ai.onnx");
  i->add_output("axis");
  add_attr(i, "value_int", onnx::AttributeProto_AttributeType_INT)->set_i(-1);
  const OnnxModel m = import_onnx(save(p, "model.onnx"));
  EXPECT_EQ(m.nodes.size(), 3u);
  const OnnxTensor& eps = m.initializers.at("eps");
  EXPECT_EQ(eps.elem_type, compiler::kOnnxFloat);
  EXPECT_TRUE(eps.dims.empty());
  EXPECT_EQ(eps.numel(), 1);
  EXPECT_EQ(eps.f32, (std::vector<float>{1e-5f}));
  EXPECT_EQ(m.initializers.at("fs").dims, (std::vector<int64_t>{1}));
  EXPECT_EQ(m.initializers.at("fs").f32, (std::vector<float>{7.0f}));
  EXPECT_EQ(m.initializers.at("axis").elem_type, compiler::kOnnxInt64);
  EXPECT_EQ(m.initializers.at("axis").i64, (std::vector<int64_t>{-1}));
}

TEST(OnnxImport, MissingFileIsReported) {
  const std::string path = test_tmp_dir() + "/absent.onnx";
  const std::string e = import_error(path);
  EXPECT_TRUE(contains(e, path + ": cannot open (No such file or directory)")) << e;
}

TEST(OnnxImport, EmptyFileIsNotAModel) {
  const std::string path = save_bytes("", "empty.onnx");
  const std::string e = import_error(path);
  EXPECT_EQ(e, path + ": not a valid ONNX model (truncated or malformed protobuf)");
}

TEST(OnnxImport, GarbageBytesAreNotAModel) {
  const std::string path = save_bytes("this is not an ONNX model\n\xff\xff\xff", "garbage.onnx");
  const std::string e = import_error(path);
  EXPECT_EQ(e, path + ": not a valid ONNX model (truncated or malformed protobuf)");
}

TEST(OnnxImport, TruncatedModelIsNotAModel) {
  std::string bytes;
  ASSERT_TRUE(gemm_model().SerializeToString(&bytes));
  ASSERT_NO_THROW(import_onnx(save_bytes(bytes, "whole.onnx")));
  const std::string path = save_bytes(bytes.substr(0, bytes.size() / 2), "half.onnx");
  const std::string e = import_error(path);
  EXPECT_EQ(e, path + ": not a valid ONNX model (truncated or malformed protobuf)");
}

TEST(OnnxImport, ModelWithoutGraphIsRejected) {
  onnx::ModelProto p = gemm_model();
  p.clear_graph();
  const std::string path = save(p, "nograph.onnx");
  EXPECT_EQ(import_error(path), path + ": the model has no graph");
}

TEST(OnnxImport, OpsetsOutside11To17AreRejectedNamingTheRange) {
  for (int64_t opset : {9, 18}) {
    const std::string path = save(gemm_model(opset), "opset" + std::to_string(opset) + ".onnx");
    const std::string e = import_error(path);
    EXPECT_TRUE(contains(e, path + ": opset " + std::to_string(opset) + " is not supported")) << e;
    EXPECT_TRUE(contains(e, "supported: opset 11 to 17")) << e;
  }
  for (int64_t opset : {11, 17})
    EXPECT_EQ(import_onnx(save(gemm_model(opset), "ok.onnx")).opset, opset);

  onnx::ModelProto named = gemm_model(12);
  named.mutable_opset_import(0)->set_domain("ai.onnx");
  EXPECT_EQ(import_onnx(save(named, "named.onnx")).opset, 12);
  named.mutable_opset_import(0)->set_domain("com.example");
  const std::string e = import_error(save(named, "nodefault.onnx"));
  EXPECT_TRUE(contains(e, "imports no opset of the default ONNX domain")) << e;
}

TEST(OnnxImport, ExternalDataIsRejected) {
  onnx::ModelProto p = gemm_model();
  onnx::TensorProto* w = p.mutable_graph()->mutable_initializer(0);
  w->clear_float_data();
  w->set_data_location(onnx::TensorProto_DataLocation_EXTERNAL);
  onnx::StringStringEntryProto* loc = w->add_external_data();
  loc->set_key("location");
  loc->set_value("weights.bin");
  const std::string path = save(p, "external.onnx");
  const std::string e = import_error(path);
  EXPECT_TRUE(contains(e, path + ": initializer 'W' keeps its data in an external file")) << e;
}

TEST(OnnxImport, DataThatDoesNotFitTheDimsIsRejected) {
  onnx::ModelProto p = gemm_model();
  p.mutable_graph()->mutable_initializer(1)->set_raw_data(le_f32({1, 2}));
  const std::string path = save(p, "short.onnx");
  const std::string e = import_error(path);
  EXPECT_TRUE(contains(e, path + ": initializer 'b' holds 2 values but its dims [3] need 3")) << e;
}

TEST(OnnxImport, ElementTypesHaveNames) {
  EXPECT_STREQ(compiler::onnx_elem_type_name(compiler::kOnnxFloat), "float");
  EXPECT_STREQ(compiler::onnx_elem_type_name(compiler::kOnnxInt64), "int64");
  EXPECT_STREQ(compiler::onnx_elem_type_name(compiler::kOnnxFloat16), "float16");
  EXPECT_STREQ(compiler::onnx_elem_type_name(compiler::kOnnxDouble), "double");
  EXPECT_STREQ(compiler::onnx_elem_type_name(9), "bool");
  EXPECT_STREQ(compiler::onnx_elem_type_name(16), "bfloat16");
  EXPECT_STREQ(compiler::onnx_elem_type_name(14), "type 14");
}

TEST(OnnxImport, WritingWeightsRoundTrips) {
  const std::string src = save(gemm_model(), "model.onnx");
  const std::string dst = test_tmp_dir() + "/trained.onnx";
  const OnnxModel before = import_onnx(src);
  OnnxTensor moment{"W.m", compiler::kOnnxFloat, {3, 4}, iota_f32(12, -6), {}};
  OnnxTensor bias{"b", compiler::kOnnxFloat, {3}, {9, 8, 7}, {}};  // replaces the initializer
  write_onnx_with_weights(src, dst, {{"W", iota_f32(12, 100)}}, {moment, bias},
                          {{"author", "trainer"}, {"step", "10"}});

  EXPECT_TRUE(std::filesystem::exists(dst));
  EXPECT_FALSE(std::filesystem::exists(dst + ".tmp"));
  for (const auto& entry : std::filesystem::directory_iterator(test_tmp_dir())) {
    EXPECT_NE(entry.path().extension(), ".tmp") << entry.path();
  }

  const OnnxModel after = import_onnx(dst);
  EXPECT_EQ(after.opset, before.opset);
  EXPECT_EQ(after.producer, before.producer);
  ASSERT_EQ(after.nodes.size(), before.nodes.size());
  for (size_t i = 0; i < after.nodes.size(); ++i) {
    EXPECT_EQ(after.nodes[i].name, before.nodes[i].name);
    EXPECT_EQ(after.nodes[i].inputs, before.nodes[i].inputs);
  }
  ASSERT_EQ(after.inputs.size(), 1u);
  EXPECT_EQ(after.inputs[0].dim_params, before.inputs[0].dim_params);
  EXPECT_EQ(after.initializer_order,
            (std::vector<std::string>{"W", "b", "shape", "i32", "i64", "half", "W.m"}));
  EXPECT_EQ(after.initializers.at("W").dims, (std::vector<int64_t>{3, 4}));
  EXPECT_EQ(after.initializers.at("W").f32, iota_f32(12, 100));
  EXPECT_EQ(after.initializers.at("b").f32, (std::vector<float>{9, 8, 7}));
  EXPECT_EQ(after.initializers.at("W.m").dims, (std::vector<int64_t>{3, 4}));
  EXPECT_EQ(after.initializers.at("W.m").f32, iota_f32(12, -6));
  for (const char* same : {"shape", "i32", "i64", "c", "k"}) {
    EXPECT_EQ(after.initializers.at(same).i64, before.initializers.at(same).i64) << same;
    EXPECT_EQ(after.initializers.at(same).f32, before.initializers.at(same).f32) << same;
  }
  EXPECT_EQ(after.metadata,
            (std::map<std::string, std::string>{{"author", "trainer"}, {"step", "10"}}));

  // The replaced weights are stored as little-endian raw_data, and keys are not duplicated.
  onnx::ModelProto p;
  std::ifstream in(dst, std::ios::binary);
  ASSERT_TRUE(p.ParseFromIstream(&in));
  EXPECT_EQ(p.graph().initializer(0).float_data_size(), 0);
  EXPECT_EQ(p.graph().initializer(0).raw_data(), le_f32(iota_f32(12, 100)));
  EXPECT_EQ(p.metadata_props_size(), 2);
}

TEST(OnnxImport, WritingRejectsUnknownNamesAndWrongSizes) {
  const std::string src = save(gemm_model(), "model.onnx");
  const std::string dst = test_tmp_dir() + "/out.onnx";
  auto write_error = [&](const std::map<std::string, std::vector<float>>& w,
                         const std::vector<OnnxTensor>& extra, const std::string& to) {
    try {
      write_onnx_with_weights(src, to, w, extra, {});
    } catch (const CompileError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  // An I/O failure is not a model error: a plain runtime_error (exit 1, not 2).
  auto io_error = [&](const std::string& to) {
    try {
      write_onnx_with_weights(src, to, {}, {}, {});
    } catch (const CompileError& e) {
      return std::string("CompileError: ") + e.what();
    } catch (const std::runtime_error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  std::string e = write_error({{"fc9.weight", {1}}}, {}, dst);
  EXPECT_TRUE(contains(e, src + ": has no initializer 'fc9.weight' to replace")) << e;
  e = write_error({{"W", {1, 2, 3}}}, {}, dst);
  EXPECT_TRUE(contains(e, "initializer 'W' holds 3 values but its dims [3, 4] need 12")) << e;
  e = write_error({{"shape", {1, 2}}}, {}, dst);
  EXPECT_TRUE(contains(e, "initializer 'shape' is int64, not float")) << e;
  e = write_error({}, {OnnxTensor{"m", compiler::kOnnxFloat, {2, 2}, {1, 2, 3}, {}}}, dst);
  EXPECT_TRUE(contains(e, "extra tensor 'm' holds 3 values but its dims [2, 2] need 4")) << e;
  EXPECT_FALSE(std::filesystem::exists(dst));

  const std::string nowhere = test_tmp_dir() + "/no/such/dir/out.onnx";
  e = io_error(nowhere);
  EXPECT_TRUE(contains(e, "cannot write " + nowhere + ".tmp")) << e;
  EXPECT_FALSE(std::filesystem::exists(nowhere + ".tmp"));
}

}  // namespace
}  // namespace wafersim::test
