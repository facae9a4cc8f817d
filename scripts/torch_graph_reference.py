#!/usr/bin/python3
"""Trains a model of scripts/export_graph_models.py with PyTorch (SGD with momentum, softmax
cross-entropy with mean reduction) for a few minibatches of seeded random data, and writes the
exported ONNX model beside a JSON file of the data, the per-sample losses of every step and the
parameters after the last step, under their ONNX initializers' names and layouts (a Linear on
more than two dimensions exports its weight transposed, as 'onnx::MatMul_N'). With --optimizer adam,
torch.optim.Adam with its defaults (betas 0.9 and 0.999, eps 1e-8). The graph compiler's host
reference is held to these (testbench/system/graph_reference_test.cc).

    /usr/bin/python3 scripts/torch_graph_reference.py --model residual --opset 13 --out DIR
        [--steps 3] [--batch 4] [--lr 0.05] [--momentum 0.9] [--optimizer sgd|adam] [--loss softmax_xent|mse]

Writes DIR/MODEL_opOPSET.onnx and DIR/MODEL_opOPSET_OPTIMIZER_LOSS.json."""
import argparse
import json
import os
import subprocess
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import export_graph_models as egm  # noqa: E402


def initializer_names(model, path):
    """Each parameter's ONNX initializer (or the Identity of one, which the compiler's IR makes a
    parameter of its own): its own name, or (a Linear on more than two dimensions
    exports its weight transposed, as 'onnx::MatMul_N') the initializer of the same values,
    transposed or not. Returns {parameter: (initializer, transposed)}."""
    import onnx
    from onnx import numpy_helper
    graph = onnx.load(path).graph
    inits = {i.name: numpy_helper.to_array(i) for i in graph.initializer}
    for node in graph.node:  # torch shares initializers equal at export through Identity nodes
        if node.op_type == "Identity" and node.input[0] in inits:
            inits[node.output[0]] = inits[node.input[0]]
    out, taken = {}, set()
    for n, p in model.named_parameters():
        if n in inits:
            out[n] = (n, False)
            taken.add(n)
    for n, p in model.named_parameters():
        if n in out:
            continue
        v = p.detach().numpy()
        for name, arr in inits.items():
            if name in taken:
                continue
            if arr.shape == v.shape and (arr == v).all():
                out[n] = (name, False)
            elif v.ndim == 2 and arr.shape == v.T.shape and (arr == v.T).all():
                out[n] = (name, True)
            else:
                continue
            taken.add(name)
            break
        if n not in out:
            sys.exit(f"{path}: no initializer holds parameter {n}")
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True, choices=sorted(egm.MODELS))
    ap.add_argument("--opset", type=int, default=13)
    ap.add_argument("--out", required=True)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--momentum", type=float, default=0.9)
    ap.add_argument("--optimizer", choices=["sgd", "adam"], default="sgd", help="torch.optim.SGD (momentum) or torch.optim.Adam (defaults)")
    ap.add_argument("--loss", choices=["softmax_xent", "mse"], default="softmax_xent",
                    help="cross-entropy against random labels, or mean squared error against random targets")
    a = ap.parse_args()
    subprocess.run([sys.executable, os.path.join(HERE, "export_graph_models.py"), "--out", a.out, "--models", a.model,
                    "--opsets", str(a.opset)], check=True, stdout=subprocess.DEVNULL)
    cls, shape = egm.MODELS[a.model]
    torch.manual_seed(7)  # the exported model's weights (export_graph_models.py)
    model = cls()
    onnx_names = initializer_names(model, os.path.join(a.out, f"{a.model}_op{a.opset}.onnx"))
    model.train()
    if a.optimizer == "adam":
        opt = torch.optim.Adam(model.parameters(), lr=a.lr)
    else:
        opt = torch.optim.SGD(model.parameters(), lr=a.lr, momentum=a.momentum)
    g = torch.Generator().manual_seed(11)
    sample = shape[1:]
    steps = []
    for _ in range(a.steps):
        if hasattr(cls, "VOCAB"):  # token ids
            x = torch.randint(0, cls.VOCAB, (a.batch,) + tuple(sample), generator=g)
        else:
            x = torch.randn((a.batch,) + tuple(sample), generator=g)
        with torch.no_grad():
            out_shape = model(x[:1]).shape
        classes = out_shape[-1]
        opt.zero_grad()
        logits = model(x)
        if a.loss == "mse":
            labels = torch.randn((a.batch, classes), generator=g)
            per = torch.nn.functional.mse_loss(logits, labels, reduction="none").mean(dim=1)
        else:
            # Per row of classes: a sample's, or each token's ([N, S, vocabulary] logits).
            labels = torch.randint(0, classes, (a.batch,) + tuple(out_shape[1:-1]), generator=g)
            per = torch.nn.functional.cross_entropy(logits.reshape(-1, classes), labels.reshape(-1), reduction="none")
        per.mean().backward()  # = mse_loss(reduction="mean") over every element
        opt.step()
        steps.append({"x": x.flatten().tolist(), "labels": labels.flatten().tolist(), "losses": per.detach().tolist()})
    params = {}
    for n, p in model.named_parameters():
        name, transposed = onnx_names[n]
        params[name] = (p.detach().t() if transposed else p.detach()).flatten().tolist()
    out = os.path.join(a.out, f"{a.model}_op{a.opset}_{a.optimizer}_{a.loss}.json")
    with open(out + ".tmp", "w") as f:
        json.dump({"lr": a.lr, "momentum": a.momentum, "optimizer": a.optimizer, "batch": a.batch, "steps": steps,
                   "params": params}, f)
    os.replace(out + ".tmp", out)


if __name__ == "__main__":
    main()
