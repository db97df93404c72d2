#!/usr/bin/env python3
"""How much a bf16 Winograd convolution rounds, F(2x2, 3x3) against F(4x4, 3x3): NumPy only.

Random N(0, 1) activations and He-scaled weights, both rounded to bf16 (the inputs a bf16
convolution gets); the transforms in f32, the transformed operands rounded to bf16 (what the
dot products read), their products summed in f32 over the input channels, the output
transform exact. Prints each variant's relative rms error against the exact (f64) direct
convolution of the same bf16 inputs. docs/mixed-precision.md quotes it.

usage: winograd_rounding.py [--channels C] [--tiles T] [--seed S]"""
import argparse

import numpy as np


def bf16(x):
    """x rounded to the nearest bf16 (ties to even), as f32."""
    bits = np.asarray(x, np.float32).copy().view(np.uint32)
    bits += 0x7FFF + ((bits >> 16) & 1)
    bits &= 0xFFFF0000
    return bits.view(np.float32)


# Lavin and Gray's matrices: F(2, 3) on the points 0, 1, -1, inf; F(4, 3) on 0, 1, -1, 2, -2, inf.
F2 = (np.array([[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]], np.float64),
      np.array([[1, 0, 0], [.5, .5, .5], [.5, -.5, .5], [0, 0, 1]], np.float64),
      np.array([[1, 1, 1, 0], [0, 1, -1, -1]], np.float64))
F4 = (np.array([[4, 0, -5, 0, 1, 0], [0, -4, -4, 1, 1, 0], [0, 4, -4, -1, 1, 0],
                [0, -2, -1, 2, 1, 0], [0, 2, -1, -2, 1, 0], [0, 4, 0, -5, 0, 1]], np.float64),
      np.array([[1 / 4, 0, 0], [-1 / 6, -1 / 6, -1 / 6], [-1 / 6, 1 / 6, -1 / 6],
                [1 / 24, 1 / 12, 1 / 6], [1 / 24, -1 / 12, 1 / 6], [0, 0, 1]], np.float64),
      np.array([[1, 1, 1, 1, 1, 0], [0, 1, -1, 2, -2, 0], [0, 1, 1, 4, 4, 0],
                [0, 1, -1, 8, -8, 1]], np.float64))


def relative_error(matrices, channels, tiles, rng, out_channels=16):
    BT, G, AT = matrices
    m, a = AT.shape
    d = bf16(rng.standard_normal((tiles, channels, a, a))).astype(np.float64)
    g = bf16(rng.standard_normal((out_channels, channels, 3, 3)) / np.sqrt(9 * channels)).astype(np.float64)
    exact = np.zeros((tiles, out_channels, m, m))
    for i in range(m):
        for j in range(m):
            exact[:, :, i, j] = np.einsum("tcuv,kcuv->tk", d[:, :, i:i + 3, j:j + 3], g)
    V = bf16(np.einsum("pu,tcuv,qv->tcpq", BT, d, BT).astype(np.float32)).astype(np.float64)
    U = bf16(np.einsum("pu,kcuv,qv->kcpq", G, g, G).astype(np.float32)).astype(np.float64)
    M = np.einsum("tcpq,kcpq->tkpq", V, U).astype(np.float32).astype(np.float64)
    y = np.einsum("ip,tkpq,jq->tkij", AT, M, AT)
    return np.sqrt(((y - exact) ** 2).mean() / (exact ** 2).mean())


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--channels", type=int, default=256)
    ap.add_argument("--tiles", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    rng = np.random.default_rng(args.seed)
    for name, matrices in (("F(2x2, 3x3)", F2), ("F(4x4, 3x3)", F4)):
        err = relative_error(matrices, args.channels, args.tiles, rng)
        print(f"{name} in bf16, {args.channels} input channels: relative rms error {err:.2e}")


if __name__ == "__main__":
    main()
