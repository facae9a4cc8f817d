#!/usr/bin/python3
"""Trains small ONNX models on the simulated wafer and in PyTorch and compares the two.

Usage: scripts/test_torch_roundtrip.py --wafersim build/wafersim [--workdir DIR]
                                       [--mode layer-pipelined|weight-streaming]

For each shape below the test builds the network as scripts/make_model.py does (its build()),
exports it with torch.onnx.export, makes a random float32 dataset of exactly --train.batch
samples (so each wafer step is full-batch training and the shuffle only changes the order of the
per-sample sums), runs `wafersim train` for N = 10 steps with SGD + momentum and trains the same
model in PyTorch with torch.optim.SGD(lr, momentum) and F.cross_entropy (mean). Checks:
  loss1     the wafer's step-1 mean loss (the initial model's forward pass) against PyTorch's
  losses    every step's mean loss (full precision after steps 1, 2 and N: runs of that many
            steps, run_report.json; between them the N-step run's losses.csv, 6 decimals)
  onnx      the checkpoint loads and passes onnx.checker.check_model; its metadata says step N
  weights   the checkpoint's initializers against PyTorch's trained parameters
  momentum  NAME.momentum against momentum * the optimizer's momentum_buffer after step N
            (relative to each tensor's largest element, or to torch's own fp32-fp64 gap)
  resume    2 steps, then --resume for the rest, reproduce the N-step checkpoint bit for bit
One shape trains 4 copies of the model (compile.replicas 4), the others one.
  logits    the checkpoint evaluated on fresh inputs (a small numpy interpreter of its graph,
            and torch with its weights loaded) against PyTorch's trained model
A float64 copy of the PyTorch training runs next to the float32 one; its distance from PyTorch
float32 is printed as the scale of fp32 rounding that the wafer's differences compare to.
With --mode weight-streaming it trains WS_CASES instead: the wafer runs `--mode weight-streaming
--systems 2` (each system half of the batch, SwarmX summing their gradients, MemoryX's SGD +
momentum or Adam updating the weights) and PyTorch trains with torch.optim.SGD or torch.optim.Adam.
Checks loss1, losses, onnx (metadata: mode, step, optimizer; the report: 2 systems), weights
and the optimizer state, which the weight-streaming checkpoint keeps as PyTorch does
(NAME.momentum_buffer, NAME.exp_avg, NAME.exp_avg_sq). Its CNN cases (CONV: a LeNet-style
Conv, ReLU, MaxPool, Linear on 28 x 28, and a padded Conv with LeakyReLU and AveragePool) train
CNN_STEPS steps, the others WS_STEPS (both 10), and compare the losses after 1, 2 and the last. This is the check of weight streaming
that shares no code with the simulator (the C++ reference of WsTraining.* uses MemoryX and
SwarmX::tree_sum themselves).
Prints PASS/FAIL per check and exits 1 if any check fails.
Needs Debian's python3-torch, python3-onnx and numpy; runs /usr/bin/python3.
"""
import argparse
import copy
import math
import json
import os
import shutil
import subprocess
import sys
import time

try:
    import numpy as np
    import onnx
    from onnx import numpy_helper
    import torch
    import torch.nn.functional as F
except ImportError as e:
    sys.exit(f"test_torch_roundtrip.py: {e}: needs apt-get install python3-torch python3-onnx "
             "python3-numpy and /usr/bin/python3")

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_model  # noqa: E402  (the same network construction as the exported models)

# (name, layer widths, activation, opset, seed, lr, momentum)
SHAPES = [
    ("relu_op13", [20, 12, 5], "relu", 13, 1, 0.1, 0.9),
    ("tanh_op17", [16, 10, 8, 4], "tanh", 17, 2, 0.2, 0.8),
    ("sigmoid_op11", [12, 6, 3], "sigmoid", 11, 3, 0.5, 0.9),
    ("relu_replicas4", [20, 12, 5], "relu", 13, 4, 0.1, 0.9),
    ("leaky_op13", [20, 12, 8, 5], "leaky_relu", 13, 5, 0.1, 0.9),
    # Residual connections (h = h + act(fc(h)) where the widths agree): fc2, fc3 and fc5.
    ("residual_op14", [20, 12, 12, 12, 8, 8, 5], "relu", 14, 9, 0.1, 0.9),
    # The sum before the activation (h = act(fc(h) + h), as ResNet's blocks): a GELU's.
    ("residual_pre_gelu_op17", [20, 12, 12, 12, 8, 8, 5], "gelu", 17, 34, 0.1, 0.9),
    # GELU, torch's default (the Erf form) and its tanh approximation.
    ("gelu_op13", [20, 12, 8, 5], "gelu", 13, 10, 0.1, 0.9),
    ("gelu_tanh_op17", [16, 10, 8, 4], "gelu_tanh", 17, 11, 0.2, 0.8),
    # LayerNorm before each hidden activation, decomposed (opset 13) and LayerNormalization (17).
    ("layernorm_gelu_op13", [20, 12, 8, 5], "gelu", 13, 14, 0.1, 0.9),
    ("layernorm_relu_op17", [16, 10, 8, 4], "relu", 17, 15, 0.1, 0.9),
    ("layernorm_replicas3", [20, 12, 8, 5], "gelu", 17, 20, 0.1, 0.9),
    # Two LayerNorms of one width: torch exports the second's scale and bias (equal to the
    # first's at export) as Identity nodes of the first's; each is a parameter of its own.
    ("layernorm_shared_op13", [20, 12, 12, 5], "silu", 13, 33, 0.1, 0.9),
    # The model normalises its own input ((x - mean) / std, constants): the input workers' step.
    ("input_norm_op13", [20, 12, 5], "relu", 13, 42, 0.1, 0.9),
    # A LayerNorm after each hidden activation (nn.Sequential(Linear, GELU, LayerNorm)).
    ("layernorm_post_gelu_op17", [20, 12, 8, 5], "gelu", 17, 45, 0.1, 0.9),
    ("layernorm_post_tanh_op13", [16, 10, 8, 4], "tanh", 13, 46, 0.1, 0.9),
    # Scalar steps after each activation (2 sigmoid(z) - 1; 0.5 gelu(z) + 0.125 on a CNN).
    ("post_act_sigmoid_op13", [20, 12, 8, 5], "sigmoid", 13, 49, 0.1, 0.9),
    ("post_act_gelu_conv_op17", [10], "gelu", 17, 50, 0.05, 0.9),
    # CNNs (CONV below): a LeNet-style one and one with LeakyReLU and AveragePool.
    ("lenet_op13", [10], "relu", 13, 18, 0.05, 0.9),
    ("leaky_avg_op17", [10], "leaky_relu", 17, 19, 0.05, 0.9),
    # Residual blocks of convolutions (ResNet's act(conv(act(conv(x))) + x), and the sum after
    # the activation), pooled after the sum: the roots' residual streams.
    # A MaxPool over the whole plane (torch's AdaptiveMaxPool2d(1) exports so).
    ("gmp_op13", [10], "relu", 13, 42, 0.05, 0.9),
    ("resnet_op13", [10], "relu", 13, 38, 0.05, 0.9),
    ("resnet_silu_op17", [10], "silu", 17, 39, 0.05, 0.9),
    ("input_norm_conv_op17", [10], "tanh", 17, 44, 0.05, 0.9),
    # The activations written as programs (compiler/activations/): ONNX ops (Elu, Selu, Softplus,
    # HardSigmoid, Clip from Hardtanh and ReLU6, HardSwish at opset 17) and patterns the pass
    # fuse_activations finds (SiLU, Mish, Softsign, HardSwish below opset 17).
    ("elu_op13", [20, 12, 8, 5], "elu", 13, 21, 0.1, 0.9),
    ("selu_op17", [20, 12, 8, 5], "selu", 17, 22, 0.1, 0.9),
    ("softplus_op11", [20, 12, 8, 5], "softplus", 11, 23, 0.1, 0.9),
    ("softsign_op13", [20, 12, 8, 5], "softsign", 13, 24, 0.1, 0.9),
    ("hardsigmoid_op17", [20, 12, 8, 5], "hardsigmoid", 17, 25, 0.2, 0.9),
    ("hardtanh_op13", [20, 12, 8, 5], "hardtanh", 13, 26, 0.1, 0.9),
    ("relu6_op11", [20, 12, 8, 5], "relu6", 11, 27, 0.1, 0.9),
    ("silu_op13", [20, 12, 8, 5], "silu", 13, 28, 0.1, 0.9),
    ("hardswish_op14", [20, 12, 8, 5], "hardswish", 14, 29, 0.1, 0.9),
    ("hardswish_op17", [20, 12, 8, 5], "hardswish", 17, 30, 0.1, 0.9),
    ("mish_op17", [20, 12, 8, 5], "mish", 17, 31, 0.1, 0.9),
    ("hardtanh_conv_op13", [10], "hardtanh", 13, 32, 0.05, 0.9),
    # Overlapping pooling windows (3 x 3, stride 2: AlexNet's and ResNet's stems).
    ("overlap_pool_op13", [10], "relu", 13, 34, 0.05, 0.9),
    # Padded pooling: MaxPool2d(3, 2, 1) (ResNet's stem), AvgPool2d with its padding counted
    # (torch exports a Pad before it) and not counted.
    ("pad_pool_op17", [10], "relu", 17, 35, 0.05, 0.9),
    # Convolutions whose activation's derivative is taken at z (the roots keep z): GELU before
    # a MaxPool (y taken again from z backward), SiLU before an AveragePool and unpooled.
    ("gelu_conv_op17", [10], "gelu", 17, 36, 0.05, 0.9),
    ("silu_conv_op13", [10], "silu", 13, 37, 0.05, 0.9),
    # ceil_mode pooling: the last windows run past the plane (MaxPool, AvgPool2d counting pads).
    ("ceil_pool_op13", [10], "relu", 13, 38, 0.05, 0.9),
    # F.pad / nn.ZeroPad2d before a convolution: shape arithmetic torch exports, folded, and a
    # Pad the compiler takes as the convolution's pads (asymmetric here).
    ("zeropad_op17", [10], "hardswish", 17, 39, 0.05, 0.9),
    # One-dimensional convolutions (Conv1d, MaxPool1d, AvgPool1d on [N, C, L]): planes of one row.
    ("conv1d_op13", [10], "relu", 13, 40, 0.05, 0.9),
]
# Shapes trained by several copies of the model (compile.replicas; the others by one): each
# copy takes every 4th sample, their gradients summed on the wafer before the same update.
REPLICAS = {"relu_replicas4": 4, "layernorm_replicas3": 3}
BATCH = 8
# Steps of the layer-pipelined cases (issue 37's acceptance: the loss after 10 SGD steps): runs of
# 1, 2 and STEPS steps give full-precision losses there (run_report.json), the STEPS-step run's
# losses.csv the steps between (to 6 decimals).
STEPS = 10
AT = [1, 2, STEPS]
SIM_SEED = 7

# Weight streaming: (name, layer widths, activation, opset, seed, optimizer, lr, momentum), on
# WS_SYSTEMS systems for WS_STEPS steps. Adam uses the defaults of memoryx.beta1/beta2/eps,
# which are torch.optim.Adam's. Losses and weights use the tolerances above (measured: losses
# within 1.5e-7 relative, weights 6e-8 absolute). The optimizer state is compared relative to
# each tensor's largest element: measured 2.6e-7 (SGD's momentum_buffer) and 4.6e-7 (Adam's
# exp_avg_sq), WS_STATE_RTOL 2e-6 is 4 to 8x that; SwarmX weighting one system's gradients by
# 0.999 moves it by 1e-3, the weights by 7e-5 and the losses by 5e-4.
WS_CASES = [
    ("ws_sgd_tanh", [20, 12, 5], "tanh", 13, 4, "sgd", 0.1, 0.9),
    ("ws_adam_relu", [16, 10, 8, 4], "relu", 17, 5, "adam", 0.01, 0.0),
    ("ws_sgd_leaky", [20, 12, 8, 5], "leaky_relu", 13, 7, "sgd", 0.1, 0.9),
    # Residual connections (h = h + act(fc(h)) where the widths agree): fc2, fc3 and fc4 here.
    ("ws_sgd_residual", [20, 12, 12, 12, 12, 5], "tanh", 14, 8, "sgd", 0.1, 0.9),
    ("ws_sgd_residual_pre", [20, 12, 12, 12, 12, 5], "tanh", 13, 35, "sgd", 0.1, 0.9),
    ("ws_adam_gelu", [20, 12, 8, 5], "gelu", 13, 12, "adam", 0.01, 0.0),
    ("ws_sgd_gelu_tanh", [16, 10, 10, 4], "gelu_tanh", 17, 13, "sgd", 0.1, 0.9),
    # The grid layout: bands of rows on both edges fed through relays, rows with empty slices.
    ("ws_grid_sgd_sigmoid", [30, 9, 4], "sigmoid", 13, 6, "sgd", 0.1, 0.9, ["--ws.layout", "grid", "--ws.rows", "12"]),
]
# CNNs (make_model.py --conv SPEC --image CxHxW; `layers` are the widths after the planes):
# weight streaming's convolutions, trained for CNN_STEPS steps (runs of 1, 2 and CNN_STEPS).
CONV = {"ws_sgd_lenet": ("4c5,m2,8c5,m2", [1, 28, 28]), "ws_sgd_leaky_avg": ("4c3p1,a2", [1, 12, 12]),
        "lenet_op13": ("4c5,m2,8c5,m2", [1, 28, 28]), "leaky_avg_op17": ("4c3p1,a2,6c3,m2", [2, 12, 12]),
        "hardtanh_conv_op13": ("4c3,m2,6c3", [1, 12, 12]), "ws_sgd_hardtanh_conv": ("4c3,m2", [1, 12, 12]),
        "overlap_pool_op13": ("4c3p1,m3s2,6c3,a3s2", [1, 15, 15]), "ws_sgd_overlap_pool": ("4c3p1,m3s2,6c3p1,a3s2", [2, 13, 13]),
        "pad_pool_op17": ("4c3p1,m3s2p1,5c3p1,A3s1p1,4c3,a2s2p1", [1, 14, 13]),
        "ws_sgd_pad_pool": ("4c3p1,m3s2p1,5c3p1,a3s2p1,4c3p1,A2s2p1", [2, 13, 12]),
        "gelu_conv_op17": ("4c3p1,m2,6c3", [1, 12, 12]), "silu_conv_op13": ("4c3p1,a2,5c3", [2, 11, 11]),
        "ws_sgd_gelu_conv": ("4c3p1,m3s2p1,5c3", [1, 12, 12]), "ws_sgd_mish_conv": ("4c3p1,a2,5c3", [2, 11, 11]),
        "ceil_pool_op13": ("4c3p1,m2s2c,5c3,a2s2c", [1, 13, 13]), "ws_sgd_ceil_pool": ("4c3p1,m2s2c,5c3p1,A2s2c", [2, 13, 13]),
        "zeropad_op17": ("z1.2.1.0,4c3s2,m3s2p1c,z1,5c3,a2", [1, 14, 13]), "ws_sgd_zeropad": ("z2.1.0.1,4c3,m2,5c3", [1, 12, 12]),
        "conv1d_op13": ("4c5p2,m3s2p1,6c3,a2", [1, 64]), "ws_sgd_conv1d": ("z2.1.0.0,4c5,m2,5c3p1,A3s2p1c", [2, 50]),
        "ws_sgd_resnet": ("4c3p1,r3,m2,R3,r3,g", [1, 10, 10]), "ws_sgd_resnet_gelu": ("4c3p1,m3s2p1,r3,R3,a2", [2, 12, 12]),
        "ws_sgd_tanh_unpooled": ("4c3p1,5c3,g", [2, 8, 7]),
        "gmp_op13": ("4c3p1,m20", [1, 20, 20]), "ws_sgd_gmp": ("4c3p1,m2,6c3p1,m14", [1, 28, 28]),
        "resnet_op13": ("4c3p1,r3,m2,R3,r3,g", [1, 10, 10]), "resnet_silu_op17": ("4c3p1,m3s2p1,r3,R3,a2", [2, 12, 12]),
        "input_norm_conv_op17": ("4c3p1,m2,5c3", [3, 10, 10]), "ws_sgd_input_norm_conv": ("4c3p1,m2", [3, 10, 10]),
        "post_act_gelu_conv_op17": ("4c3p1,m2,5c3", [2, 10, 10]), "ws_sgd_post_act_relu_conv": ("4c3p1,m2,5c3", [2, 10, 10])}
WS_CASES += [
    # LayerNorm before each hidden activation (at the roots; gamma and beta in MemoryX).
    ("ws_sgd_layernorm_gelu", [20, 12, 8, 5], "gelu", 17, 16, "sgd", 0.1, 0.9),
    ("ws_adam_layernorm_relu", [16, 10, 8, 4], "relu", 13, 17, "adam", 0.01, 0.0),
    ("ws_sgd_lenet", [10], "relu", 13, 14, "sgd", 0.05, 0.9),
    ("ws_sgd_leaky_avg", [10], "leaky_relu", 17, 15, "sgd", 0.05, 0.9),
    # Activations written as programs: an ONNX op with parameters, a pattern, and Clip on a CNN.
    ("ws_sgd_elu", [20, 12, 8, 5], "elu", 13, 18, "sgd", 0.1, 0.9),
    ("ws_adam_silu", [16, 10, 8, 4], "silu", 17, 19, "adam", 0.01, 0.0),
    ("ws_sgd_mish", [20, 12, 8, 5], "mish", 13, 20, "sgd", 0.1, 0.9),
    ("ws_sgd_hardtanh_conv", [10], "hardtanh", 13, 21, "sgd", 0.05, 0.9),
    ("ws_sgd_layernorm_shared", [20, 12, 12, 5], "hardswish", 17, 22, "sgd", 0.1, 0.9),
    ("ws_sgd_overlap_pool", [10], "relu", 13, 23, "sgd", 0.05, 0.9),
    ("ws_sgd_pad_pool", [10], "relu", 13, 24, "sgd", 0.05, 0.9),
    ("ws_sgd_gelu_conv", [10], "gelu", 17, 25, "sgd", 0.05, 0.9),
    ("ws_sgd_mish_conv", [10], "mish", 17, 26, "sgd", 0.05, 0.9),
    ("ws_sgd_ceil_pool", [10], "relu", 13, 27, "sgd", 0.05, 0.9),
    ("ws_sgd_zeropad", [10], "relu", 17, 28, "sgd", 0.05, 0.9),
    ("ws_sgd_conv1d", [10], "tanh", 13, 29, "sgd", 0.05, 0.9),
    # Residual blocks of two convolutions (ResNet's act(conv(act(conv(x))) + x), and the sum
    # after the activation), pooled after the sum: at the roots.
    ("ws_sgd_resnet", [10], "relu", 13, 36, "sgd", 0.05, 0.9),
    ("ws_sgd_resnet_gelu", [10], "gelu", 17, 37, "sgd", 0.05, 0.9),
    # Unpooled convolutions (their outputs' slice and their dz, output by output, in the rows'
    # dy buffer, which is no longer the layer's width).
    ("ws_sgd_tanh_unpooled", [3], "tanh", 14, 40, "sgd", 0.05, 0.9),
    # A MaxPool over the whole plane (AdaptiveMaxPool2d(1)): its taps in a loop at the roots.
    ("ws_sgd_gmp", [10], "relu", 13, 41, "sgd", 0.05, 0.9),
    # The model normalises its own input per channel ((x - mean) / std): the input workers' step.
    ("ws_sgd_input_norm_conv", [10], "relu", 17, 43, "sgd", 0.05, 0.9),
    # A LayerNorm after each hidden activation (at the roots: the activation, then the norm).
    ("ws_sgd_layernorm_post_gelu", [20, 12, 8, 5], "gelu", 17, 47, "sgd", 0.1, 0.9),
    ("ws_sgd_layernorm_post_relu", [16, 10, 8, 4], "relu", 13, 48, "sgd", 0.1, 0.9),
    # Scalar steps after each activation (-0.75 tanh(z) + 0.25; 1.5 relu(z) - 0.5 on a CNN).
    ("ws_sgd_post_act_tanh", [20, 12, 8, 5], "tanh", 13, 51, "sgd", 0.1, 0.9),
    ("ws_sgd_post_act_relu_conv", [10], "relu", 13, 52, "sgd", 0.05, 0.9),
    # Branches (make_model.py --branch): SwiGLU (silu(fc(h)) * gate(h)), the gate first with a
    # GELU, and projection shortcuts (relu(fc(h)) + proj(h)).
    ("ws_sgd_swiglu", [20, 12, 8, 5], "silu", 13, 53, "sgd", 0.1, 0.9),
    ("ws_sgd_glu_gate_first", [20, 12, 8, 5], "gelu", 17, 54, "sgd", 0.1, 0.9),
    ("ws_adam_proj", [20, 12, 8, 5], "relu", 13, 55, "adam", 0.01, 0.0),
    # A transformer's gated feed-forward blocks with their residual connections (the block's input
    # read by the up layer, the gate and the sum: its gradient from three readers).
    ("ws_sgd_ffn", [20, 16, 24, 12, 5], "gelu", 17, 56, "sgd", 0.1, 0.9),
    # Differences of two layers' outputs, both orders of the graph.
    ("ws_sgd_sub", [20, 12, 8, 5], "tanh", 13, 57, "sgd", 0.1, 0.9),
    ("ws_sgd_sub_side_first", [20, 12, 8, 5], "relu", 14, 58, "sgd", 0.1, 0.9),
]
# Cases built with branches (make_model.py --branch).
BRANCH = {"ws_sgd_swiglu": "glu", "ws_sgd_glu_gate_first": "glu_gate_first", "ws_adam_proj": "proj", "ws_sgd_ffn": "ffn",
          "ws_sgd_sub": "sub", "ws_sgd_sub_side_first": "sub_side_first"}
CNN_STEPS = 10
# Cases built as residual MLPs (make_model.py --residual, post or pre).
RESIDUAL = {"residual_op14": "post", "ws_sgd_residual": "post", "residual_pre_gelu_op17": "pre", "ws_sgd_residual_pre": "pre"}
# Cases built with a LayerNorm before each hidden activation (make_model.py --layernorm).
# Cases whose activations are each followed by * MUL + ADD (make_model.py --post-act).
POST_ACT = {"post_act_sigmoid_op13": (2.0, -1.0), "post_act_gelu_conv_op17": (0.5, 0.125),
            "ws_sgd_post_act_tanh": (-0.75, 0.25), "ws_sgd_post_act_relu_conv": (1.5, -0.5)}
# Cases whose model normalises its own input first (make_model.py --input-norm).
INPUT_NORM = {"input_norm_op13", "input_norm_conv_op17", "ws_sgd_input_norm_conv"}
# Cases with a LayerNorm after each hidden activation (make_model.py --layernorm post).
LAYERNORM_POST = {"layernorm_post_gelu_op17", "layernorm_post_tanh_op13", "ws_sgd_layernorm_post_gelu", "ws_sgd_layernorm_post_relu"}
LAYERNORM = {"layernorm_gelu_op13", "layernorm_relu_op17", "layernorm_replicas3", "layernorm_shared_op13", "ws_sgd_layernorm_shared", "ws_sgd_layernorm_gelu", "ws_adam_layernorm_relu"}
WS_SYSTEMS = 2
WS_STEPS = 10
WS_STATE_RTOL = 2e-6
# A tensor whose elements cancel (a LayerNorm's gamma gradient: sums of dy x^ over samples) is
# ill-conditioned: PyTorch's own fp32 run is 1e-6 to 1e-5 of it off its fp64 run after 10 steps.
# The optimizer state passes within WS_STATE_RTOL or within STATE_GAP_FACTOR times that gap.
STATE_GAP_FACTOR = 4


def state_tol(gap):
    return max(WS_STATE_RTOL, STATE_GAP_FACTOR * gap)

# Tolerances. The wafer and PyTorch compute the same float32 arithmetic in a different order
# (per-sample fma accumulation of the gradients on the wafer, a matmul over the batch in torch;
# different tree orders for the dot products and the softmax sum), so they may differ by a few
# ulps per operation. Measured: losses within ~1e-7 relative, weights, momentum and logits
# within ~1.5e-7 absolute (values O(1)), the same size as PyTorch float32 vs float64, which the
# checks print. Step 1 is one forward pass: abs 1e-6 + rel 1e-5. Later steps carry the rounding
# of the updates into the weights and compound over the steps: rel 1e-5, still ~100x the
# measured difference, while any real error in the update (lr, momentum, 1/B, a dropped sample)
# moves the loss by 1e-4 or more and the weights by 1e-3 or more. Weights and logits absolute
# 1e-6 (~10x the measured, ~10 ulps of 1.0); logits also 1e-6 of the largest (~10 ulps of it: a
# LayerNorm after the activation, which divides by a sample's spread, carried the weights' 7e-8
# to 1.1e-6 on logits up to 1.5, torch's own fp32-fp64 gap of the weights 1e-7); the momentum
# (or Adam's state) 2e-6 of each tensor's largest element (WS_STATE_RTOL below: over 10 steps
# 1.6e-6 of buffers of 1.07 was measured). The wafer's losses are taken from run_report.json
# (final_loss, a double) of runs of 1, 2 and N steps, and between them from the N-step run's
# losses.csv, which rounds to 6 decimals: +-5e-7 more there.
LOSS1_RTOL, LOSS1_ATOL = 1e-5, 1e-6
LOSS_RTOL, LOSS_ATOL = 1e-5, 1e-6
WEIGHT_ATOL = 1e-6
LOGIT_ATOL, LOGIT_RTOL = 1e-6, 1e-6

failures = []


def check(shape, what, ok, detail):
    print(f"  {'PASS' if ok else 'FAIL'} {what}: {detail}")
    if not ok:
        failures.append(f"{shape}: {what}")
    return ok


def export(net, layers, opset, path, shape=None):
    """torch.onnx.export as scripts/make_model.py calls it (--loss none)."""
    net.eval()
    x = torch.zeros(1, *(shape or [layers[0]]))
    torch.onnx.export(net, (x,), path, input_names=["input"], output_names=["logits"],
                      dynamic_axes={"input": {0: "batch"}, "logits": {0: "batch"}},
                      opset_version=opset, do_constant_folding=True)


def check_weights(name, got, sd32, sd64, net):
    """The wafer's weights `got` against torch's fp32 run `sd32` (state dicts by name), with
    torch's own fp32-fp64 gap and how far training moved them from `net` in the message."""
    wd = {k: maxdiff(got[k], sd32[k]) for k in sd32}
    worst = max(wd, key=wd.get)
    ref = max(maxdiff(sd32[k], sd64[k]) for k in sd32)
    moved = max(maxdiff(sd32[k], net.state_dict()[k]) for k in sd32)
    check(name, "weights", wd[worst] <= WEIGHT_ATOL,
          f"max abs diff {wd[worst]:.2e} ({worst}; tol {WEIGHT_ATOL:g}); torch fp32-fp64 {ref:.2e}; "
          f"training moved them by up to {moved:.2e}")


def build_net(name, layers, act):
    """Case `name`'s network (make_model.py's), initialised from torch's current seed."""
    make_model.POST_ACT = POST_ACT.get(name)
    shape = CONV[name][1] if name in CONV else None
    if name in CONV:
        net = make_model.build_cnn(CONV[name][0], shape, layers, act)
    else:
        net = make_model.build(layers, act, RESIDUAL.get(name, False), "post" if name in LAYERNORM_POST else name in LAYERNORM,
                               BRANCH.get(name))
    return make_model.with_input_norm(net, shape or [layers[0]]) if name in INPUT_NORM else net


def make_case(workdir, name, layers, act, opset, seed):
    """A case's directory, its model (built and exported here) and B random samples with integer
    labels covering the classes (x.npy, y.npy there), and the generator that drew them."""
    d = os.path.join(workdir, name)
    os.makedirs(d, exist_ok=True)
    torch.manual_seed(seed)
    shape = CONV[name][1] if name in CONV else None
    net = build_net(name, layers, act)
    model_path = os.path.join(d, "model.onnx")
    export(net, layers, opset, model_path, shape)
    rng = np.random.default_rng(seed)
    # The samples flat (one row of features each, as the wafer's input); torch_train reshapes.
    x = rng.standard_normal((BATCH, int(np.prod(shape)) if shape else layers[0])).astype(np.float32)
    y = (np.arange(BATCH) % layers[-1]).astype(np.int64)
    rng.shuffle(y)
    np.save(os.path.join(d, "x.npy"), x)
    np.save(os.path.join(d, "y.npy"), y)
    return d, net, model_path, x, y, rng


def torch_train(net, x, y, lr, mu, steps, dtype, optimizer="sgd", shape=None):
    """Full-batch training with torch.optim.SGD(lr, momentum) or torch.optim.Adam(lr); returns the
    loss before each update, the model, the optimizer. `shape`: a CNN's C x H x W (x is flat)."""
    if shape:
        x = x.reshape(x.shape[0], *shape)
    net = copy.deepcopy(net).to(dtype)
    if optimizer == "adam":
        opt = torch.optim.Adam(net.parameters(), lr=lr)
    else:
        opt = torch.optim.SGD(net.parameters(), lr=lr, momentum=mu)
    xt, yt = torch.from_numpy(x).to(dtype), torch.from_numpy(y)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = F.cross_entropy(net(xt), yt)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses, net, opt


def run_onnx(model, x):
    """A small interpreter for the ops a Linear/activation export contains (numpy, float32)."""
    env = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    env[model.graph.input[0].name] = x
    for n in model.graph.node:
        a = {at.name: onnx.helper.get_attribute_value(at) for at in n.attribute}
        i = [env[v] for v in n.input if v]
        if n.op_type == "Gemm":
            A = i[0].T if a.get("transA", 0) else i[0]
            B = i[1].T if a.get("transB", 0) else i[1]
            out = np.float32(a.get("alpha", 1.0)) * (A @ B)
            if len(i) > 2:
                out = out + np.float32(a.get("beta", 1.0)) * i[2]
        elif n.op_type == "MatMul":
            out = i[0] @ i[1]
        elif n.op_type == "Add":
            out = i[0] + i[1]
        elif n.op_type == "Relu":
            out = np.maximum(i[0], np.float32(0))
        elif n.op_type == "LeakyRelu":
            out = np.where(i[0] > 0, i[0], i[0] * np.float32(a.get("alpha", 0.01)))
        elif n.op_type == "Tanh":
            out = np.tanh(i[0])
        elif n.op_type == "Sigmoid":
            out = np.float32(1) / (np.float32(1) + np.exp(-i[0]))
        elif n.op_type == "Flatten":
            ax = a.get("axis", 1)
            out = i[0].reshape(int(np.prod(i[0].shape[:ax])), -1)
        elif n.op_type == "Identity":
            out = i[0]
        elif n.op_type == "Constant":
            out = numpy_helper.to_array(a["value"])
        elif n.op_type == "Mul":
            out = i[0] * i[1]
        elif n.op_type == "Div":
            out = i[0] / i[1]
        elif n.op_type == "Pow":
            out = np.power(i[0], i[1])
        elif n.op_type == "Sub":
            out = i[0] - i[1]
        elif n.op_type == "Sqrt":
            out = np.sqrt(i[0])
        elif n.op_type == "ReduceMean":
            out = np.mean(i[0], axis=tuple(a.get("axes", [-1])), keepdims=bool(a.get("keepdims", 1)))
        elif n.op_type == "LayerNormalization":
            mu = np.mean(i[0], axis=-1, keepdims=True)
            var = np.mean((i[0] - mu) ** 2, axis=-1, keepdims=True)
            out = (i[0] - mu) / np.sqrt(var + np.float32(a.get("epsilon", 1e-5))) * i[1] + i[2]
        elif n.op_type == "Erf":
            out = np.vectorize(math.erf, otypes=[np.float64])(i[0])
        elif n.op_type == "Abs":
            out = np.abs(i[0])
        elif n.op_type == "Elu":
            al = np.float64(a.get("alpha", 1.0))
            out = np.where(i[0] > 0, i[0], al * np.expm1(i[0].astype(np.float64)))
        elif n.op_type == "Selu":
            al, ga = np.float64(a.get("alpha", 1.67326319217681884765625)), np.float64(a.get("gamma", 1.05070102214813232421875))
            out = ga * np.where(i[0] > 0, i[0], al * np.expm1(i[0].astype(np.float64)))
        elif n.op_type == "Softplus":
            out = np.logaddexp(0, i[0].astype(np.float64))
        elif n.op_type == "Softsign":
            out = i[0] / (np.float32(1) + np.abs(i[0]))
        elif n.op_type == "HardSigmoid":
            out = np.clip(np.float64(a.get("alpha", 0.2)) * i[0] + np.float64(a.get("beta", 0.5)), 0, 1)
        elif n.op_type == "HardSwish":
            out = i[0] * np.clip(i[0] / np.float64(6) + np.float64(0.5), 0, 1)
        elif n.op_type == "Clip":
            lo = i[1] if len(n.input) > 1 and n.input[1] else -np.inf
            hi = i[2] if len(n.input) > 2 and n.input[2] else np.inf
            out = np.clip(i[0], lo, hi)
        else:
            raise RuntimeError(f"run_onnx: op {n.op_type} is not interpreted")
        env[n.output[0]] = out.astype(np.float32)
    return env[model.graph.output[0].name]


def maxdiff(a, b):
    return float(np.max(np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64))))


def wafer_train(wafersim, d, out_name, args):
    """Runs `wafersim train ARGS -o D/OUT_NAME`; returns its run_report.json, or None on failure."""
    out = os.path.join(d, out_name)
    shutil.rmtree(out, ignore_errors=True)
    cmd = [wafersim, "train"] + args + ["-o", out]
    env = dict(os.environ, SYSTEMC_DISABLE_COPYRIGHT_MESSAGE="1")
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    log = os.path.join(d, out_name + ".log")
    with open(log, "w") as f:
        f.write(" ".join(cmd) + "\n" + r.stdout)
    if r.returncode != 0:
        check(os.path.basename(d), "wafersim train", False, f"exit {r.returncode}: {' '.join(cmd)} (log {log})")
        print("\n".join("    | " + s for s in r.stdout.splitlines()[-15:]))
        return None
    with open(os.path.join(out, "run_report.json")) as f:
        return json.load(f)


def test_shape(wafersim, workdir, shape):
    name, layers, act, opset, seed, lr, mu = shape
    print(f"{name}: layers {','.join(map(str, layers))} {act} opset {opset}, batch {BATCH}, "
          f"{STEPS} steps, lr {lr} momentum {mu}")
    # 1. The model, built and exported here; 2. B random samples, integer labels covering the classes.
    d, net, model_path, x, y, rng = make_case(workdir, name, layers, act, opset, seed)

    # 3. The wafer: the N-step run, and runs of 1 and 2 steps whose run_report.json carries the
    # last step's mean loss in full precision (losses.csv rounds to 6 decimals).
    common = ["--data.source", "npy", "--data.train_x", os.path.join(d, "x.npy"),
              "--data.train_y", os.path.join(d, "y.npy"),
              "--data.scale", "1", "--data.mean", "0", "--data.std", "1",
              "--train.batch", str(BATCH), "--train.lr", repr(lr), "--train.momentum", repr(mu),
              "--train.eval", "0", "--sim.seed", str(SIM_SEED),
              "--fabric.width", "32", "--fabric.height", "32", "--io.spacing", "8",
              "--compile.replicas", str(REPLICAS.get(name, 1)), "--mode", "layer-pipelined"]
    t0 = time.monotonic()
    runs = {}
    for k in AT:
        runs[k] = wafer_train(wafersim, d, f"out{k}", [model_path, "--train.steps", str(k)] + common)
        if runs[k] is None:
            return
    out = os.path.join(d, f"out{STEPS}")
    rows = np.loadtxt(os.path.join(out, "losses.csv"), delimiter=",", skiprows=1, ndmin=2)
    if not check(name, "wafersim train", len(rows) == STEPS and list(rows[:, 0]) == list(range(1, STEPS + 1))
                 and runs[STEPS].get("mode") == "layer-pipelined",
                 f"runs of {', '.join(map(str, AT))} steps in {time.monotonic() - t0:.2f} s, "
                 f"{len(rows)} rows in {out}/losses.csv, mode {runs[STEPS].get('mode')}"):
        return
    # Full precision where a run ends, the N-step run's 6 decimals between (within 5e-7 more).
    wafer_losses = [runs[k]["final_loss"] if k in runs else float(rows[k - 1, 1]) for k in range(1, STEPS + 1)]
    rounded = [0.0 if k in runs else 5e-7 for k in range(1, STEPS + 1)]
    # The runs are deterministic: step k of the N-step run is step k of the k-step run.
    csv_off = max(abs(rows[k - 1, 1] - runs[k]["final_loss"]) for k in AT)
    check(name, "losses.csv", csv_off <= 5.01e-7,
          f"the {STEPS}-step run's rows are the {', '.join(map(str, AT))}-step runs' losses to 6 decimals (max off {csv_off:.1e})")

    # 4. PyTorch, float32 (the comparison) and float64 (the rounding scale).
    shape = CONV[name][1] if name in CONV else None
    t_losses, t_net, t_opt = torch_train(net, x, y, lr, mu, STEPS, torch.float32, shape=shape)
    d_losses, d_net, d_opt = torch_train(net, x, y, lr, mu, STEPS, torch.float64, shape=shape)

    # 5. Losses.
    w1, t1 = wafer_losses[0], t_losses[0]
    check(name, "loss1", abs(w1 - t1) <= LOSS1_ATOL + LOSS1_RTOL * abs(t1),
          f"wafer {w1:.8f} torch {t1:.8f}: abs {abs(w1 - t1):.2e} rel {abs(w1 - t1) / abs(t1):.2e} "
          f"(tol abs {LOSS1_ATOL:g} + rel {LOSS1_RTOL:g}; torch fp32-fp64 {abs(t1 - d_losses[0]):.2e})")
    rel = [abs(w - t) / abs(t) for w, t in zip(wafer_losses, t_losses)]
    ok = all(abs(w - t) <= LOSS_ATOL + LOSS_RTOL * abs(t) + r for w, t, r in zip(wafer_losses, t_losses, rounded))
    check(name, "losses", ok,
          "wafer " + " ".join(f"{v:.7f}" for v in wafer_losses) + " | torch " +
          " ".join(f"{v:.7f}" for v in t_losses) + f" | max rel {max(rel):.2e} at step "
          f"{int(np.argmax(rel)) + 1} (tol abs {LOSS_ATOL:g} + rel {LOSS_RTOL:g}; torch fp32-fp64 max rel "
          f"{max(abs(a - b) / abs(b) for a, b in zip(t_losses, d_losses)):.2e})")

    # 6. The checkpoint.
    ck = onnx.load(os.path.join(out, "checkpoint.onnx"))
    try:
        onnx.checker.check_model(ck)
        err = ""
    except onnx.checker.ValidationError as e:
        err = str(e).splitlines()[0]
    meta = {p.key: p.value for p in ck.metadata_props}
    check(name, "onnx", not err and meta.get("wafersim.step") == str(STEPS)
          and meta.get("wafersim.batch") == str(BATCH) and meta.get("wafersim.seed") == str(SIM_SEED),
          f"check_model {'passes' if not err else 'fails: ' + err}; metadata step "
          f"{meta.get('wafersim.step')} batch {meta.get('wafersim.batch')} seed {meta.get('wafersim.seed')}")
    inits = {t.name: numpy_helper.to_array(t) for t in ck.graph.initializer}
    sd32, sd64 = t_net.state_dict(), d_net.state_dict()
    missing = [k for k in sd32 if k not in inits or k + ".momentum" not in inits]
    reshaped = [k for k in sd32 if k in inits and tuple(inits[k].shape) != tuple(sd32[k].shape)]
    if not check(name, "initializers", not missing and not reshaped,
                 f"{len(sd32)} parameters and their .momentum, missing {missing or 'none'}, "
                 f"shape changed {reshaped or 'none'}"):
        return
    loaded = {k: torch.from_numpy(inits[k].copy()).reshape(sd32[k].shape) for k in sd32}
    check_weights(name, loaded, sd32, sd64, net)

    # Momentum: torch keeps v_N = mu v_{N-1} + g_N per parameter. The wafer keeps V already scaled
    # for the next minibatch (V = mu v_N, to which the next gradients add; docs/training.md), and
    # the checkpoint stores that: NAME.momentum = momentum * torch's momentum_buffer.
    # Relative to each tensor's largest element, as weight streaming's optimizer state (10 steps
    # compound the rounding: 1.6e-6 absolute on buffers of 1.07 was measured).
    params, params64 = dict(t_net.named_parameters()), dict(d_net.named_parameters())
    md, gap = {}, {}
    for k, p in params.items():
        buf = mu * t_opt.state[p]["momentum_buffer"].detach().numpy()
        v = inits[k + ".momentum"].reshape(buf.shape)
        scale = max(float(np.abs(buf).max()), 1e-30)
        md[k] = maxdiff(v, buf) / scale
        gap[k] = maxdiff(buf, mu * d_opt.state[params64[k]]["momentum_buffer"].detach().numpy()) / scale
    worst = max(md, key=lambda k: md[k] / state_tol(gap[k]))
    vmax = max(float(t_opt.state[p]["momentum_buffer"].abs().max()) for p in params.values())
    check(name, "momentum", all(md[k] <= state_tol(gap[k]) for k in md),
          f"max diff against momentum * momentum_buffer {md[worst]:.2e} of the tensor's largest element ({worst}; "
          f"tol {state_tol(gap[worst]):.1e}: {WS_STATE_RTOL:g}, or {STATE_GAP_FACTOR:g} x torch's fp32-fp64 {gap[worst]:.1e}; "
          f"buffers up to {vmax:.2e})")

    # Resume: the momentum convention only has to agree with what --resume reads back. Two steps,
    # then --resume for the rest, must give the N-step run's checkpoint bit for bit.
    half = AT[1]
    rr = wafer_train(wafersim, d, "resumed",
                     ["--resume", os.path.join(d, f"out{half}", "checkpoint.onnx"),
                      "--train.steps", str(STEPS - half)] + common)
    if rr is not None:
        rk = {t.name: numpy_helper.to_array(t) for t in
              onnx.load(os.path.join(d, "resumed", "checkpoint.onnx")).graph.initializer}
        same = rk.keys() == inits.keys() and all(np.array_equal(rk[k], inits[k]) for k in inits)
        diff = max(maxdiff(rk[k], inits[k]) for k in inits) if rk.keys() == inits.keys() else float("inf")
        check(name, "resume", same and rr["final_loss"] == runs[STEPS]["final_loss"],
              f"{half} steps + --resume {STEPS - half} steps vs {STEPS} steps: weights and momentum max "
              f"abs diff {diff:.1e}, final loss {rr['final_loss']:.9f} vs {runs[STEPS]['final_loss']:.9f}")

    # Logits: the checkpoint (numpy interpreter of its graph, and torch with its weights) against
    # PyTorch's trained model, on the training samples and fresh inputs.
    # (A CNN's checkpoint graph is not interpreted here: its weights go into torch.)
    xs = np.concatenate([x, rng.standard_normal((4, x.shape[1])).astype(np.float32)])
    xin = torch.from_numpy(xs.reshape(xs.shape[0], *shape) if shape else xs)
    with torch.no_grad():
        want = t_net(xin).numpy()
        ck_net = build_net(name, layers, act)
        ck_net.load_state_dict(loaded)
        via_torch = ck_net(xin).numpy()
    a = maxdiff(run_onnx(ck, xs), want) if not shape else 0.0
    b = maxdiff(via_torch, want)
    tol = LOGIT_ATOL + LOGIT_RTOL * float(np.abs(want).max())
    check(name, "logits", a <= tol and b <= tol,
          f"{len(xs)} inputs: " + (f"checkpoint graph (numpy) vs torch {a:.2e}, " if not shape else "") +
          f"checkpoint weights in torch vs torch {b:.2e} (tol {tol:.2e}: abs {LOGIT_ATOL:g} + rel {LOGIT_RTOL:g}; "
          f"logits up to {float(np.abs(want).max()):.2f})")


def test_ws_case(wafersim, workdir, case):
    name, layers, act, opset, seed, optimizer, lr, mu, *extra = case
    extra = extra[0] if extra else []
    print(f"{name}: weight streaming on {WS_SYSTEMS} systems, "
          + (f"conv {CONV[name][0]} on {'x'.join(map(str, CONV[name][1]))}, " if name in CONV else "")
          + f"layers {','.join(map(str, layers))} {act} "
          f"opset {opset}, batch {BATCH}, {CNN_STEPS if name in CONV else WS_STEPS} steps, {optimizer} lr {lr}"
          + (f" momentum {mu}" if optimizer == "sgd" else ""))
    d, net, model_path, x, y, rng = make_case(workdir, name, layers, act, opset, seed)

    # The wafers: runs of 1..N steps (each run_report.json has its last loss in full precision).
    common = ["--mode", "weight-streaming", "--systems", str(WS_SYSTEMS),
              "--data.source", "npy", "--data.train_x", os.path.join(d, "x.npy"),
              "--data.train_y", os.path.join(d, "y.npy"),
              "--data.scale", "1", "--data.mean", "0", "--data.std", "1",
              "--train.batch", str(BATCH), "--train.lr", repr(lr), "--memoryx.optimizer", optimizer,
              "--train.eval", "0", "--sim.seed", str(SIM_SEED),
              "--fabric.width", "32", "--fabric.height", "32", "--io.spacing", "8"]
    if optimizer == "sgd":
        common += ["--train.momentum", repr(mu)]
    common += extra
    t0 = time.monotonic()
    runs = {}
    shape = CONV[name][1] if name in CONV else None
    steps = CNN_STEPS if shape else WS_STEPS
    at = [1, 2, steps]
    for k in at:
        runs[k] = wafer_train(wafersim, d, f"out{k}", [model_path, "--train.steps", str(k)] + common)
        if runs[k] is None:
            return
    out = os.path.join(d, f"out{steps}")
    rep = runs[steps]
    check(name, "wafersim train", rep.get("mode") == "weight-streaming" and rep.get("systems") == WS_SYSTEMS
          and rep.get("steps") == steps,
          f"runs of {', '.join(map(str, at))} steps in {time.monotonic() - t0:.2f} s; the report says mode "
          f"{rep.get('mode')}, {rep.get('systems')} systems, {rep.get('steps')} steps")
    wafer_losses = [runs[k]["final_loss"] for k in at]

    t_losses, t_net, t_opt = torch_train(net, x, y, lr, mu, steps, torch.float32, optimizer, shape)
    d_losses, d_net, d_opt = torch_train(net, x, y, lr, mu, steps, torch.float64, optimizer, shape)
    t_losses = [t_losses[k - 1] for k in at]
    d_losses = [d_losses[k - 1] for k in at]
    w1, t1 = wafer_losses[0], t_losses[0]
    check(name, "loss1", abs(w1 - t1) <= LOSS1_ATOL + LOSS1_RTOL * abs(t1),
          f"wafer {w1:.8f} torch {t1:.8f}: abs {abs(w1 - t1):.2e} (tol abs {LOSS1_ATOL:g} + rel {LOSS1_RTOL:g}; "
          f"torch fp32-fp64 {abs(t1 - d_losses[0]):.2e})")
    rel = [abs(w - t) / abs(t) for w, t in zip(wafer_losses, t_losses)]
    check(name, "losses", all(abs(w - t) <= LOSS_ATOL + LOSS_RTOL * abs(t) for w, t in zip(wafer_losses, t_losses)),
          "wafer " + " ".join(f"{v:.7f}" for v in wafer_losses) + " | torch " +
          " ".join(f"{v:.7f}" for v in t_losses) + f" | max rel {max(rel):.2e} (tol abs {LOSS_ATOL:g} + rel "
          f"{LOSS_RTOL:g}; torch fp32-fp64 max rel {max(abs(a - b) / abs(b) for a, b in zip(t_losses, d_losses)):.2e})")

    ck = onnx.load(os.path.join(out, "checkpoint.onnx"))
    meta = {p.key: p.value for p in ck.metadata_props}
    check(name, "onnx", meta.get("wafersim.mode") == "weight-streaming"
          and meta.get("wafersim.step") == str(steps) and meta.get("wafersim.optimizer") == optimizer and meta.get("wafersim.batch") == str(BATCH),
          f"metadata mode {meta.get('wafersim.mode')} step {meta.get('wafersim.step')} optimizer "
          f"{meta.get('wafersim.optimizer')} batch {meta.get('wafersim.batch')}")
    inits = {t.name: numpy_helper.to_array(t) for t in ck.graph.initializer}
    sd32, sd64 = t_net.state_dict(), d_net.state_dict()
    state_names = ["exp_avg", "exp_avg_sq"] if optimizer == "adam" else ["momentum_buffer"]
    missing = [k for k in sd32 if k not in inits] + \
              [f"{k}.{s}" for k in sd32 for s in state_names if f"{k}.{s}" not in inits]
    if not check(name, "initializers", not missing,
                 f"{len(sd32)} parameters and their {', '.join(state_names)}, missing {missing or 'none'}"):
        return
    check_weights(name, {k: inits[k].reshape(sd32[k].shape) for k in sd32}, sd32, sd64, net)
    # The optimizer state as PyTorch keeps it, in the weight's layout (flattened), relative to each
    # tensor's largest element: Adam's exp_avg_sq is the square of gradients (1e-5 here), where
    # an absolute tolerance would pass anything.
    params, params64 = dict(t_net.named_parameters()), dict(d_net.named_parameters())
    sd, gap = {}, {}
    for k, p in params.items():
        for s in state_names:
            buf = t_opt.state[p][s].detach().numpy()
            scale = max(float(np.abs(buf).max()), 1e-30)
            sd[f"{k}.{s}"] = maxdiff(inits[f"{k}.{s}"].reshape(buf.shape), buf) / scale
            gap[f"{k}.{s}"] = maxdiff(buf, d_opt.state[params64[k]][s].detach().numpy()) / scale
    worst = max(sd, key=lambda k: sd[k] / state_tol(gap[k]))
    check(name, "optimizer state", all(sd[k] <= state_tol(gap[k]) for k in sd),
          f"max diff against torch's {', '.join(state_names)} {sd[worst]:.2e} of the tensor's largest element "
          f"({worst}; tol {state_tol(gap[worst]):.1e}: {WS_STATE_RTOL:g}, or {STATE_GAP_FACTOR:g} x torch's fp32-fp64 {gap[worst]:.1e})")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--wafersim", required=True, help="path to the wafersim binary")
    ap.add_argument("--workdir", default="/tmp/torch_roundtrip", help="models, data and runs go here")
    ap.add_argument("--mode", choices=["layer-pipelined", "weight-streaming"], default="layer-pipelined",
                    help="the shapes trained in layer-pipelined mode, or the weight-streaming cases")
    ap.add_argument("--only", action="append", metavar="NAME", help="run only this shape or case (repeatable)")
    a = ap.parse_args()
    if not os.access(a.wafersim, os.X_OK):
        ap.error(f"--wafersim {a.wafersim} is not an executable")
    os.makedirs(a.workdir, exist_ok=True)
    torch.set_num_threads(1)
    t0 = time.monotonic()
    ws = a.mode == "weight-streaming"
    cases = [s for s in (WS_CASES if ws else SHAPES) if not a.only or s[0] in a.only]
    if a.only and len(cases) != len(set(a.only)):
        ap.error(f"--only: no such {'case' if ws else 'shape'} among {', '.join(s[0] for s in (WS_CASES if ws else SHAPES))}")
    for s in cases:
        (test_ws_case if ws else test_shape)(os.path.abspath(a.wafersim), a.workdir, s)
    secs = time.monotonic() - t0
    if failures:
        print(f"FAIL: {len(failures)} check(s) failed in {secs:.1f} s: " + ", ".join(failures))
        return 1
    print(f"PASS: {len(cases)} {'cases' if ws else 'shapes'} in {secs:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
