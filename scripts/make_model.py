#!/usr/bin/python3
"""Builds a fully connected network with PyTorch and exports it to ONNX, the compiler's input.

Usage: scripts/make_model.py [--layers 784,32,32,10] [--act relu|sigmoid|tanh|leaky_relu|gelu|...] [--seed 1]
                             [--opset 13] [--batch 1] [--loss none|graph] [--residual [post|pre]] [--layernorm [pre|post]]
                             [--input-norm] [--post-act MUL,ADD] [--branch glu|glu_gate_first|proj]
                             [--conv 8c5,m2,16c5,m2 [--image 1x28x28]] [--out models/fc_mnist.onnx]
  --layers  widths from input to output; one Linear layer (fc1, fc2, ...) between each pair
  --act     activation between Linear layers (none after the last): relu, sigmoid, tanh,
            leaky_relu, gelu, gelu_tanh, elu, selu, softplus, softsign, hardsigmoid, hardtanh,
            relu6, silu, hardswish, mish
  --residual  a hidden layer whose input and output widths are equal adds its input to its
            activated output: h = h + act(fc(h)) (a residual MLP; the same parameter names);
            --residual pre adds it before the activation: h = act(fc(h) + h), as ResNet's blocks
  --layernorm  each hidden layer normalises its output before the activation: act(norm(fc(h)))
            (nn.LayerNorm, parameters normN.weight and normN.bias); --layernorm post after it:
            norm(act(fc(h)))
  --conv    a CNN: convolutions and pooling over --image (C x H x W; C x L: one-dimensional,
            Conv1d and its pools) before the Linear layers,
            comma-separated: NcK[sS][pP] a Conv2d of N channels, K x K, stride S, padding P
            (conv1, conv2, ...), followed by --act; mK[sS][pP] a MaxPool2d K x K, stride S
            (default K; S < K overlaps the windows), padding P, and a trailing c for ceil_mode;
            aK[sS][pP][c] an AvgPool2d the same way (count_include_pad, torch's default),
            AK[sS][pP][c] one that does not count the padding; rK a residual block of two K x K
            convolutions keeping the channels, act(conv(act(conv(x))) + x) (ResNet's order), RK
            the same with the sum after the activation; zP a nn.ZeroPad2d(P) before the
            next item, zL.R.T.B one of left, right, top and bottom pads (torch exports it as
            shape arithmetic and a Pad); g an
            AdaptiveAvgPool2d(1) (GlobalAveragePool); then Flatten and
            Linear layers to the widths of --layers, whose first is taken from the planes
            (--layers 10: one Linear to 10 classes)
  --branch  each hidden layer with a second Linear of the same shape on its input (weight
            streaming only): glu, h = act(fcN(h)) * gateN(h) (with --act silu: SwiGLU);
            glu_gate_first, h = gateN(h) * act(fcN(h)), the gate first; proj, h = act(fcN(h)) +
            projN(h), a projection shortcut; sub, h = act(fcN(h)) - sideN(h) (sub_side_first: the
            side layer first); ffn, a transformer's gated feed-forward blocks with
            their residual connections: --layers IN,D,H1,H2,...,CLASSES gives fc1 (IN -> D), per
            hidden width HK h = h + downK(act(upK(h)) * gateK(h)), then head (D -> CLASSES)
  --post-act MUL,ADD  each activation followed by * MUL + ADD (Mul and Add of constants)
  --input-norm  the model normalises its own input first: (x - mean) / std with constants
            (per channel over --conv's planes), exported as Sub and Div of constants
  --seed    torch.manual_seed before the layers are built, so the initial weights repeat
  --opset   ONNX opset_version of the export
  --batch   batch size of the example input; the batch axis is exported as the symbol "batch"
  --loss    none: input "input" -> output "logits"; graph: inputs "input" and "labels" (int64)
            -> output "loss", the mean cross entropy, so the graph carries the loss
The same arguments give the same bytes. Prints the op types, initializers and opset of the file.
Needs Debian's python3-torch and python3-onnx; runs /usr/bin/python3.
"""
import argparse
import collections
import os
import sys

try:
    import onnx
    import torch
    import torch.nn.functional as F
    from torch import nn
except ImportError as e:
    sys.exit(f"make_model.py: {e}: needs apt-get install python3-torch python3-onnx "
             "and /usr/bin/python3")

# leaky_relu: slope 0.1 below zero (the kernels take any slope in [0, 1]; torch's default is 0.01).
# gelu: torch's default (the Erf form); gelu_tanh: its tanh approximation. elu: alpha 0.5;
# hardtanh: bounds -0.5 and 0.5 (both bind on small models' values; relu6 is Clip(0, 6) too).
ACTIVATIONS = {"relu": nn.ReLU, "sigmoid": nn.Sigmoid, "tanh": nn.Tanh, "leaky_relu": lambda: nn.LeakyReLU(0.1),
               "gelu": nn.GELU, "gelu_tanh": lambda: nn.GELU(approximate="tanh"), "elu": lambda: nn.ELU(0.5),
               "selu": nn.SELU, "softplus": nn.Softplus, "softsign": nn.Softsign, "hardsigmoid": nn.Hardsigmoid,
               "hardtanh": lambda: nn.Hardtanh(-0.5, 0.5), "relu6": nn.ReLU6, "silu": nn.SiLU, "hardswish": nn.Hardswish,
               "mish": nn.Mish}


# --post-act MUL,ADD: each activation followed by * MUL + ADD (exported as Mul and Add of
# constants, which the kernel graph fuses into the layer's activation); None: none.
POST_ACT = None


class Affine(nn.Module):
    def __init__(self, mul, add):
        super().__init__()
        self.mul, self.add = mul, add

    def forward(self, x):
        return x * self.mul + self.add


def make_act(act):
    """The activation module `act`, followed by POST_ACT's step where set."""
    if POST_ACT is None:
        return ACTIVATIONS[act]()
    return nn.Sequential(ACTIVATIONS[act](), Affine(*POST_ACT))


def widths(text):
    try:
        w = [int(x) for x in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a comma list of integers: '{text}'")
    if len(w) < 1 or min(w) < 1:
        raise argparse.ArgumentTypeError(f"need positive widths: '{text}'")
    return w


class ResidualMlp(nn.Module):
    """The network of build() where each hidden layer of equal widths is a residual block,
    h = h + act(fc(h)), or with pre, h = act(fc(h) + h); the same modules (flatten, fc1, act1,
    ...) and parameter names."""

    def __init__(self, layers, act, pre=False):
        super().__init__()
        self.widths = layers
        self.pre = pre
        self.flatten = nn.Flatten()
        for i in range(len(layers) - 1):
            setattr(self, f"fc{i + 1}", nn.Linear(layers[i], layers[i + 1]))
            if i < len(layers) - 2:
                setattr(self, f"act{i + 1}", make_act(act))

    def forward(self, x):
        x = self.flatten(x)
        n = len(self.widths) - 1
        for i in range(n):
            y = getattr(self, f"fc{i + 1}")(x)
            if i == n - 1:
                return y
            same = self.widths[i] == self.widths[i + 1]
            if self.pre:
                x = getattr(self, f"act{i + 1}")(y + x if same else y)
                continue
            y = getattr(self, f"act{i + 1}")(y)
            x = x + y if same else y


class BranchMlp(nn.Module):
    """The network of build() where each hidden layer has a second Linear of the same shape on
    its input (weight streaming's branches): glu, h = act(fcN(h)) * gateN(h) (SwiGLU with silu);
    glu_gate_first, h = gateN(h) * act(fcN(h)), the gate computed (and exported) first; proj,
    h = act(fcN(h)) + projN(h), a projection shortcut."""

    def __init__(self, layers, act, kind):
        super().__init__()
        self.widths, self.kind = layers, kind
        self.flatten = nn.Flatten()
        side = "proj" if kind == "proj" else "side" if kind.startswith("sub") else "gate"
        self.side = side
        first = kind in ("glu_gate_first", "sub_side_first")
        for i in range(len(layers) - 1):
            if i < len(layers) - 2 and first:
                setattr(self, f"{side}{i + 1}", nn.Linear(layers[i], layers[i + 1]))
            setattr(self, f"fc{i + 1}", nn.Linear(layers[i], layers[i + 1]))
            if i < len(layers) - 2:
                setattr(self, f"act{i + 1}", make_act(act))
                if not first:
                    setattr(self, f"{side}{i + 1}", nn.Linear(layers[i], layers[i + 1]))

    def forward(self, x):
        x = self.flatten(x)
        n = len(self.widths) - 1
        for i in range(n):
            fc = getattr(self, f"fc{i + 1}")
            if i == n - 1:
                return fc(x)
            act = getattr(self, f"act{i + 1}")
            if self.kind == "glu":
                x = act(fc(x)) * self.__getattr__(f"gate{i + 1}")(x)
            elif self.kind == "glu_gate_first":
                g = self.__getattr__(f"gate{i + 1}")(x)
                x = g * act(fc(x))
            elif self.kind == "sub":
                x = act(fc(x)) - self.__getattr__(f"side{i + 1}")(x)
            elif self.kind == "sub_side_first":
                s = self.__getattr__(f"side{i + 1}")(x)
                x = act(fc(x)) - s
            else:
                x = act(fc(x)) + self.__getattr__(f"proj{i + 1}")(x)


class FfnMlp(nn.Module):
    """--branch ffn: a transformer's gated feed-forward blocks with their residual connections
    (without attention or norms): layers [in, d, h1, h2, ..., classes] give fc1 (in -> d, the
    activation), then per hidden width hK a block h = h + downK(act(upK(h)) * gateK(h)) (upK and
    gateK d -> hK, downK hK -> d), then head (d -> classes)."""

    def __init__(self, layers, act):
        super().__init__()
        self.flatten = nn.Flatten()
        self.fc1 = nn.Linear(layers[0], layers[1])
        self.act1 = make_act(act)
        d = layers[1]
        self.blocks = len(layers) - 3
        for k in range(self.blocks):
            setattr(self, f"up{k + 1}", nn.Linear(d, layers[k + 2]))
            setattr(self, f"act_up{k + 1}", make_act(act))
            setattr(self, f"gate{k + 1}", nn.Linear(d, layers[k + 2]))
            setattr(self, f"down{k + 1}", nn.Linear(layers[k + 2], d))
        self.head = nn.Linear(d, layers[-1])

    def forward(self, x):
        h = self.act1(self.fc1(self.flatten(x)))
        for k in range(1, self.blocks + 1):
            g = getattr(self, f"act_up{k}")(getattr(self, f"up{k}")(h)) * getattr(self, f"gate{k}")(h)
            h = h + getattr(self, f"down{k}")(g)
        return self.head(h)


class ConvBlock(nn.Module):
    """A residual block of two K x K convolutions that keep the channels and the plane (padding
    K // 2), --conv's rK and RK: pre (ResNet's BasicBlock without its BatchNorms), act(conv2(act(
    conv1(x))) + x); else x + act(conv2(act(conv1(x))))."""

    def __init__(self, c, k, act, pre, one_d):
        super().__init__()
        conv = nn.Conv1d if one_d else nn.Conv2d
        self.conv1, self.act1 = conv(c, c, k, padding=k // 2), make_act(act)
        self.conv2, self.act2 = conv(c, c, k, padding=k // 2), make_act(act)
        self.pre = pre

    def forward(self, x):
        y = self.conv2(self.act1(self.conv1(x)))
        return self.act2(y + x) if self.pre else x + self.act2(y)


def image(text):
    try:
        v = [int(t) for t in text.split("x")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}': need C x H x W, e.g. 1x28x28, or C x L")
    if len(v) not in (2, 3) or min(v) < 1:
        raise argparse.ArgumentTypeError(f"'{text}': need C x H x W, e.g. 1x28x28, or C x L")
    return v


def build_cnn(spec, img, layers, act):
    """The CNN of --conv: its modules, and the Linear layers after the planes (see --conv)."""
    import re
    mods = collections.OrderedDict()
    one_d = len(img) == 2  # C x L: Conv1d, MaxPool1d, AvgPool1d, ConstantPad1d (pads: left and right)
    c, h, w = (img[0], 1, img[1]) if one_d else img
    n_conv = 0
    for item in spec.split(","):
        z = re.fullmatch(r"z(\d+)(?:\.(\d+)\.(\d+)\.(\d+))?", item.strip())
        if z:
            lrtb = [int(z.group(1))] * 4 if z.group(2) is None else [int(z.group(k)) for k in range(1, 5)]
            if one_d:
                lrtb[2] = lrtb[3] = 0
            mods[f"pad{len(mods)}"] = nn.ConstantPad1d(tuple(lrtb[:2]), 0.0) if one_d else nn.ZeroPad2d(tuple(lrtb))
            h, w = h + lrtb[2] + lrtb[3], w + lrtb[0] + lrtb[1]
            continue
        r = re.fullmatch(r"([rR])(\d+)", item.strip())
        if r:
            k = int(r.group(2))
            if k % 2 == 0:
                raise argparse.ArgumentTypeError(f"--conv item '{item}': a residual block's kernel must be odd (it keeps the plane)")
            mods[f"block{len(mods)}"] = ConvBlock(c, k, act, r.group(1) == "r", one_d)
            continue
        m = re.fullmatch(r"(\d+)c(\d+)(?:s(\d+))?(?:p(\d+))?|([maA])(\d+)(?:s(\d+))?(?:p(\d+))?(c)?|(g)", item.strip())
        if not m:
            raise argparse.ArgumentTypeError(f"--conv item '{item}': NcK[sS][pP], mK[sS][pP][c], aK[sS][pP][c], AK[sS][pP][c], rK, RK, zP, zL.R.T.B or g")
        if m.group(1):
            n, k, st, pd = int(m.group(1)), int(m.group(2)), int(m.group(3) or 1), int(m.group(4) or 0)
            n_conv += 1
            mods[f"conv{n_conv}"] = (nn.Conv1d if one_d else nn.Conv2d)(c, n, k, stride=st, padding=pd)
            mods[f"cact{n_conv}"] = make_act(act)
            c, h, w = n, 1 if one_d else (h + 2 * pd - k) // st + 1, (w + 2 * pd - k) // st + 1
        elif m.group(5):
            k = int(m.group(6))
            st = int(m.group(7) or k)
            pd = int(m.group(8) or 0)
            ceil = m.group(9) is not None
            if m.group(5) == "m":
                mods[f"pool{len(mods)}"] = (nn.MaxPool1d if one_d else nn.MaxPool2d)(k, stride=st, padding=pd, ceil_mode=ceil)
            else:
                avg = nn.AvgPool1d if one_d else nn.AvgPool2d
                mods[f"pool{len(mods)}"] = avg(k, stride=st, padding=pd, ceil_mode=ceil, count_include_pad=m.group(5) == "a")

            def windows(n):
                out = -(-(n + 2 * pd - k) // st) + 1 if ceil else (n + 2 * pd - k) // st + 1
                return out - 1 if ceil and (out - 1) * st >= n + pd else out
            h, w = 1 if one_d else windows(h), windows(w)
        else:
            mods[f"pool{len(mods)}"] = nn.AdaptiveAvgPool1d(1) if one_d else nn.AdaptiveAvgPool2d(1)
            h = w = 1
        if h < 1 or w < 1:
            raise argparse.ArgumentTypeError(f"--conv '{spec}' leaves no plane of the {img} image")
    mods["flatten"] = nn.Flatten()
    widths_ = [c * h * w] + list(layers)
    for i in range(len(widths_) - 1):
        mods[f"fc{i + 1}"] = nn.Linear(widths_[i], widths_[i + 1])
        if i < len(widths_) - 2:
            mods[f"act{i + 1}"] = make_act(act)
    return nn.Sequential(mods)


def build(layers, act, residual=False, layernorm=False, branch=None):
    """residual: False, True or "post" (h + act(fc(h))), or "pre" (act(fc(h) + h)); layernorm:
    False, True or "pre" (act(norm(fc(h)))), or "post" (norm(act(fc(h)))); branch: None, or
    BranchMlp's kind."""
    if branch == "ffn":
        return FfnMlp(layers, act)
    if branch:
        return BranchMlp(layers, act, branch)
    if residual:
        return ResidualMlp(layers, act, residual == "pre")
    mods = collections.OrderedDict(flatten=nn.Flatten())
    for i in range(len(layers) - 1):
        mods[f"fc{i + 1}"] = nn.Linear(layers[i], layers[i + 1])
        if i < len(layers) - 2:
            if layernorm and layernorm != "post":
                mods[f"norm{i + 1}"] = nn.LayerNorm(layers[i + 1])
            mods[f"act{i + 1}"] = make_act(act)
            if layernorm == "post":
                mods[f"norm{i + 1}"] = nn.LayerNorm(layers[i + 1])
    return nn.Sequential(mods)


class InputNorm(nn.Module):
    """(x - mean) / std inside the model, as a model that normalises its own input exports it
    (Sub and Div of constants): per channel over planes (mean 0.25 + 0.125 c, std 0.5 + 0.25 c),
    one scalar pair over features. No parameters: the state dict keeps the network's names."""

    def __init__(self, shape):
        super().__init__()
        self.planes = len(shape) > 1
        self.c = shape[0]

    def forward(self, x):
        if not self.planes:
            return (x - 0.25) / 0.5
        view = [1, self.c] + [1] * (x.dim() - 2)
        mean = torch.tensor([0.25 + 0.125 * c for c in range(self.c)]).view(*view)
        std = torch.tensor([0.5 + 0.25 * c for c in range(self.c)]).view(*view)
        return (x - mean) / std


def with_input_norm(net, shape):
    """`net` (a Sequential) after an InputNorm over samples of `shape` (C x H x W, C x L, or [features])."""
    if not isinstance(net, nn.Sequential):
        raise ValueError("--input-norm needs a Sequential network (not --residual)")
    return nn.Sequential(collections.OrderedDict([("prep", InputNorm(shape))] + list(net.named_children())))


class WithLoss(nn.Module):
    """(x, labels) -> mean cross entropy of the network's logits. Its parameters keep the
    network's names (fc1.weight, ...) because the network is not wrapped in a submodule."""

    def __init__(self, net):
        super().__init__()
        object.__setattr__(self, "net", net)  # not a submodule: the parameters keep their names
        for name, mod in net.named_children():
            self.add_module(name, mod)

    def forward(self, x, labels):
        if isinstance(self.net, (ResidualMlp, BranchMlp, FfnMlp)):
            return F.cross_entropy(self.net(x), labels)
        for mod in self.children():
            x = mod(x)
        return F.cross_entropy(x, labels)


def summary(path):
    m = onnx.load(path)
    opsets = ", ".join(f"{o.domain or 'ai.onnx'} {o.version}" for o in m.opset_import)
    print(f"{path}: ir_version {m.ir_version}, opset {opsets}, producer {m.producer_name} "
          f"{m.producer_version}")
    print("  ops:", " ".join(f"{n.op_type}({n.name})" for n in m.graph.node))

    def shape(v):
        dims = v.type.tensor_type.shape.dim
        return "[" + ", ".join(d.dim_param or str(d.dim_value) for d in dims) + "]"

    print("  inputs:", ", ".join(v.name + shape(v) for v in m.graph.input))
    print("  outputs:", ", ".join(v.name + shape(v) for v in m.graph.output))
    print("  initializers:", ", ".join(f"{t.name}{list(t.dims)}" for t in m.graph.initializer))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--layers", type=widths, default=widths("784,32,32,10"))
    ap.add_argument("--act", choices=sorted(ACTIVATIONS), default="relu")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--opset", type=int, default=13)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--loss", choices=["none", "graph"], default="none")
    ap.add_argument("--residual", nargs="?", const="post", choices=["post", "pre"], default=None)
    ap.add_argument("--layernorm", nargs="?", const="pre", choices=["pre", "post"], default=None)
    ap.add_argument("--input-norm", action="store_true")
    ap.add_argument("--post-act", default=None)
    ap.add_argument("--branch", choices=["glu", "glu_gate_first", "proj", "sub", "sub_side_first", "ffn"], default=None)
    ap.add_argument("--conv", default="")
    ap.add_argument("--image", type=image, default=[1, 28, 28])
    ap.add_argument("--out", default="models/fc_mnist.onnx")
    a = ap.parse_args()
    if a.batch < 1:
        ap.error("--batch must be at least 1")
    if a.loss == "graph" and a.opset < 12:
        ap.error("--loss graph needs --opset 12 or later (SoftmaxCrossEntropyLoss)")

    if a.post_act:
        global POST_ACT
        try:
            POST_ACT = tuple(float(v) for v in a.post_act.split(","))
        except ValueError:
            POST_ACT = ()
        if len(POST_ACT) != 2:
            ap.error("--post-act needs MUL,ADD, e.g. 0.5,0.1")
    torch.manual_seed(a.seed)
    if a.residual and a.layernorm:
        ap.error("--residual and --layernorm together are not built yet")
    if not a.conv and len(a.layers) < 2:
        ap.error("--layers needs at least two widths (the input's and the output's)")
    if a.conv and (a.residual or a.layernorm):
        ap.error("--conv with --residual or --layernorm is not built yet")
    if a.conv:
        try:
            net = build_cnn(a.conv, a.image, a.layers, a.act)
        except argparse.ArgumentTypeError as e:
            ap.error(str(e))
        x = torch.zeros(a.batch, *a.image)
    else:
        if a.branch and (a.residual or a.layernorm or a.input_norm):
            ap.error("--branch with --residual, --layernorm or --input-norm is not built yet")
        net = build(a.layers, a.act, a.residual, a.layernorm, a.branch)
        x = torch.zeros(a.batch, a.layers[0])
    if a.input_norm:
        if a.residual:
            ap.error("--input-norm with --residual is not built yet")
        net = with_input_norm(net, a.image if a.conv else [a.layers[0]])
    if a.loss == "graph":
        model, args = WithLoss(net), (x, torch.zeros(a.batch, dtype=torch.int64))
        names_in, names_out = ["input", "labels"], ["loss"]
        axes = {"input": {0: "batch"}, "labels": {0: "batch"}}  # the loss is a scalar
    else:
        model, args = net, (x,)
        names_in, names_out = ["input"], ["logits"]
        axes = {"input": {0: "batch"}, "logits": {0: "batch"}}
    model.eval()

    if os.path.dirname(a.out):
        os.makedirs(os.path.dirname(a.out), exist_ok=True)
    tmp = a.out + ".tmp"
    try:
        torch.onnx.export(model, args, tmp, input_names=names_in, output_names=names_out,
                          dynamic_axes=axes, opset_version=a.opset, do_constant_folding=True)
    except (ValueError, torch.onnx.errors.OnnxExporterError) as e:
        if os.path.exists(tmp):
            os.remove(tmp)
        sys.exit(f"make_model.py: export failed: {e}")
    os.replace(tmp, a.out)
    summary(a.out)


if __name__ == "__main__":
    main()
