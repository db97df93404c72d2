#!/usr/bin/env python3
"""apps/train against PyTorch and torchvision (issue 33), with weights made here from a fixed
seed (a torchvision ResNet-18's state_dict is 45 MB: made at test time, never committed):

  * --weights + --evaluate + --label-smoothing: a PyTorch SmallCnn's state_dict (BatchNorm
    statistics set away from their defaults) evaluated by train on a small Fashion-MNIST-format
    data set this script writes gives PyTorch's loss (nn.CrossEntropyLoss(label_smoothing))
    and accuracy;
  * --optimizer sgd|adam|adamw, --weight-decay, --clip-grad-norm, --label-smoothing: three
    full-batch epochs (one step each, so that the loader's order cannot matter) from the same
    weights give, epoch by epoch, the training loss of the same steps in PyTorch
    (torch.optim.SGD / Adam / AdamW, torch.nn.utils.clip_grad_norm_); --export-weights
    writes a state_dict that PyTorch's load_state_dict(strict=True) takes, whose tensors are
    PyTorch's after those steps, and whose test loss in PyTorch is the one train printed.
    Adam's cases train the mlp: the small CNN's convolution biases feed BatchNorm, so their
    gradients are rounding noise, which Adam scales up to whole steps of random sign;
  * torchvision: resnet18's state_dict is refused by --model resnet18_cifar with every
    missing, unexpected and mis-shaped tensor listed; without bn1.bias, resnet18 names it;
    whole, resnet18 takes it, and after one step with lr 1e-30 exports a state_dict that
    torchvision's resnet18 loads strictly, with the same parameters and num_batches_tracked
    one higher.

usage: torch_weights_test.py TRAIN
Exits 77 (skipped) where python3-torch or python3-torchvision is missing."""
import gzip
import json
import os
import struct
import subprocess
import sys
import tempfile

try:
    import torch
    import torch.nn.functional as F
    import torchvision
except ImportError as e:
    print(f"SKIP: {e} (Debian's python3-torch and python3-torchvision run this test)")
    sys.exit(77)

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures"))
from safetensors_io import read_safetensors, write_safetensors  # noqa: E402
from torch_models import Mlp, SmallCnn  # noqa: E402

train = sys.argv[1]
failures = []
MEAN, STD = 0.2860, 0.3530  # train's Fashion-MNIST normalisation (apps/setup.cpp)


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what)
    if not ok:
        failures.append(what)


def run(*args):
    r = subprocess.run([train, "--threads", "1", *args], capture_output=True, text=True)
    return r.returncode, r.stdout + r.stderr


def records(path, kind):
    with open(path) as f:
        return [j for j in map(json.loads, f) if j["type"] == kind]


def write_idx(path, tensor):
    """An IDX file of uint8 (gzip, as Debian's Fashion-MNIST)."""
    dims = list(tensor.shape)
    with gzip.open(path, "wb") as f:
        f.write(struct.pack(">BBBB", 0, 0, 8, len(dims)))
        f.write(struct.pack(f">{len(dims)}I", *dims))
        f.write(tensor.to(torch.uint8).numpy().tobytes())


def write_data(folder, gen):
    """32 training and 50 test images of random pixels and labels; returns them normalised."""
    sets = {}
    for prefix, n in (("train", 32), ("t10k", 50)):
        pixels = torch.randint(0, 256, (n, 28, 28), generator=gen)
        labels = torch.randint(0, 10, (n,), generator=gen)
        write_idx(os.path.join(folder, f"{prefix}-images-idx3-ubyte.gz"), pixels)
        write_idx(os.path.join(folder, f"{prefix}-labels-idx1-ubyte.gz"), labels)
        x = (pixels.float().unsqueeze(1) / 255.0 - MEAN) / STD
        sets[prefix] = (x, labels)
    return sets["train"], sets["t10k"]


def off_default_buffers(model, gen):
    """BatchNorm statistics and affine parameters away from their defaults, so that a loader
    that skipped them would be seen."""
    with torch.no_grad():
        for name, t in model.state_dict().items():
            if name.endswith("running_mean") or name.endswith(".bias") and "bn" in name:
                t.copy_(torch.randn(t.shape, generator=gen) * 0.1)
            elif name.endswith("running_var") or name.endswith(".weight") and "bn" in name:
                t.copy_(1 + torch.rand(t.shape, generator=gen) * 0.5)
            elif name.endswith("num_batches_tracked"):
                t.fill_(7)
    return model


def evaluate(model, data, smoothing):
    """Loss and correct count as train's evaluation: the mean over the test set; and the
    images whose two top logits lie within 1e-4 (where rounding may pick either)."""
    model.eval()
    with torch.no_grad():
        logits = model(data[0])
        loss = F.cross_entropy(logits, data[1], label_smoothing=smoothing).item()
        correct = (logits.argmax(1) == data[1]).sum().item()
        top2 = logits.topk(2, 1).values
        near_ties = ((top2[:, 0] - top2[:, 1]) < 1e-4).sum().item()
    return loss, correct, near_ties


def close(a, b, rtol):
    return abs(a - b) <= rtol * max(abs(a), abs(b))


def state_close(ours, theirs, rtol, atol, stray=None):
    """The names of the entries that differ beyond rtol / atol (integers: exactly). stray
    (Adam): up to 1e-3 of a tensor's elements may differ by up to that much instead, those
    whose gradient is within rounding of zero, which Adam turns into a step of either sign."""
    bad = []
    for name, t in theirs.items():
        o = ours[name]
        if not t.is_floating_point():
            bad += [] if torch.equal(o, t) else [name]
            continue
        off = ~torch.isclose(o.double(), t.double(), rtol=rtol, atol=atol)
        if not off.any():
            continue
        if stray is None or off.sum() > 1e-3 * t.numel() or \
                (o.double() - t.double()).abs().max() > stray:
            bad.append(name)
    return bad


def check_evaluate(tmp, weights, test, model):
    metrics = os.path.join(tmp, "evaluate.jsonl")
    code, out = run("--weights", weights, "--evaluate", "--label-smoothing", "0.1",
                    "--data-dir", tmp, "--metrics", metrics)
    check(code == 0, f"--weights --evaluate runs ({code}): {out[-300:]}")
    if code:
        return
    e = records(metrics, "evaluation")[0]
    loss, correct, ties = evaluate(model, test, 0.1)
    check(close(e["test_loss"], loss, 1e-5),
          f"--evaluate --label-smoothing 0.1: test loss {e['test_loss']:.7f}, PyTorch's {loss:.7f}")
    ours = round(e["test_accuracy"] * e["test_images"])
    check(e["test_images"] == 50 and abs(ours - correct) <= ties,
          f"--evaluate: {ours}/{e['test_images']} correct, PyTorch {correct}/50 ({ties} near ties)")


# name, model, flags, the PyTorch optimizer, the clipping norm, the stray difference allowed
# (Adam's 3 steps of at most ~lr each: 2 x 3 x lr)
CASES = [
    ("sgd", SmallCnn, ["--optimizer", "sgd", "--lr", "0.05", "--momentum", "0.9", "--wd", "1e-3",
                       "--clip-grad-norm", "1.0"],
     lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9, weight_decay=1e-3), 1.0, None),
    ("adam", Mlp, ["--optimizer", "adam", "--lr", "1e-3", "--weight-decay", "1e-4"],
     lambda p: torch.optim.Adam(p, lr=1e-3, weight_decay=1e-4), None, 6e-3),
    ("adamw", Mlp, ["--optimizer", "adamw", "--lr", "1e-3", "--wd", "0.05",
                    "--clip-grad-norm", "0.5"],
     lambda p: torch.optim.AdamW(p, lr=1e-3, weight_decay=0.05), 0.5, 6e-3),
]


def torch_training(model, make_optimizer, clip, data, steps):
    """Full-batch steps as train takes them; returns each step's loss (before it)."""
    optimizer = make_optimizer(model.parameters())
    losses = []
    for _ in range(steps):
        model.train()
        loss = F.cross_entropy(model(data[0]), data[1], label_smoothing=0.1)
        losses.append(loss.item())
        optimizer.zero_grad()
        loss.backward()
        if clip:
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        optimizer.step()
    return losses


def check_training(tmp, case, data, test):
    name, net, flags, make_optimizer, clip, stray = case
    torch.manual_seed(1)
    model = off_default_buffers(net(), torch.Generator().manual_seed(2))
    weights = os.path.join(tmp, f"{name}_start.safetensors")
    write_safetensors(weights, model.state_dict(), {})
    exported = os.path.join(tmp, f"{name}_trained.safetensors")
    metrics = os.path.join(tmp, f"{name}.jsonl")
    code, out = run("--model", "small_cnn" if net is SmallCnn else "mlp", "--weights", weights,
                    "--data-dir", tmp, "-b", "32", "--epochs", "3", "--schedule", "none", "-j", "0",
                    "--label-smoothing", "0.1", "--export-weights", exported, "--metrics", metrics,
                    *flags)
    check(code == 0, f"{name}: train runs ({code}): {out[-300:]}")
    if code:
        return
    losses = torch_training(model, make_optimizer, clip, data, 3)
    epochs = records(metrics, "epoch")
    ours = [e["train_loss"] for e in epochs]
    check(len(ours) == 3 and all(close(a, b, 1e-4) for a, b in zip(ours, losses)),
          f"{name}: the epochs' training losses {ours} are PyTorch's {losses}")
    state, meta = read_safetensors(exported)
    check(meta.get("format") == "pt", f"{name}: --export-weights marks the file format pt")
    fresh = net()
    try:
        fresh.load_state_dict(state, strict=True)
        check(True, f"{name}: PyTorch loads the exported state_dict strictly")
    except RuntimeError as e:
        check(False, f"{name}: PyTorch loads the exported state_dict strictly: {e}")
        return
    bad = state_close(state, model.state_dict(), rtol=1e-4, atol=1e-6, stray=stray)
    check(not bad, f"{name}: the exported tensors are PyTorch's after 3 steps (differing: {bad})")
    loss, _, _ = evaluate(fresh, test, 0.1)
    check(close(epochs[-1]["test_loss"], loss, 1e-5),
          f"{name}: the exported model's test loss in PyTorch {loss:.7f} is train's "
          f"{epochs[-1]['test_loss']:.7f}")


def check_torchvision(tmp):
    torch.manual_seed(0)
    model = off_default_buffers(torchvision.models.resnet18(), torch.Generator().manual_seed(3))
    start = model.state_dict()
    weights = os.path.join(tmp, "resnet18.safetensors")
    write_safetensors(weights, start, {})
    code, out = run("--model", "resnet18_cifar", "--dataset", "synthetic", "--weights", weights,
                    "--evaluate")
    check(code != 0 and "missing keys: " in out and "linear.weight" in out and
          "layer2.0.shortcut.0.weight" in out and "unexpected keys: " in out and
          "fc.weight" in out and "layer2.0.downsample.0.weight" in out and
          "conv1.weight: loaded (64, 3, 7, 7), model (64, 3, 3, 3)" in out,
          f"torchvision's resnet18 into resnet18_cifar: every difference listed: {out[-600:]}")
    partial = os.path.join(tmp, "resnet18_partial.safetensors")
    write_safetensors(partial, {k: v for k, v in start.items() if k != "bn1.bias"}, {})
    code, out = run("--model", "resnet18", "--dataset", "synthetic", "--weights", partial,
                    "--evaluate")
    check(code != 0 and "missing keys: bn1.bias\n" in out and "unexpected keys" not in out and
          "shape mismatch" not in out, f"without bn1.bias: named, alone: {out[-300:]}")
    exported = os.path.join(tmp, "resnet18_exported.safetensors")
    code, out = run("--model", "resnet18", "--dataset", "synthetic", "--weights", weights, "-b", "2",
                    "--epochs", "1", "--max-iters", "1", "--eval-every", "0", "--lr", "1e-30",
                    "--momentum", "0", "--export-weights", exported)
    check(code == 0, f"torchvision's resnet18 state_dict trains ({code}): {out[-300:]}")
    if code:
        return
    state, _ = read_safetensors(exported)
    fresh = torchvision.models.resnet18()
    try:
        fresh.load_state_dict(state, strict=True)
        check(True, "torchvision's resnet18 loads the exported state_dict strictly")
    except RuntimeError as e:
        check(False, f"torchvision's resnet18 loads the exported state_dict strictly: {e}")
    check(list(state) == list(start) or sorted(state) == sorted(start),
          "the exported names are torchvision's")
    check(all(state[k].shape == v.shape and state[k].dtype == v.dtype for k, v in start.items()),
          "the exported shapes and dtypes are torchvision's")
    params = dict(model.named_parameters())
    moved = [k for k in params if not torch.allclose(state[k], start[k], rtol=0, atol=1e-20)]
    check(not moved, f"lr 1e-30: the parameters come back as they went in (moved: {moved[:5]})")
    counts = {k: state[k].item() for k in start if k.endswith("num_batches_tracked")}
    check(set(counts.values()) == {8}, "one training step: num_batches_tracked 7 -> 8 everywhere")
    stats = [k for k in start if k.endswith("running_mean")]
    check(all(not torch.equal(state[k], start[k]) for k in stats),
          "one training step: the running means move")


def main():
    with tempfile.TemporaryDirectory(prefix="ringflow_torch_weights_") as tmp:
        gen = torch.Generator().manual_seed(0)
        data, test = write_data(tmp, gen)
        torch.manual_seed(1)
        model = off_default_buffers(SmallCnn(), torch.Generator().manual_seed(2))
        weights = os.path.join(tmp, "small_cnn.safetensors")
        write_safetensors(weights, model.state_dict(), {})
        check_evaluate(tmp, weights, test, model)
        for case in CASES:
            check_training(tmp, case, data, test)
        check_torchvision(tmp)
    print(f"{len(failures)} failed" if failures else "all passed")
    sys.exit(1 if failures else 0)


main()
