#!/usr/bin/python3
"""ctest `graph_import`: models beyond a chain of dense layers, exported by torch.onnx.export
(scripts/export_graph_models.py: residual MLP, LayerNorm + GELU, LeakyReLU, a small CNN, a
TransformerEncoderLayer; opsets 11, 13, 14, 17), import into the compiler's graph IR and pass its
checks (`graph IR: ... checked`), and today's kernels refuse them with one message grouped by op
type (exit 2): a line per op type rather than one per node.

    /usr/bin/python3 scripts/test_graph_import.py --wafersim build/wafersim --workdir DIR"""
import argparse
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--wafersim", required=True)
    ap.add_argument("--workdir", required=True)
    a = ap.parse_args()
    os.makedirs(a.workdir, exist_ok=True)
    paths = subprocess.run([sys.executable, os.path.join(HERE, "export_graph_models.py"), "--out", a.workdir],
                           check=True, capture_output=True, text=True).stdout.split()
    assert len(paths) == 20, paths
    failures = []
    for path in paths:
        r = subprocess.run([a.wafersim, "compile", path, "--validate-only"], capture_output=True, text=True)
        name = os.path.basename(path)
        ir = re.search(r"^graph IR: (\d+) ops? \(.*\), (\d+) tensors .*; checked$", r.stdout, re.M)
        if not ir:
            failures.append(f"{name}: no checked graph IR line\n{r.stdout}{r.stderr}")
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
        print(f"{name}: IR {ir.group(1)} ops, {ir.group(2)} tensors; {nodes} unsupported nodes of {kinds} op types in {lines} lines")
    if failures:
        print("\n".join(failures))
        sys.exit(1)
    print("graph_import: every export imports into the IR and passes its checks")


if __name__ == "__main__":
    main()
