#!/usr/bin/python3
"""Writes the seed inputs of the fuzz targets: testbench/fuzz/corpus/TARGET/seed-*, and the
program directory fuzz_program reads, testbench/fuzz/program/ (images and data.bin).

Usage: testbench/fuzz/make_seeds.py [--wafersim build/wafersim]
Seeds are small valid inputs (the demo model, small models from scripts/make_model.py, checkpoints
of 2-step training runs, kernel programs from `wafersim kernel`, INI and route files, IDX and NPY
files) and malformed variants of them. Only seed-* files are rewritten: the minimized inputs of
faults the fuzzers found (crash-*, regress-*) are committed by hand and kept. The same wafersim
binary gives the same bytes. Needs Debian's python3-onnx, python3-numpy and python3-torch.
"""
import argparse
import gzip
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile

try:
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper
except ImportError as e:
    sys.exit(f"make_seeds.py: {e}: needs apt-get install python3-onnx python3-numpy and /usr/bin/python3")

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
CORPUS = os.path.join(HERE, "corpus")


def seed_dir(target):
    d = os.path.join(CORPUS, target)
    os.makedirs(d, exist_ok=True)
    for f in os.listdir(d):
        if f.startswith("seed-"):
            os.remove(os.path.join(d, f))
    return d


def put(target, name, data):
    if isinstance(data, str):
        data = data.encode()
    with open(os.path.join(CORPUS, target, "seed-" + name), "wb") as f:
        f.write(data)


def two(first, second):
    """An input of fuzz_idx or fuzz_npy: both files (fuzz_support.h, split_two)."""
    return struct.pack("<I", len(first)) + first + second


def gz(data):
    return gzip.compress(data, mtime=0)


# --- ONNX models ---

def model(nodes, inputs, outputs, inits, opset=13, meta=None, domains=()):
    g = helper.make_graph(nodes, "g", inputs, outputs, inits)
    ops = [helper.make_opsetid("", opset)] if opset else []
    ops += [helper.make_opsetid(d, 1) for d in domains]
    m = helper.make_model(g, opset_imports=ops, producer_name="make_seeds")
    m.ir_version = 8
    for k, v in (meta or {}).items():
        e = m.metadata_props.add()
        e.key, e.value = k, v
    return m


def f32(name, shape, seed):
    rng = np.random.default_rng(seed)
    return numpy_helper.from_array(rng.uniform(-0.5, 0.5, shape).astype(np.float32), name)


def vin(name, dims, t=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, t, dims)


def mlp(sizes=(6, 4, 3), act="Relu", opset=13, gemm=True, **extra):
    """A chain of dense layers; MatMul + Add when gemm is False."""
    nodes, inits, x = [], [], "input"
    for i in range(len(sizes) - 1):
        w, b, y = f"fc{i + 1}.weight", f"fc{i + 1}.bias", f"h{i + 1}"
        if gemm:
            inits += [f32(w, (sizes[i + 1], sizes[i]), i), f32(b, (sizes[i + 1],), 10 + i)]
            nodes.append(helper.make_node("Gemm", [x, w, b], [y], name=f"/fc{i + 1}/Gemm", transB=1, **extra))
        else:
            inits += [f32(w, (sizes[i], sizes[i + 1]), i), f32(b, (sizes[i + 1],), 10 + i)]
            nodes.append(helper.make_node("MatMul", [x, w], [y + "m"], name=f"/fc{i + 1}/MatMul"))
            nodes.append(helper.make_node("Add", [y + "m", b], [y], name=f"/fc{i + 1}/Add"))
        x = y
        if i < len(sizes) - 2 and act:
            nodes.append(helper.make_node(act, [x], [x + "a"], name=f"/act{i + 1}/{act}"))
            x += "a"
    return nodes, inits, x


def onnx_seeds(wafersim, tmp):
    seed_dir("fuzz_onnx")
    put("fuzz_onnx", "fc_mnist.onnx", open(os.path.join(ROOT, "models/fc_mnist.onnx"), "rb").read())
    for name, args in [("mlp-relu.onnx", ["--layers", "16,8,4"]),
                       ("mlp-sigmoid-opset11.onnx", ["--layers", "12,6,3", "--act", "sigmoid", "--opset", "11"]),
                       ("mlp-tanh-loss-opset17.onnx", ["--layers", "8,5,2", "--act", "tanh", "--loss", "graph",
                                                       "--opset", "17"])]:
        out = os.path.join(tmp, name)
        subprocess.run(["/usr/bin/python3", os.path.join(ROOT, "scripts/make_model.py"), "--out", out] + args,
                       check=True, stdout=subprocess.DEVNULL)
        put("fuzz_onnx", name, open(out, "rb").read())
    # Graphs beyond a dense chain as torch exports them (the graph IR's passes: folding, fusion).
    graphs = os.path.join(tmp, "graphs")
    for models, opset in [("norm_gelu,gelu_tanh,cnn,residual", "11"), ("encoder", "13"), ("norm_gelu", "17")]:
        paths = subprocess.run(["/usr/bin/python3", os.path.join(ROOT, "scripts/export_graph_models.py"), "--out", graphs,
                                "--models", models, "--opsets", opset], check=True, capture_output=True, text=True).stdout.split()
        for path in paths:
            put("fuzz_onnx", "graph-" + os.path.basename(path), open(path, "rb").read())

    def put_model(name, m):
        put("fuzz_onnx", name, m.SerializeToString())

    nodes, inits, y = mlp()
    x = vin("input", ["batch", 6])
    put_model("gemm-relu.onnx", model(nodes, [x], [vin(y, ["batch", 3])], inits))
    nodes, inits, y = mlp(gemm=False, act="Sigmoid")
    put_model("matmul-add-sigmoid.onnx", model(nodes, [x], [vin(y, ["batch", 3])], inits))
    nodes, inits, y = mlp(act="Tanh", alpha=0.5, beta=2.0)
    put_model("gemm-alpha-beta.onnx", model(nodes, [x], [vin(y, [1, 3])], inits))
    # Flatten, Reshape to a Constant shape, Identity and Dropout in front; LogSoftmax and the
    # NegativeLogLikelihoodLoss with a labels input behind.
    shape = helper.make_node("Constant", [], ["shape"], name="/Constant",
                             value=numpy_helper.from_array(np.array([-1, 6], dtype=np.int64)))
    pre = [shape, helper.make_node("Flatten", ["image"], ["flat"], name="/Flatten"),
           helper.make_node("Reshape", ["flat", "shape"], ["r"], name="/Reshape"),
           helper.make_node("Identity", ["r"], ["i"], name="/Identity"),
           helper.make_node("Dropout", ["i"], ["input"], name="/Dropout")]
    nodes, inits, y = mlp()
    post = [helper.make_node("LogSoftmax", [y], ["logp"], name="/LogSoftmax", axis=1),
            helper.make_node("NegativeLogLikelihoodLoss", ["logp", "labels"], ["loss"], name="/nll",
                             reduction="mean")]
    put_model("reshape-nll.onnx", model(pre + nodes + post, [vin("image", [4, 2, 3]),
                                                              vin("labels", [4], TensorProto.INT64)],
                                        [vin("loss", [])], inits))
    nodes, inits, y = mlp()
    put_model("softmax-xent-loss.onnx", model(
        nodes + [helper.make_node("SoftmaxCrossEntropyLoss", [y, "labels"], ["loss"], name="/sce", reduction="mean")],
        [x, vin("labels", ["batch"], TensorProto.INT64)], [vin("loss", [])], inits))
    nodes, inits, y = mlp()
    put_model("softmax-output.onnx", model(nodes + [helper.make_node("Softmax", [y], ["p"], name="/Softmax")],
                                           [x], [vin("p", ["batch", 3])], inits))
    # Unsupported and malformed models: each stops at a different check.
    nodes, inits, y = mlp()
    conv = helper.make_node("Conv", ["input", "fc1.weight"], ["c"], name="/conv/Conv", kernel_shape=[1])
    put_model("unsupported-conv.onnx", model([conv] + nodes, [x], [vin(y, ["batch", 3])], inits))
    put_model("unsupported-softmax-between.onnx", model(
        nodes[:2] + [helper.make_node("Softmax", ["h1a"], ["s"], name="/mid/Softmax")] +
        [helper.make_node("Gemm", ["s", "fc2.weight", "fc2.bias"], ["h2"], name="/fc2/Gemm", transB=1)],
        [x], [vin("h2", ["batch", 3])], inits))
    put_model("custom-domain.onnx", model(
        nodes + [helper.make_node("Foo", [y], ["z"], name="/foo", domain="com.example")],
        [x], [vin("z", ["batch", 3])], inits, domains=["com.example"]))
    put_model("opset9.onnx", model(nodes, [x], [vin(y, ["batch", 3])], inits, opset=9))
    put_model("no-default-opset.onnx", model(nodes, [x], [vin(y, ["batch", 3])], inits, opset=0,
                                             domains=["com.example"]))
    put_model("symbolic-features.onnx", model(nodes, [vin("input", ["batch", "f"])], [vin(y, ["batch", 3])], inits))
    put_model("int-input.onnx", model(nodes, [vin("input", [1, 6], TensorProto.INT64)], [vin(y, [1, 3])], inits))
    put_model("no-output.onnx", model(nodes, [x], [], inits))
    bad = [numpy_helper.from_array(np.array([[np.nan] * 6] * 4, dtype=np.float32), "fc1.weight")] + inits[1:]
    put_model("nan-weight.onnx", model(nodes, [x], [vin(y, ["batch", 3])], bad))
    bad = [numpy_helper.from_array(np.ones((4, 6), dtype=np.int64), "fc1.weight")] + inits[1:]
    put_model("int64-weight.onnx", model(nodes, [x], [vin(y, ["batch", 3])], bad))
    m = model(nodes, [x], [vin(y, ["batch", 3])], inits)
    m.graph.initializer[0].data_location = TensorProto.EXTERNAL
    e = m.graph.initializer[0].external_data.add()
    e.key, e.value = "location", "weights.bin"
    put_model("external-data.onnx", m)
    m = model(nodes, [x], [vin(y, ["batch", 3])], inits)
    m.graph.initializer.append(m.graph.initializer[0])
    put_model("duplicate-initializer.onnx", m)
    m = model(nodes, [x], [vin(y, ["batch", 3])], inits)
    t = m.graph.initializer[0]
    t.float_data.extend(numpy_helper.to_array(t).flatten().tolist())
    t.ClearField("raw_data")
    put_model("float-data.onnx", m)
    m = model(nodes, [x], [vin(y, ["batch", 3])], inits)
    m.ClearField("graph")
    put_model("no-graph.onnx", m)
    put("fuzz_onnx", "empty.onnx", b"")
    put("fuzz_onnx", "truncated.onnx", model(nodes, [x], [vin(y, ["batch", 3])], inits).SerializeToString()[:150])


# --- checkpoints ---

def idx_pair(n, features, classes, seed):
    rng = np.random.default_rng(seed)
    x = rng.integers(0, 256, (n, features), dtype=np.uint8)
    y = (np.arange(n) % classes).astype(np.uint8)
    images = struct.pack(">BBBBII", 0, 0, 8, 2, n, features) + x.tobytes()
    labels = struct.pack(">BBBBI", 0, 0, 8, 1, n) + y.tobytes()
    return images, labels


def checkpoint_seeds(wafersim, tmp):
    """Checkpoints of 2-step runs with the settings fuzz_checkpoint resumes with."""
    seed_dir("fuzz_checkpoint")
    nodes, inits, y = mlp((16, 8, 4))
    small = os.path.join(tmp, "ckpt-model.onnx")
    onnx.save(model(nodes, [vin("input", ["batch", 16])], [vin(y, ["batch", 4])], inits), small)
    images, labels = idx_pair(16, 16, 4, 1)
    for name, data in [("x.idx", images), ("y.idx", labels)]:
        with open(os.path.join(tmp, name), "wb") as f:
            f.write(data)
    # Run in `tmp` with relative paths: the checkpoint records the options (wafersim.config).
    common = ["--data.source", "idx", "--data.train_x", "x.idx", "--data.train_y", "y.idx", "--train.eval", "false", "--train.steps", "2", "--train.batch", "4",
              "--fabric.width", "24", "--fabric.height", "24"]
    env = dict(os.environ, SYSTEMC_DISABLE_COPYRIGHT_MESSAGE="1")
    ckpts = {}
    for name, extra in [("layer-pipelined", []), ("weight-streaming", ["--mode", "weight-streaming"])]:
        out = os.path.join(tmp, "train-" + name)
        subprocess.run([wafersim, "train", "ckpt-model.onnx", "-o", "train-" + name] + common + extra, check=True,
                       env=env, cwd=tmp, stdout=subprocess.DEVNULL)
        ckpts[name] = open(os.path.join(out, "checkpoint.onnx"), "rb").read()
        put("fuzz_checkpoint", name + ".onnx", ckpts[name])
    base = onnx.load_from_string(ckpts["layer-pipelined"])

    def variant(name, edit):
        m = onnx.ModelProto()
        m.CopyFrom(base)
        edit(m)
        put("fuzz_checkpoint", name, m.SerializeToString())

    def set_meta(key, value):
        def edit(m):
            kept = [e for e in m.metadata_props if e.key != key]
            del m.metadata_props[:]
            m.metadata_props.extend(kept)
            if value is not None:
                e = m.metadata_props.add()
                e.key, e.value = key, value
        return edit

    variant("no-step.onnx", set_meta("wafersim.step", None))
    variant("step-not-a-number.onnx", set_meta("wafersim.step", "2x"))
    variant("seed-negative.onnx", set_meta("wafersim.seed", "-1"))
    variant("batch-differs.onnx", set_meta("wafersim.batch", "8"))
    variant("lr-nan.onnx", set_meta("wafersim.lr", "nan"))
    variant("momentum-one.onnx", set_meta("wafersim.momentum", "1.0"))
    variant("config-changed.onnx", set_meta("wafersim.config", "fabric.width = 32\ntrain.lr = 0.5\nbad line\n"))
    variant("losses-damaged.onnx", set_meta("wafersim.losses", "step,mean_loss\n1,2.3\n"))
    variant("losses-end-elsewhere.onnx", set_meta("wafersim.losses", "step,mean_loss,cycles\n1,2.3,400\n7,2.2,800\n"))
    variant("losses-no-comma.onnx", set_meta("wafersim.losses", "step,mean_loss,cycles\n2\n"))

    def drop_momentum(m):
        kept = [t for t in m.graph.initializer if t.name != "fc2.bias.momentum"]
        del m.graph.initializer[:]
        m.graph.initializer.extend(kept)
    variant("momentum-missing.onnx", drop_momentum)

    def short_momentum(m):
        for t in m.graph.initializer:
            if t.name == "fc1.weight.momentum":
                t.dims[0] = 4
                t.raw_data = t.raw_data[:16]
    variant("momentum-short.onnx", short_momentum)
    put("fuzz_checkpoint", "plain-model.onnx", open(small, "rb").read())


# --- assembly and fabric programs ---

KERNELS = [
    ("gemv", ["--kernel.w", "2", "--kernel.h", "2", "--kernel.m", "8", "--kernel.n", "8"]),
    ("gemvtree", ["gemv", "--kernel.w", "3", "--kernel.h", "1", "--kernel.m", "4", "--kernel.n", "6", "--kernel.format",
                  "fp16", "--kernel.acc", "fp16", "--kernel.algo", "tree"]),
    ("reduce", ["--kernel.w", "3", "--kernel.h", "2", "--kernel.len", "4"]),
    ("allreduce", ["--kernel.w", "2", "--kernel.h", "2", "--kernel.len", "2", "--kernel.algo", "tree"]),
    ("broadcast", ["--kernel.w", "1", "--kernel.h", "3", "--kernel.len", "4", "--kernel.columns", "true",
                   "--kernel.format", "bf16"]),
    ("elementwise", ["--kernel.w", "2", "--kernel.h", "1", "--kernel.len", "4", "--kernel.op", "exp",
                     "--kernel.format", "cb16"]),
    ("pingpong", ["--kernel.distance", "2", "--kernel.rounds", "2"]),
]

# The two hand-written images of the program directory (as in testbench/unit/program_test.cc).
SEND = """.outq 0, 2
.task 0, main, active
.space buf, fp32, 4
.data n, i16, 1, 2, 3
.data h, fp16, 0.5, -2
main:
    dfout d0, 2, 4
    dmem d1, buf, 4, 1
    vmov.fp32 d0, d1
    halt
"""
RECV = """.inq 0, 2
.task 0, main, active
.space buf, fp32, 4
.data c, cb16, 1.5
main:
    dfin d0, 2, 4
    dmem d1, buf, 4, 1
    vmov.fp32 d1, d0
    halt
"""

ASM = {
    "every-directive.s": """; every directive and operand form
.equ N, 4
.equ BIG, 0xffffffff
.inq 3, 5
.outq 5, 7
.task 0, main, active
.task 1, on_data, color=5
.task 2, @4, blocked
.align 16
.data tab, i32, tab, N, -1, BIG
.data h16, i16, -32768, 65535
.space v, fp32, N
.data f, fp32, 1.5, -0.0, inf, nan, -1e-3, +2, 0x7f800000
.data b, bf16, 1.0, 3.0e38
.data c, cb16, 0.25
.org 0x800
.space w, fp16, 8
main:
    li r1, N+2
    lif r2, -0.5
    addi r3, r1, -7
    ld32 r4, [r1+tab]
    st16 [r2-4], r4
    beq r1, r2, main
    jmp @0
on_data: exit
    dmem d0, v, N, 1
    dmem d43, w+2, 8, -2048
    dfin d1, 5, 4
    dfout d2, 7, 1
    dlen d0, r1
    daddb d0, -4
    vfmac.fp16.fp32 d0, d1, d2, d3, async=7, done=activate:2
    vaxpy.bf16.fp32 d0, d1, r2
    vcvt.fp32.cb16 d0, d1 // to cb16
    vsum.fp32 r5, d0
    vsel.fp32 d0, d1, d2, d3, async=0, done=unblock:1
    filt 5, r1, r2
    fcnt 5, r3
    halt
""",
    "labels-and-loops.s": """.task 0, start, active
start:
a: b:   nop
loop:   addi r1, r1, 1
        blt r1, r2, loop
        activate 0
        block 0
        unblock 0
        halt
""",
    "error-unknown-mnemonic.s": ".task 0, main, active\nmain:\n    vadx.fp32 d0, d1, d2\n",
    "error-too-big.s": ".task 0, main, active\n.space big, fp32, 20000\nmain: halt\n",
    "error-no-task.s": "main: halt\n",
    "error-data-task-no-queue.s": ".task 0, main, color=3\nmain: halt\n",
    "error-operands.s": ".task 0, m, active\nm: add r1, r2\n    li r1, 0x1ffffffff\n    dmem d44, 0, 1, 1\n",
}


def kernel_seeds(wafersim, tmp):
    """Kernel programs from `wafersim kernel`, merged into one program directory whose images
    carry the kernel's name and whose data.bin concatenates theirs; one program.json seed each."""
    pdir = os.path.join(HERE, "program")
    shutil.rmtree(pdir, ignore_errors=True)
    os.makedirs(os.path.join(pdir, "images"))
    seed_dir("fuzz_program")
    seed_dir("fuzz_asm")
    blob = bytearray()
    env = dict(os.environ, SYSTEMC_DISABLE_COPYRIGHT_MESSAGE="1")
    for tag, args in KERNELS:
        kernel = tag if args[0].startswith("--") else args[0]
        args = args if args[0].startswith("--") else args[1:]
        out = os.path.join(tmp, "kernel-" + tag)
        subprocess.run([wafersim, "kernel", kernel, "-o", out] + args, check=True, env=env, stdout=subprocess.DEVNULL)
        prog = json.load(open(os.path.join(out, "program.json")))
        rename = {}
        for im in prog["images"]:
            new = f"{tag}_{im['name']}"
            src = open(os.path.join(out, im["source"])).read()
            rename[im["name"]] = new
            im["name"], im["source"] = new, f"images/{new}.s"
            with open(os.path.join(pdir, im["source"]), "w") as f:
                f.write(src)
            put("fuzz_asm", f"{new}.s", src)
        for p in prog.get("placements", []):  # format 1; format 2's placement_rows name images by index
            p["image"] = rename[p["image"]]
        data = open(os.path.join(out, "data.bin"), "rb").read()
        for d in prog.get("data", []):
            if d.get("file") == "data.bin":
                d["file_offset"] += len(blob)
        for d in prog.get("data_rows", []):  # [x, y, symbol, offset, bytes, file_offset]; -1: zeros
            if d[5] >= 0:
                d[5] += len(blob)
        blob += data
        put("fuzz_program", f"kernel-{tag}.json", json.dumps(prog, indent=1) + "\n")
    for name, src in [("send", SEND), ("recv", RECV)]:
        with open(os.path.join(pdir, "images", name + ".s"), "w") as f:
            f.write(src)
        put("fuzz_asm", name + ".s", src)
    with open(os.path.join(pdir, "data.bin"), "wb") as f:
        f.write(bytes(blob))
    for name, src in ASM.items():
        put("fuzz_asm", name, src)
    put("fuzz_asm", "empty.s", "")
    program_seeds(len(blob))


def wsimg_halt():
    """A binary image (firmware/image.cc's layout): one halt instruction, task 0 active at it."""
    ops = re.findall(r'^\s*\{"([a-z0-9]+)", "', open(os.path.join(ROOT, "firmware/isa.cc")).read(), re.M)
    halt = ops.index("halt")

    def s(t):
        return struct.pack("<I", len(t)) + t.encode()
    img = b"WSIMG1\n\0" + struct.pack("<II", 1, 1) + struct.pack("<Q", halt)
    img += struct.pack("<I", 1) + struct.pack("<II", 8, 8) + bytes(range(8))  # a data block after the code
    img += bytes([0xff] * 8) + bytes([0xff] * 6)
    img += struct.pack("<I", 1) + struct.pack("<BIiB", 0, 0, -1, 1) + s("main")
    img += struct.pack("<I", 2) + s("main") + struct.pack("<IBBII", 0, 1, 0, 4, 0)
    img += s("d") + struct.pack("<IBBII", 8, 0, 0, 4, 2)
    return img


def program_seeds(blob_len):
    def prog(**kw):
        p = {"format": "wafersim-program/1", "name": "seed"}
        p.update(kw)
        return json.dumps(p, indent=1)

    two_pe = prog(fabric={"min_width": 3, "min_height": 1},
                  images=[{"name": "send", "source": "images/send.s"}, {"name": "recv", "binary": "images/recv.wsimg"}],
                  placements=[{"at": [0, 0], "image": "send"}, {"at": [2, 0], "image": "recv"}],
                  routes=[{"at": [0, 0], "color": 2, "rx": "R", "tx": "E"},
                          {"at": [1, 0], "color": 2, "positions": [{"rx": "W", "tx": "E"}, {"rx": "W", "tx": "E"}]},
                          {"at": [2, 0], "color": 2, "rx": "W", "tx": "R"}],
                  data=[{"at": [0, 0], "symbol": "buf", "values": [1, -2.5, 3e38, 0]},
                        {"at": [0, 0], "symbol": "n", "offset": 2, "values": [-7, 65535]},
                        {"at": [2, 0], "symbol": "c", "values": [0.75]},
                        {"at": [2, 0], "address": 512, "file": "data.bin", "file_offset": blob_len - 8, "bytes": 8},
                        {"at": [0, 0], "symbol": "h", "file": "data.bin", "file_offset": 2, "bytes": 4}],
                  outputs=[{"name": "got", "at": [2, 0], "symbol": "buf"},
                           {"name": "n", "at": [0, 0], "symbol": "n", "offset": 1, "count": 2}])
    put("fuzz_program", "two-pe.json", two_pe)
    put("fuzz_program", "binary-image.json",
        prog(images=[{"name": "b", "binary": "images/fuzz.wsimg"}], placements=[{"at": [1, 1], "image": "b"}],
             outputs=[{"name": "d", "at": [1, 1], "symbol": "d"}]).encode() + b"\0" + wsimg_halt())
    put("fuzz_program", "binary-image-truncated.json",
        prog(images=[{"name": "b", "binary": "images/fuzz.wsimg"}]).encode() + b"\0" + wsimg_halt()[:30])
    put("fuzz_program", "error-route-off-fabric.json",
        prog(images=[{"name": "s", "source": "images/send.s"}], placements=[{"at": [0, 0], "image": "s"}],
             routes=[{"at": [0, 0], "color": 2, "rx": "R", "tx": "N"}]))
    put("fuzz_program", "error-overlap.json",
        prog(images=[{"name": "s", "source": "images/send.s"}, {"name": "r", "source": "images/recv.s"}],
             placements=[{"at": [0, 0], "image": "s"}, {"at": [0, 0], "image": "r"}]))
    put("fuzz_program", "error-data-past-end.json",
        prog(images=[{"name": "s", "source": "images/send.s"}], placements=[{"at": [0, 0], "image": "s"}],
             data=[{"at": [0, 0], "symbol": "buf", "file": "data.bin", "file_offset": blob_len, "bytes": 4}]))
    put("fuzz_program", "error-missing-source.json",
        prog(images=[{"name": "s", "source": "images/none.s"}]))
    put("fuzz_program", "error-unknown-key.json", prog(extra=1))
    put("fuzz_program", "error-not-json.json", '{"format": "wafersim-program/1", ')
    put("fuzz_program", "large-bounding-box.json",
        prog(fabric={"min_width": 4096, "min_height": 2}, images=[{"name": "s", "source": "images/send.s"}],
             placements=[{"at": [4095, 1], "image": "s"}]))


# --- INI, routes, datasets ---

INI = {
    "fabric.ini": "# wafersim fabric\n[fabric]\nwidth = 16\nheight = 8\nclock_mhz = 1100\n[router]\ncolors = 8\n"
                  "buffer_depth = 4\n[traffic]\npattern = neighbour\nrate = 0.5\nhops = 2\nregion = 0:7,0:3\n"
                  "[sim]\ncycles = 100\nvisit_order = shuffle\n[stats]\nout = results\nwarmup = 10\n",
    "train.ini": "[train]\nbatch = 8\nlr = 0.05\nmomentum = 0.5\nsteps = 10\n[data]\nsource = npy\n"
                 "train_x = x.npy\ntrain_y = y.npy\nscale = 0.00392156863\n[compile]\nmax_pes = 100\n"
                 "ring_depth = 2\n[core]\nsram_kb = 64\ninq_depths = 4,4,4,4,4,4,4,4\ncb16_bias = 20\n",
    "ws.ini": "[ws]\ncolumns = 2\nrows = 3\n[memoryx]\noptimizer = adam\nbeta1 = 0.8\n[swarmx]\nfanout = 4\n"
              "[input]\nworkers = 2\n[io]\nspacing = 4\nchannel_gbps = 50\n",
    "kernel.ini": "[kernel]\nw = 2\nh = 3\nm = 16\nn = 16\nformat = fp16\nacc = fp16\nalgo = tree\n[sim]\nseed = 7\n",
    "run.ini": "[core]\nlazy = false\nvector_bits = 128\nfmac_fp32 = 4\n[trace]\nregion = 0:0,0:0\n"
               "vcd = trace/out.vcd\n[sim]\nthreads = 2\nwatchdog_cycles = 1000\n",
    "every-section.ini": "[fabric]\nwidth=4\nheight=4\n[router]\nexpress=false\nvector=false\n[io]\n"
                         "channels_per_edge=1\nqueue_depth=8\n[sim]\nseed=18446744073709551615\n[stats]\n"
                         "interval=50\n[traffic]\ncount=3\ndrain_prob=0.25\nstall_prob=0.5\nflows=2\n"
                         "hotspot_channel=0\n",
    "error-unknown-key.ini": "[fabric]\nwidth = 4\nbogus = 1\n",
    "error-no-equals.ini": "[fabric]\nwidth 4\n",
    "error-negative.ini": "[sim]\ncycles = -5\n",
    "error-nan.ini": "[fabric]\nclock_mhz = nan\n",
    "error-region.ini": "[fabric]\nwidth = 4\n[traffic]\nregion = 0:9,0:1\n",
    "empty.ini": "",
}

ROUTES = {
    "line.routes": "# a flow along a row\nroute 0 0 0 R E\nroute 1 0 0 W E\nroute 2 0 0 W R\nflow 0 0 0\n",
    "multicast.routes": "route 0 0 1 R E+S\nroute 1 0 1 W R\nroute 0 1 1 N R\nflow 0 0 1 0.5 10 2\n",
    "positions.routes": "route 3 3 5 R E W R\nroute 4 3 5 W R\nroute 2 3 5 E R\nflow 3 3 5 1 0 4\n",
    "channel.routes": "route 7 2 2 R E\nroute 0 4 3 R W\nflow 7 2 2 0.25 100\nflow 0 4 3\n",
    "merge.routes": "route 0 2 4 R+W E\nroute 1 2 4 W+R E\nroute 2 2 4 W R\nflow 0 2 4\nflow 1 2 4 1.0\n",
    "four-positions.routes": "route 5 5 3 R N R S R E R W\nroute 5 4 3 S R\nroute 5 6 3 N R\nroute 6 5 3 W R\n"
                             "route 4 5 3 E R\nflow 5 5 3\n",
    "error-off-fabric.routes": "route 0 0 0 R N\nflow 0 0 0\n",
    "error-outside.routes": "route 9 0 0 R E\nflow 9 0 0\n",
    "error-bad-port.routes": "route 0 0 0 R X\nflow 0 0 0\n",
    "error-no-flow.routes": "route 0 0 0 R E\n",
    "error-rate.routes": "flow 0 0 0 1.5\n",
    "error-count.routes": "flow 0 0 0 1 -1\n",
    "error-five-positions.routes": "route 0 0 0 R E R E R E R E R E\nflow 0 0 0\n",
    "empty.routes": "",
}


def npy(arr, version=(1, 0), header=None):
    d = arr.dtype.str if arr.dtype.itemsize > 1 else "|" + arr.dtype.str[1:]
    h = header or "{'descr': '%s', 'fortran_order': False, 'shape': %s, }" % (d, str(tuple(arr.shape)))
    h = h.encode()
    pre = 10 if version[0] == 1 else 12
    h += b" " * ((64 - (pre + len(h) + 1) % 64) % 64) + b"\n"
    size = struct.pack("<H", len(h)) if version[0] == 1 else struct.pack("<I", len(h))
    return b"\x93NUMPY" + bytes(version) + size + h + arr.tobytes()


def data_seeds():
    seed_dir("fuzz_idx")
    images, labels = idx_pair(5, 12, 3, 2)
    put("fuzz_idx", "uint8.bin", two(images, labels))
    put("fuzz_idx", "gzip.bin", two(gz(images), gz(labels)))
    put("fuzz_idx", "gzip-labels-only.bin", two(images, gz(labels)))
    f = np.arange(6, dtype=">f4") / 4
    put("fuzz_idx", "float32-3d.bin", two(struct.pack(">BBBBIII", 0, 0, 0x0D, 3, 2, 1, 3) + f.tobytes(),
                                          struct.pack(">BBBBI", 0, 0, 0x0C, 1, 2) + np.array([1, 0], ">i4").tobytes()))
    put("fuzz_idx", "float64-int16.bin", two(struct.pack(">BBBBII", 0, 0, 0x0E, 2, 1, 2) + np.array([0.5, -1], ">f8").tobytes(),
                                             struct.pack(">BBBBI", 0, 0, 0x0B, 1, 1) + np.array([7], ">i2").tobytes()))
    put("fuzz_idx", "int8.bin", two(struct.pack(">BBBBII", 0, 0, 0x09, 2, 2, 1) + bytes([0x80, 0x7f]),
                                    struct.pack(">BBBBI", 0, 0, 0x09, 1, 2) + bytes([0, 1])))
    put("fuzz_idx", "error-count-mismatch.bin", two(images, struct.pack(">BBBBI", 0, 0, 8, 1, 4) + bytes(4)))
    put("fuzz_idx", "error-truncated.bin", two(images[:-3], labels))
    put("fuzz_idx", "error-trailing.bin", two(images + b"x", labels))
    put("fuzz_idx", "error-negative-label.bin", two(struct.pack(">BBBBII", 0, 0, 8, 2, 1, 1) + b"\1",
                                                    struct.pack(">BBBBI", 0, 0, 0x09, 1, 1) + b"\xff"))
    put("fuzz_idx", "error-float-labels.bin", two(images, struct.pack(">BBBBI", 0, 0, 0x0D, 1, 5) + bytes(20)))
    put("fuzz_idx", "error-huge-dims.bin", two(struct.pack(">BBBBIII", 0, 0, 8, 3, 0xffffffff, 0xffffffff, 0xffffffff),
                                               labels))
    put("fuzz_idx", "error-gzip-truncated.bin", two(gz(images)[:-10], labels))
    put("fuzz_idx", "empty.bin", b"")

    seed_dir("fuzz_npy")
    rng = np.random.default_rng(3)
    xs = {"u1": rng.integers(0, 256, (4, 3), dtype=np.uint8), "f4": rng.random((4, 2, 2)).astype("<f4"),
          "f8": rng.random((4, 1)).astype("<f8")}
    ys = {"u1": np.array([0, 1, 2, 1], np.uint8), "i4": np.array([3, 0, 1, 2], "<i4"), "i8": np.array([0, 0, 1, 5], "<i8")}
    for (xn, x), (yn, y) in zip(xs.items(), ys.items()):
        put("fuzz_npy", f"{xn}-{yn}.bin", two(npy(x), npy(y)))
    put("fuzz_npy", "v2-gzip.bin", two(gz(npy(xs["f4"], (2, 0))), npy(ys["i8"], (3, 0))))
    put("fuzz_npy", "python2-long.bin", two(npy(xs["u1"], header="{'descr': '|u1', 'fortran_order': False, 'shape': (4L, 3L)}"),
                                            npy(ys["u1"], header='{"descr": "|u1", "fortran_order": False, "shape": (4,)}')))
    put("fuzz_npy", "error-fortran.bin", two(npy(xs["u1"], header="{'descr': '|u1', 'fortran_order': True, 'shape': (4, 3), }"),
                                             npy(ys["u1"])))
    put("fuzz_npy", "error-big-endian.bin", two(npy(xs["f4"].astype(">f4")), npy(ys["u1"])))
    put("fuzz_npy", "error-structured.bin", two(npy(xs["u1"], header="{'descr': [('a', '<i4')], 'fortran_order': False, 'shape': (4, 3), }"),
                                                npy(ys["u1"])))
    put("fuzz_npy", "error-label-shape.bin", two(npy(xs["u1"]), npy(ys["u1"].reshape(2, 2))))
    put("fuzz_npy", "error-negative-label.bin", two(npy(xs["u1"]), npy(np.array([0, -1, 0, 0], "<i8"))))
    put("fuzz_npy", "error-huge-shape.bin", two(npy(xs["u1"], header="{'descr': '|u1', 'fortran_order': False, 'shape': (99999999999999999999, 3), }"),
                                                npy(ys["u1"])))
    put("fuzz_npy", "error-truncated.bin", two(npy(xs["f8"])[:-5], npy(ys["u1"])))
    put("fuzz_npy", "error-version.bin", two(b"\x93NUMPY\x04\x00" + bytes(8), npy(ys["u1"])))
    put("fuzz_npy", "empty.bin", b"")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--wafersim", default=os.path.join(ROOT, "build/wafersim"))
    a = ap.parse_args()
    wafersim = os.path.abspath(a.wafersim)
    with tempfile.TemporaryDirectory() as tmp:
        onnx_seeds(wafersim, tmp)
        checkpoint_seeds(wafersim, tmp)
        kernel_seeds(wafersim, tmp)
    seed_dir("fuzz_ini")
    for name, text in INI.items():
        put("fuzz_ini", name, text)
    seed_dir("fuzz_routes")
    for name, text in ROUTES.items():
        put("fuzz_routes", name, text)
    data_seeds()
    total = 0
    for t in sorted(os.listdir(CORPUS)):
        files = os.listdir(os.path.join(CORPUS, t))
        size = sum(os.path.getsize(os.path.join(CORPUS, t, f)) for f in files)
        total += size
        print(f"{t}: {len(files)} files, {size} bytes")
    print(f"total {total} bytes")


if __name__ == "__main__":
    main()
