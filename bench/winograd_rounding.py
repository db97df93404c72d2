#!/usr/bin/env python3
"""How much a bf16 Winograd convolution rounds, F(2x2, 3x3) against larger tiles: NumPy only.

Random N(0, 1) activations and He-scaled weights, both rounded to bf16 (the inputs a bf16
convolution gets); the transforms in f32, the transformed operands rounded to bf16 (what the
dot products read), their products summed in f32 over the input channels, the output
transform exact. Prints each variant's relative rms error against the exact (f64) direct
convolution of the same bf16 inputs: Lavin and Gray's F(2x2) and F(4x4) (the ones ringflow's
kernels and oneDNN's f32 Winograd use), and F(3x3) and F(4x4) built by Cook-Toom on other
points (fewer products than F(2x2), smaller constants than Lavin's F(4x4)).
docs/mixed-precision.md quotes it.

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


def cook_toom(points, r=3):
    """(B^T, G, A^T) of F(m, r) on the finite `points` (m + r - 2 of them) and infinity."""
    a = len(points) + 1
    m = a - r + 1

    def product(roots):  # coefficients, lowest first, of prod (x - q)
        c = np.array([1.0])
        for q in roots:
            c = np.convolve(c, [-q, 1.0])
        return c

    AT, G, BT = np.zeros((m, a)), np.zeros((a, r)), np.zeros((a, a))
    for j, p in enumerate(points):
        others = [q for q in points if q != p]
        AT[:, j] = [p ** i for i in range(m)]
        G[j] = [p ** k / np.prod([p - q for q in others]) for k in range(r)]
        BT[j, :a - 1] = product(others)
    AT[m - 1, a - 1] = G[a - 1, r - 1] = 1
    BT[a - 1] = product(points)
    # exact in f64 on a random 1-D case, or the construction is wrong
    d, g = np.random.default_rng(1).standard_normal(a), np.random.default_rng(2).standard_normal(r)
    direct = [d[i:i + r] @ g for i in range(m)]
    assert np.allclose(AT @ ((G @ g) * (BT @ d)), direct, atol=1e-12), points
    return BT, G, AT


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
    variants = (("F(2x2, 3x3)", F2), ("F(4x4, 3x3)", F4),
                ("F(3x3, 3x3) on 0, 1, -1, 2", cook_toom([0, 1, -1, 2])),
                ("F(4x4, 3x3) on 0, 1, -1, 1/2, -2", cook_toom([0, 1, -1, 0.5, -2])))
    for name, matrices in variants:
        err = relative_error(matrices, args.channels, args.tiles, rng)
        print(f"{name} in bf16, {args.channels} input channels: relative rms error {err:.2e}")


if __name__ == "__main__":
    main()
