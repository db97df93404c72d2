"""bench/kernels --device cuda's layers against PyTorch's: `kernels --list-layers` (ringflow's
models, a forward pass on the CPU) and bench/torch_conv_layers.py --list (the PyTorch models
bench/torch_reference.py times, hooks on nn.Conv2d) give the same convolutions, counts and
shapes for VGG-11 CIFAR, ResNet-18 CIFAR and ResNet-50 (the last where torchvision is there).
And `kernels --device cuda` without a usable device says so and exits 77, timing nothing.
Run by meson test with Debian's /usr/bin/python3 (python3-torch); exits 77 without torch.

    tests/conv_layers_test.py BUILD/bench/kernels SOURCE/bench/torch_conv_layers.py
"""
import json
import subprocess
import sys

PYTHON = "/usr/bin/python3"
BATCH = 3


def lines(cmd):
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=300).stdout
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


def key(layer):
    return json.dumps({k: layer[k] for k in ("x", "w", "y", "stride", "padding", "dilation", "groups", "bias")},
                      sort_keys=True)


def main():
    kernels, script = sys.argv[1], sys.argv[2]
    failed = 0

    # Without a device (this machine kind has none; a build without CUDA neither): exit 77 and a
    # line that says so. Where a GPU is usable the small CNN's layers run instead, quickly.
    run = subprocess.run([kernels, "--device", "cuda", "--models", "small_cnn", "--batch", "2", "--repeat", "1",
                          "--no-torch"], capture_output=True, text=True, timeout=600)
    if run.returncode == 77:
        if "no CUDA device" not in run.stdout:
            print(f"FAIL: exit 77 without saying why:\n{run.stdout}{run.stderr}")
            failed += 1
        else:
            print("no device: " + run.stdout.strip())
    elif run.returncode != 0:
        print(f"FAIL: kernels --device cuda exited {run.returncode}:\n{run.stdout}{run.stderr}")
        failed += 1

    probe = subprocess.run([PYTHON, "-c", "import torch"], capture_output=True)
    if probe.returncode != 0:
        print("SKIP: no torch in " + PYTHON)
        return 77 if failed == 0 else 1
    has_torchvision = subprocess.run([PYTHON, "-c", "import torchvision"], capture_output=True).returncode == 0
    models = ["vgg11_cifar", "resnet18_cifar"] + (["resnet50"] if has_torchvision else [])
    if not has_torchvision:
        print("resnet50 not compared: no torchvision in " + PYTHON)
    ours = lines([kernels, "--list-layers", "--batch", str(BATCH), "--models", *models])
    for model in models:
        mine = sorted(key(layer) for layer in ours if layer["model"] == model)
        theirs = sorted(key(layer) for layer in lines([PYTHON, script, "--model", model, "--list",
                                                        "--batch", str(BATCH)]))
        if not mine or mine != theirs:
            failed += 1
            print(f"FAIL {model}: ringflow {len(mine)} layers, PyTorch {len(theirs)}")
            for k in sorted(set(mine) ^ set(theirs))[:5]:
                print(("  only ringflow: " if k in mine else "  only PyTorch: ") + k)
        else:
            print(f"{model}: {len(mine)} convolutions, {len(set(mine))} distinct, the same as PyTorch's")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
