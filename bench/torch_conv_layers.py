#!/usr/bin/python3
"""PyTorch's side of bench/kernels --device cuda: the convolution layers of a model, each timed
alone in forward, backward-data and backward-weights. Run with /usr/bin/python3 (what
bench/kernels launches):
    /usr/bin/python3 bench/torch_conv_layers.py --model resnet50 --list
    /usr/bin/python3 bench/torch_conv_layers.py --model resnet18_cifar --batch 256 --dtype bf16 \\
        --memory-format nhwc --device cuda

The layers are found as ringflow's are (bench/conv_layers.h): one forward pass at batch 1 on
the CPU in eval mode, a hook on every nn.Conv2d noting its input, weight, stride, padding,
dilation and bias; the models are bench/torch_reference.py's. --list prints them (one JSON
object per layer, in call order, N = --batch) and stops. Otherwise each distinct shape is
timed on the device with cudnn.benchmark on (TF32 only with --tf32, for cuDNN and cuBLAS):
forward is F.conv2d with the weight and bias requiring grad, as in training; backward-data
and backward-weights are aten.convolution_backward with the output mask of each (the call
autograd makes, bias gradient included with the weights'). Operands are in --dtype and
laid out NCHW or channels_last (--memory-format nhwc: input, weight and gradients). Times
are the median over --repeat calls after --warmup, each call between two device
synchronisations, as bench/kernels times ringflow's and raw cuDNN's. One JSON object per
distinct layer: its shape fields, "count" (layers sharing it) and forward_ms,
backward_data_ms, backward_weights_ms.
"""
import argparse
import json
import os
import statistics
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_reference import MODELS  # noqa: E402

DTYPES = {"f32": torch.float32, "fp32": torch.float32, "bf16": torch.bfloat16,
          "f16": torch.float16, "fp16": torch.float16}


def conv_layers(model_name, batch):
    """Every nn.Conv2d call of one forward pass, in call order, with N = batch."""
    make, shape = MODELS[model_name]
    torch.manual_seed(0)
    model = make().eval()
    layers = []

    def note(module, inputs, output):
        x = inputs[0]
        layers.append({"x": [batch, *x.shape[1:]], "w": list(module.weight.shape),
                       "y": [batch, *output.shape[1:]], "stride": list(module.stride),
                       "padding": list(module.padding), "dilation": list(module.dilation),
                       "groups": module.groups, "bias": module.bias is not None})

    hooks = [m.register_forward_hook(note) for m in model.modules() if isinstance(m, nn.Conv2d)]
    with torch.no_grad():
        model(torch.zeros(1, *shape))
    for h in hooks:
        h.remove()
    return layers


def distinct(layers):
    out = []
    for layer in layers:
        same = next((o for o in out if all(o[k] == layer[k] for k in layer)), None)
        if same:
            same["count"] += 1
        else:
            out.append(dict(layer, count=1))
    return out


def median_ms(fn, device, warmup, repeat):
    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeat):
        sync()
        t0 = time.perf_counter()
        fn()
        sync()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median_high(times)  # the upper middle, as ringflow's median


def time_layer(layer, dtype, layout, device, warmup, repeat):
    gen = torch.Generator(device=device).manual_seed(1)

    def rand(shape, grad=False):
        t = torch.randn(*shape, generator=gen, device=device, dtype=torch.float32).to(dtype)
        return t.contiguous(memory_format=layout).requires_grad_(grad)

    x, dy = rand(layer["x"]), rand(layer["y"])
    w = rand(layer["w"], grad=True)
    b = torch.randn(layer["w"][0], generator=gen, device=device).to(dtype).requires_grad_() \
        if layer["bias"] else None
    conv = dict(stride=layer["stride"], padding=layer["padding"], dilation=layer["dilation"])
    bias_sizes = [layer["w"][0]] if layer["bias"] else None

    def backward(mask):
        return torch.ops.aten.convolution_backward(
            dy, x, w.detach(), bias_sizes, layer["stride"], layer["padding"], layer["dilation"],
            False, [0, 0], layer["groups"], mask)

    return {"forward_ms": median_ms(lambda: F.conv2d(x, w, b, **conv), device, warmup, repeat),
            "backward_data_ms": median_ms(lambda: backward([True, False, False]), device, warmup,
                                          repeat),
            "backward_weights_ms": median_ms(lambda: backward([False, True, layer["bias"]]),
                                             device, warmup, repeat)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True, choices=sorted(MODELS))
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--list", action="store_true", help="print the layers, time nothing")
    ap.add_argument("--dtype", default="bf16", choices=sorted(DTYPES))
    ap.add_argument("--memory-format", default="nhwc", choices=["nchw", "nhwc"])
    ap.add_argument("--tf32", action="store_true", help="f32 convolutions on TF32 tensor cores")
    ap.add_argument("--device", default="cuda", help="cuda, cuda:N (cpu: the same calls, for a check)")
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=10)
    args = ap.parse_args()

    layers = conv_layers(args.model, args.batch)
    if args.list:
        for layer in layers:
            print(json.dumps(layer))
        return
    device = torch.device(args.device)
    if device.type == "cuda":
        torch.backends.cudnn.benchmark = True  # as ringflow: each shape's algorithm measured once
        torch.backends.cudnn.allow_tf32 = args.tf32
        torch.backends.cuda.matmul.allow_tf32 = args.tf32
    layout = torch.channels_last if args.memory_format == "nhwc" else torch.contiguous_format
    for layer in distinct(layers):
        times = time_layer(layer, DTYPES[args.dtype], layout, device, args.warmup, args.repeat)
        print(json.dumps(dict(layer, **times, torch=torch.__version__)), flush=True)


if __name__ == "__main__":
    main()
