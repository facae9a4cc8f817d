#!/usr/bin/python3
"""Exports models beyond a chain of dense layers with torch.onnx.export (Debian's python3-torch):
a residual MLP, an MLP with LayerNorm and GELU, one with GELU's tanh form, a LeakyReLU MLP, a small CNN, one with LeakyReLU and AveragePool, a
TransformerEncoderLayer, a model of the remaining op classes (Mixer) and a GPT-style decoder block on token ids, each at the opsets given. The graph compiler's tests import them into
the IR (docs/graph-compiler.md); today's kernels refuse them with the grouped message.

    /usr/bin/python3 scripts/export_graph_models.py --out DIR [--opsets 11,13,14,17]

Writes DIR/<name>_op<opset>.onnx and prints one path per line. Deterministic (seeded)."""
import argparse
import math
import os
import sys

import torch
from torch import nn


class Residual(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(16, 32)
        self.fc2 = nn.Linear(32, 32)
        self.fc3 = nn.Linear(32, 4)

    def forward(self, x):
        h = torch.relu(self.fc1(x))
        h = h + torch.relu(self.fc2(h))
        return self.fc3(h)


class NormGelu(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(16, 32)
        self.norm = nn.LayerNorm(32)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(32, 4)

    def forward(self, x):
        return self.fc2(self.act(self.norm(self.fc1(x))))


class GeluTanh(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(16, 32)
        self.fc2 = nn.Linear(32, 4)

    def forward(self, x):
        return self.fc2(nn.functional.gelu(self.fc1(x), approximate="tanh"))


class Leaky(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(16, 32)
        self.fc2 = nn.Linear(32, 4)

    def forward(self, x):
        return self.fc2(nn.functional.leaky_relu(self.fc1(x), 0.1))


class SmallCnn(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 4, 3, padding=1)
        self.pool = nn.MaxPool2d(2)
        self.conv2 = nn.Conv2d(4, 8, 3, stride=2)
        self.gap = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(8, 10)

    def forward(self, x):
        h = self.pool(torch.relu(self.conv1(x)))
        h = self.gap(torch.relu(self.conv2(h)))
        return self.fc(torch.flatten(h, 1))


class CnnLeakyAvg(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 4, 3, padding=1)
        self.pool = nn.AvgPool2d(2)
        self.fc = nn.Linear(4 * 6 * 6, 10)

    def forward(self, x):
        h = self.pool(nn.functional.leaky_relu(self.conv(x), 0.1))
        return self.fc(torch.flatten(h, 1))


class Activations(nn.Module):
    """The activations written as programs (compiler/activations/), one after each layer: SiLU and
    Mish (patterns), HardSwish (a pattern below opset 17, an op at 17), Softsign (a pattern), Elu."""

    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(16, 24)
        self.fc2 = nn.Linear(24, 16)
        self.fc3 = nn.Linear(16, 12)
        self.fc4 = nn.Linear(12, 12)
        self.fc5 = nn.Linear(12, 8)
        self.fc6 = nn.Linear(8, 4)

    def forward(self, x):
        h = nn.functional.silu(self.fc1(x))
        h = nn.functional.mish(self.fc2(h))
        h = nn.functional.hardswish(self.fc3(h))
        h = nn.functional.softsign(self.fc4(h))
        return self.fc6(nn.functional.elu(self.fc5(h), 0.5))


class Mixer(nn.Module):
    """The op classes beyond layers (compiler/ops/): a gate (Mul of two layers' outputs, both
    reading the input), Split, a mean over the sequence subtracted (ReduceMean, Sub), Softmax
    along the sequence, Transpose and MatMul of two activations, ReduceMax, Pow, ReduceSum,
    Sqrt, Neg, Div, Exp, a strided Slice over two axes, Concat."""

    def __init__(self):
        super().__init__()
        self.fc_in = nn.Linear(16, 24)
        self.fc_gate = nn.Linear(16, 24)
        self.fc_out = nn.Linear(32, 4)

    def forward(self, x):
        h0 = self.fc_in(x)
        h = h0 * torch.sigmoid(self.fc_gate(x))
        a, b = h.split([16, 8], dim=-1)
        a = a - a.mean(dim=1, keepdim=True)
        w = torch.softmax(b, dim=1)
        p = w.transpose(1, 2) @ a
        s = p.amax(dim=2)
        t = torch.sqrt(p.pow(2).sum(dim=2) + 1)
        e = torch.exp(-t / 4)
        first = h0[:, 1:5:2, :8].flatten(1)
        return self.fc_out(torch.cat([s, t * e, first], dim=1))


class Gpt(nn.Module):
    """A GPT-style decoder block on token ids (an int64 input [N, 6]): token and position
    embeddings (Gather of a table, Add of a parameter), pre-LayerNorm causal self-attention with
    two heads (the fused QKV projection, Split, multi-head Reshape and Transpose, the scores over
    sqrt(8), the causal mask added as a constant, Softmax, MatMul of the weights and V), a GELU
    MLP, the residual sums, a final LayerNorm and the logits per token over the vocabulary, for
    cross-entropy per token."""

    VOCAB, SEQ, D, HEADS = 11, 6, 16, 2

    def __init__(self):
        super().__init__()
        self.tok = nn.Embedding(self.VOCAB, self.D)
        self.pos = nn.Parameter(0.1 * torch.randn(self.SEQ, self.D))
        self.ln1 = nn.LayerNorm(self.D)
        self.qkv = nn.Linear(self.D, 3 * self.D)
        self.proj = nn.Linear(self.D, self.D)
        self.ln2 = nn.LayerNorm(self.D)
        self.fc = nn.Linear(self.D, 2 * self.D)
        self.out = nn.Linear(2 * self.D, self.D)
        self.lnf = nn.LayerNorm(self.D)
        self.head = nn.Linear(self.D, self.VOCAB)

    def forward(self, idx):
        n, s, d, nh = idx.shape[0], self.SEQ, self.D, self.HEADS
        x = self.tok(idx) + self.pos
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=-1)
        q, k, v = (t.reshape(n, s, nh, d // nh).transpose(1, 2) for t in (q, k, v))
        att = self.masked(q @ k.transpose(-2, -1) / math.sqrt(d // nh))
        att = torch.softmax(att, dim=-1)
        x = x + self.proj((att @ v).transpose(1, 2).reshape(n, s, d))
        x = x + self.out(nn.functional.gelu(self.fc(self.ln2(x))))
        return self.head(self.lnf(x))

    def masked(self, att):
        # A constant in the graph (a Constant node): torch.tensor of the mask's values, added.
        s = self.SEQ
        return att + torch.tensor([[0.0 if j <= i else -1e9 for j in range(s)] for i in range(s)])


class GptMasked(Gpt):
    """Gpt with nanoGPT's mask: a registered buffer of ones below the diagonal, and
    masked_fill(mask == 0, -inf) (Equal and Where, as torch exports it)."""

    def __init__(self):
        super().__init__()
        self.register_buffer("bias", torch.tril(torch.ones(self.SEQ, self.SEQ)).view(1, 1, self.SEQ, self.SEQ))

    def masked(self, att):
        s = self.SEQ
        return att.masked_fill(self.bias[:, :, :s, :s] == 0, float("-inf"))


class Encoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.layer = nn.TransformerEncoderLayer(d_model=16, nhead=2, dim_feedforward=32, dropout=0.0, batch_first=True)
        self.head = nn.Linear(16, 4)

    def forward(self, x):
        return self.head(self.layer(x)[:, 0])


MODELS = {
    "residual": (Residual, (2, 16)),
    "norm_gelu": (NormGelu, (2, 16)),
    "gelu_tanh": (GeluTanh, (2, 16)),
    "leaky": (Leaky, (2, 16)),
    "cnn": (SmallCnn, (2, 1, 12, 12)),
    "cnn_leaky_avg": (CnnLeakyAvg, (2, 1, 12, 12)),
    "activations": (Activations, (2, 16)),
    "encoder": (Encoder, (2, 6, 16)),
    "mixer": (Mixer, (2, 6, 16)),
    "gpt": (Gpt, (2, Gpt.SEQ)),
    "gpt_masked": (GptMasked, (2, Gpt.SEQ)),
}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--opsets", default="11,13,14,17")
    ap.add_argument("--models", default=",".join(MODELS))
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    for name in a.models.split(","):
        if name not in MODELS:
            sys.exit(f"unknown model '{name}' (choose from {', '.join(MODELS)})")
        cls, shape = MODELS[name]
        for opset in (int(o) for o in a.opsets.split(",")):
            torch.manual_seed(7)
            model = cls().eval()
            path = os.path.join(a.out, f"{name}_op{opset}.onnx")
            tmp = path + ".tmp"
            example = torch.randint(0, cls.VOCAB, shape) if hasattr(cls, "VOCAB") else torch.randn(*shape)
            torch.onnx.export(model, example, tmp, opset_version=opset, input_names=["input"],
                              output_names=["logits"], dynamic_axes={"input": {0: "batch"}, "logits": {0: "batch"}})
            os.replace(tmp, path)
            print(path)


if __name__ == "__main__":
    main()
