#!/usr/bin/python3
"""ctest `graph_import`: models beyond a chain of dense layers, exported by torch.onnx.export
(scripts/export_graph_models.py: residual MLP, LayerNorm + GELU, GELU's tanh form, LeakyReLU, a
small CNN, a CNN with LeakyReLU and AveragePool, an MLP of SiLU, Mish, HardSwish, Softsign and
Elu, a TransformerEncoderLayer, a model of the other op classes, a GPT-style block on token
ids; opsets 11, 13, 14,
17), import into the compiler's graph IR and pass its checks (`graph IR: ... checked`); the
rewrite passes (compiler/passes/) give each model the same graph at every opset, the one expected
below (`graph IR after passes: ...`: the shape arithmetic folded, every shape known, LayerNorm,
GELU, dense and conv layers fused); autodiff gives every model a training graph (`training
graph: ...`); today's kernels train every model but the encoder, the mixer and the GPT block
(exit 0) and refuse those with one message grouped by op type (exit 2): a line per op type rather
than one per node.

    /usr/bin/python3 scripts/test_graph_import.py --wafersim build/wafersim --workdir DIR"""
import argparse
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))

# The op counts of each model after the passes, at every opset.
AFTER_PASSES = {
    "residual": "3 Dense, 1 Add",
    "norm_gelu": "2 Dense, 1 Gelu, 1 LayerNorm",
    "gelu_tanh": "2 Dense",
    "leaky": "2 Dense",
    "cnn": "2 Conv2d, 1 Dense, 1 Flatten, 1 GlobalAveragePool, 1 MaxPool",
    "cnn_leaky_avg": "1 AveragePool, 1 Conv2d, 1 Dense, 1 Flatten",
    "activations": "6 Dense",
    "encoder": "6 Transpose, 5 Dense, 5 Reshape, 3 Slice, 2 Add, 2 LayerNorm, 2 MatMul, 1 Div, 1 Gather, 1 Softmax",
    "mixer": "3 Dense, 2 Mul, 2 Slice, 1 Add, 1 Concat, 1 Div, 1 Exp, 1 Flatten, 1 MatMul, 1 Neg, 1 Pow, 1 ReduceMax, "
             "1 ReduceMean, 1 ReduceSum, 1 Softmax, 1 Split, 1 Sqrt, 1 Sub, 1 Transpose",
    "gpt": "5 Dense, 4 Add, 4 Reshape, 4 Transpose, 3 LayerNorm, 2 MatMul, 1 Div, 1 Gather, 1 Softmax, 1 Split",
    "gpt_masked": "5 Dense, 4 Reshape, 4 Transpose, 3 Add, 3 LayerNorm, 2 MatMul, 1 Div, 1 Gather, 1 Softmax, 1 Split, 1 Where",
}
# The models today's kernels train on the wafer (exit 0; the others are refused, exit 2).
SUPPORTED = {"leaky", "residual", "gelu_tanh", "norm_gelu", "cnn", "cnn_leaky_avg", "activations"}
# What autodiff says of each (`training graph: ...`): a training graph, or the ops it has no
# gradient rule for yet.
TRAINING = {
    "residual": "ops", "norm_gelu": "ops", "gelu_tanh": "ops", "leaky": "ops",
    "cnn": "ops", "cnn_leaky_avg": "ops", "activations": "ops", "encoder": "ops", "mixer": "ops", "gpt": "ops", "gpt_masked": "ops",
}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--wafersim", required=True)
    ap.add_argument("--workdir", required=True)
    a = ap.parse_args()
    os.makedirs(a.workdir, exist_ok=True)
    paths = subprocess.run([sys.executable, os.path.join(HERE, "export_graph_models.py"), "--out", a.workdir],
                           check=True, capture_output=True, text=True).stdout.split()
    assert len(paths) == 4 * len(AFTER_PASSES), paths
    failures = []
    for path in paths:
        r = subprocess.run([a.wafersim, "compile", path, "--validate-only"], capture_output=True, text=True)
        name = os.path.basename(path)
        ir = re.search(r"^graph IR: (\d+) ops? \(.*\), (\d+) tensors .*; checked$", r.stdout, re.M)
        if not ir:
            failures.append(f"{name}: no checked graph IR line\n{r.stdout}{r.stderr}")
            continue
        after = re.search(r"^graph IR after passes: (\d+) ops? \((.*?)\), (\d+) tensors [^;]*?( \(.*\))?; checked$", r.stdout, re.M)
        model = name.rsplit("_op", 1)[0]
        if not after:
            failures.append(f"{name}: no checked graph IR line after the passes\n{r.stdout}")
            continue
        if after.group(2) != AFTER_PASSES[model]:
            failures.append(f"{name}: after the passes {after.group(2)}, expected {AFTER_PASSES[model]}")
        if "known only after constant folding" in after.group(0):
            failures.append(f"{name}: shapes still unknown after the passes: {after.group(0)}")
        training = re.search(r"^training graph: (.*)$", r.stdout, re.M)
        want = TRAINING[model]
        if not training or (want == "ops" and not re.match(r"\d+ ops \(.*SgdMomentum", training.group(1))) or \
                (want != "ops" and want not in training.group(1)):
            failures.append(f"{name}: training graph line {training.group(0) if training else None}, expected {want}")
        if model in SUPPORTED:
            if r.returncode != 0 or "every node is supported" not in r.stdout:
                failures.append(f"{name}: exit {r.returncode}, expected 0 (supported)\n{r.stdout}{r.stderr}")
            else:
                print(f"{name}: IR {ir.group(1)} ops, {ir.group(2)} tensors; after the passes {after.group(1)} ops; supported")
            continue
        if r.returncode != 2:
            failures.append(f"{name}: exit {r.returncode}, expected 2 (unsupported)\n{r.stderr}")
            continue
        head = re.search(r"error: (\d+) unsupported nodes? of (\d+) op types?:", r.stderr)
        if not head:
            failures.append(f"{name}: no grouped message\n{r.stderr}")
            continue
        nodes, kinds = int(head.group(1)), int(head.group(2))
        lines = r.stderr.strip().count("\n") + 1
        # One line per op type, at most three names per reason on it: never one per node.
        if lines != 1 + kinds:
            failures.append(f"{name}: {kinds} op types take {lines} lines\n{r.stderr}")
        for line in r.stderr.splitlines()[1:]:
            for reason in line.split("; "):
                if reason.count("node '") > 3:
                    failures.append(f"{name}: more than three names for one reason: {reason}")
        groups = re.findall(r"^  (\w+) \((\d+) nodes?\): ", r.stderr, re.M)
        if len(groups) != kinds or sum(int(n) for _, n in groups) != nodes:
            failures.append(f"{name}: groups {groups} do not add up to {nodes} nodes of {kinds} op types\n{r.stderr}")
        print(f"{name}: IR {ir.group(1)} ops, {ir.group(2)} tensors; after the passes {after.group(1)} ops; "
              f"{nodes} unsupported nodes of {kinds} op types in {lines} lines")
    if failures:
        print("\n".join(failures))
        sys.exit(1)
    print("graph_import: every export imports into the IR, passes its checks and rewrites to its expected graph")


if __name__ == "__main__":
    main()
