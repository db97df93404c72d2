#!/usr/bin/python3
"""PyTorch's side of bench/train_step: the same training step as ringflow's, timed the same
way. Run with Debian's python3-torch (what bench/train_step launches, once as installed and
once with GLIBC_TUNABLES=glibc.malloc.mmap_max=0:glibc.malloc.trim_threshold=68719476736):
    /usr/bin/python3 bench/torch_reference.py --model vgg11_cifar --batch 256 --threads 2 --json

Models: tests/fixtures/torch_models.py (the definitions ringflow's models are checked
against). Step: forward (model + cross_entropy), backward, SGD (lr 0.01, momentum 0.9,
weight decay 5e-4) step + zero_grad(set_to_none=True), as ringflow's zero_grad; synthetic
normal input and random labels made once; PyTorch's default NCHW layout, or channels_last
for the model and the input (--memory-format channels_last). Times are medians
(ms) over --steps after --warmup. On a GPU (--device cuda) each phase ends with a device
synchronisation, as in ringflow's; --tf32 sets both cuBLAS's and cuDNN's TF32 switches
(otherwise both are off), and cudnn.benchmark is on. --precision bf16 (fp16) runs forward and
the loss under torch.autocast to bfloat16 (float16; with a GradScaler), backward outside it,
as ringflow's --precision.

--serve answers runs read from standard input, one per line in the flags above (--json
implied), with one JSON line each ({"error": ...} for a run that failed): bench/train_step
keeps one such process for a whole GPU run, so that its start (the imports, CUDA's context,
cuDNN's and cuBLAS's libraries) is paid once, not per run. Each answer says where its seconds
went; the first also gives the imports' (start_s, from the script's first line).
"""
import time

STARTED = time.perf_counter()  # the imports below are the first answer's start_s
import argparse  # noqa: E402 (and the imports below)
import gc
import json
import os
import shlex
import statistics
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests",
                                "fixtures"))
from torch_models import BasicBlock, CifarResNet, CifarVGG, SmallCnn  # noqa: E402

IMPORTED = time.perf_counter()

def torchvision_resnet50():
    import torchvision  # not in Debian's python3-torch; there on the GPU machines
    return torchvision.models.resnet50()


MODELS = {
    "vgg11_cifar": (lambda: CifarVGG("VGG11"), (3, 32, 32)),
    "resnet50": (torchvision_resnet50, (3, 224, 224)),
    "resnet18_cifar": (lambda: CifarResNet(BasicBlock, [2, 2, 2, 2]), (3, 32, 32)),
    "small_cnn": (SmallCnn, (1, 28, 28)),
}


def parser(add_help=True):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0], add_help=add_help)
    ap.add_argument("--model", choices=sorted(MODELS), help="required but with --serve")
    ap.add_argument("--batch", type=int, help="required but with --serve")
    ap.add_argument("--threads", type=int, default=0, help="0: PyTorch's default")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--json", action="store_true", help="one JSON object")
    ap.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N")
    ap.add_argument("--precision", default="fp32", choices=["fp32", "bf16", "fp16"],
                    help="bf16/fp16: forward and loss under torch.autocast to that dtype; fp16 "
                         "with torch.amp.GradScaler")
    ap.add_argument("--memory-format", default="contiguous", choices=["contiguous", "channels_last"],
                    help="the model's and the input's (torch.channels_last: NHWC activations)")
    ap.add_argument("--tf32", action="store_true",
                    help="CUDA: f32 matmuls and convolutions on TF32 tensor cores")
    ap.add_argument("--serve", action="store_true",
                    help="answer the runs given on standard input, one per line (see above)")
    return ap


def parse(ap, argv):
    """A run's flags; exits (SystemExit) saying why where they are wrong."""
    args = ap.parse_args(argv)
    if not args.serve and (args.model is None or args.batch is None):
        ap.error("--model and --batch are required (or --serve)")
    return args


def run(args):
    """One run's medians (and where its seconds went) as a dict."""
    begin = time.perf_counter()
    device = torch.device(args.device)
    if device.type == "cuda":
        # Explicit both ways: cuDNN's TF32 is on by default in PyTorch, cuBLAS's off.
        torch.backends.cuda.matmul.allow_tf32 = args.tf32
        torch.backends.cudnn.allow_tf32 = args.tf32
        torch.backends.cudnn.benchmark = True  # as ringflow: each shape's algorithm measured once

    def now():
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        return time.perf_counter()

    if args.threads > 0:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    make, shape = MODELS[args.model]
    layout = torch.channels_last if args.memory_format == "channels_last" else torch.contiguous_format
    model = make().to(device, memory_format=layout)
    model.train()
    x = torch.randn(args.batch, *shape).to(device).contiguous(memory_format=layout)
    y = torch.randint(0, 10, (args.batch,)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=5e-4)
    low = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(args.precision)
    scaler = None
    if args.precision == "fp16":  # torch.amp.GradScaler from 2.3 on; torch.cuda.amp's before
        scaler = (torch.amp.GradScaler(device.type) if hasattr(torch.amp, "GradScaler")
                  else torch.cuda.amp.GradScaler())

    fwd, bwd, optim, step = [], [], [], []
    made = now()
    timed = made
    for i in range(args.warmup + args.steps):
        if i == args.warmup:
            timed = now()
        t0 = now()
        with torch.autocast(device.type, dtype=low or torch.bfloat16, enabled=low is not None):
            loss = F.cross_entropy(model(x), y)
        t1 = now()
        (scaler.scale(loss) if scaler else loss).backward()
        t2 = now()
        if scaler:
            scaler.step(opt)
            scaler.update()
        else:
            opt.step()
        opt.zero_grad(set_to_none=True)
        t3 = now()
        del loss
        if i >= args.warmup:
            fwd.append((t1 - t0) * 1e3)
            bwd.append((t2 - t1) * 1e3)
            optim.append((t3 - t2) * 1e3)
            step.append((t3 - t0) * 1e3)

    med = statistics.median_high  # the upper middle, as ringflow's median of an even count
    out = {"model": args.model, "batch": args.batch, "threads": torch.get_num_threads(),
           "device": str(device), "tf32": args.tf32, "precision": args.precision,
           "memory_format": args.memory_format,
           "torch": torch.__version__, "glibc_tunables": os.environ.get("GLIBC_TUNABLES", ""),
           "forward_ms": med(fwd), "backward_ms": med(bwd), "optimizer_ms": med(optim),
           "step_ms": med(step), "images_per_s": args.batch / (med(step) / 1e3),
           # Seconds: the model and data made (and CUDA's context, in a process's first run), the
           # warm-up steps (cudnn.benchmark's searches), the timed steps.
           "setup_s": made - begin, "warmup_s": timed - made, "timed_s": now() - timed}
    return out


def release(device):
    """The memory of the run before goes back to the device, as it would with a process each."""
    gc.collect()
    if device.startswith("cuda") and torch.cuda.is_available():
        torch.cuda.empty_cache()


def serve():
    ap = parser(add_help=False)  # a request's --help would print into the answers
    first = True
    for line in sys.stdin:
        if not line.strip():
            continue
        args = None
        try:
            args = parse(ap, shlex.split(line))
            if args.serve:
                ap.error("--serve in a request")
            out = run(args)
        except SystemExit:  # argparse said why on stderr
            out = {"error": f"bad request: {line.strip()}"}
        except Exception as e:  # noqa: BLE001 - the caller gets the reason, the server goes on
            out = {"error": f"{type(e).__name__}: {e}"}
        if first:
            out["start_s"] = IMPORTED - STARTED
            first = False
        print(json.dumps(out), flush=True)
        release(args.device if args else "cpu")


def main():
    ap = parser()
    args = parse(ap, sys.argv[1:])
    if args.serve:
        serve()
        return
    out = run(args)
    if args.json:
        print(json.dumps(out))
    else:
        print(f"{args.model} batch {args.batch}, {out['threads']} threads: forward "
              f"{out['forward_ms']:.1f} ms, backward {out['backward_ms']:.1f} ms, optimizer "
              f"{out['optimizer_ms']:.1f} ms, step {out['step_ms']:.1f} ms "
              f"({out['images_per_s']:.0f} images/s)")


if __name__ == "__main__":
    main()
