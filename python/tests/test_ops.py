"""Each op against PyTorch's on the same inputs: the forward value and the gradient of every
input, for an upstream gradient drawn at random (one line per op, tinygrad's
helper_test_op). `m` is the library: torch or ringflow, whose names are the same."""
import re

import numpy as np
import pytest

import ringflow as rf

torch = pytest.importorskip("torch")


def check(fn, shapes, low=-2.0, high=2.0, consts=(), atol=1e-5, rtol=1e-4, seed=0):
    """fn(m, *inputs, *consts) in both libraries; inputs uniform in [low, high) of `shapes`."""
    g = np.random.default_rng(seed)
    arrays = [g.uniform(low, high, size=s).astype(np.float32) for s in shapes]
    t_in = [torch.tensor(a, requires_grad=True) for a in arrays]
    r_in = [rf.tensor(a, requires_grad=True) for a in arrays]
    t_out = fn(torch, *t_in, *[torch.from_numpy(c) for c in consts])
    r_out = fn(rf, *r_in, *[rf.from_numpy(c) for c in consts])
    np.testing.assert_allclose(r_out.detach().numpy(), t_out.detach().numpy(), atol=atol, rtol=rtol)
    upstream = g.uniform(-1.0, 1.0, size=tuple(t_out.shape)).astype(np.float32)
    (t_out * torch.from_numpy(upstream)).sum().backward()
    (r_out * rf.from_numpy(upstream)).sum().backward()
    for r, t in zip(r_in, t_in):
        np.testing.assert_allclose(r.grad.numpy(), t.grad.numpy(), atol=atol, rtol=rtol)


def F(m):
    return m.nn.functional


def test_elementwise():
    check(lambda m, x, y: x + y, [(3, 4), (3, 4)])
    check(lambda m, x, y: x - y, [(3, 4), (4,)])  # broadcast
    check(lambda m, x, y: x * y, [(2, 3, 4), (3, 1)])
    check(lambda m, x, y: x / y, [(3, 4), (3, 4)], low=0.5)
    check(lambda m, x: 2.0 - x * 3.0 + 1.0 / (x + 3.0), [(5,)])
    check(lambda m, x, y: m.maximum(x, y) + m.minimum(x, y) * 2, [(3, 4), (3, 4)])
    check(lambda m, x: x ** 3.0, [(6,)])
    check(lambda m, x, y: x.pow(y), [(6,), (6,)], low=0.5)
    check(lambda m, x: (-x).exp() + x.abs(), [(7,)])
    check(lambda m, x: x.log() + x.sqrt(), [(7,)], low=0.2)
    check(lambda m, x: x.relu() + x.sigmoid() + x.tanh(), [(4, 5)])
    check(lambda m, x, y: m.where(x > 0, x, y), [(4, 5), (4, 5)])


def test_where_takes_numpy_bool_conditions():
    """A NumPy comparison's bool array as where's condition, contiguous or not, broadcast or
    not, against numpy.where and torch.where (forward, and the gradients of input and other);
    a condition that does not broadcast refused naming the shapes."""
    g = np.random.default_rng(3)
    x = g.normal(size=(4, 5)).astype(np.float32)
    y = g.normal(size=(1, 5)).astype(np.float32)
    z = g.normal(size=(5, 4))
    conditions = {"comparison": x > 0, "strided": (z > 0).T, "column": x[:, :1] < 0.2,
                  "row": np.array([True, False, True, True, False]), "scalar": np.array(True)}
    for name, cond in conditions.items():
        rx, ry = rf.tensor(x, requires_grad=True), rf.tensor(y, requires_grad=True)
        tx, ty = torch.tensor(x, requires_grad=True), torch.tensor(y, requires_grad=True)
        r_out, t_out = rf.where(cond, rx, ry), torch.where(torch.from_numpy(np.ascontiguousarray(cond)), tx, ty)
        np.testing.assert_array_equal(r_out.detach().numpy(), np.where(cond, x, y), err_msg=name)
        np.testing.assert_array_equal(r_out.detach().numpy(), t_out.detach().numpy(), err_msg=name)
        upstream = g.uniform(-1.0, 1.0, size=tuple(t_out.shape)).astype(np.float32)
        (r_out * rf.from_numpy(upstream)).sum().backward()
        (t_out * torch.from_numpy(upstream)).sum().backward()
        np.testing.assert_allclose(rx.grad.numpy(), tx.grad.numpy(), rtol=1e-6, err_msg=name)
        np.testing.assert_allclose(ry.grad.numpy(), ty.grad.numpy(), rtol=1e-6, err_msg=name)
    d = rf.tensor(x.astype(np.float64))  # True and False in the input's dtype
    assert rf.where(x > 0, d, -d).dtype == rf.float64
    np.testing.assert_array_equal(rf.where(x > 0, d, -d).numpy(), np.abs(x.astype(np.float64)))
    # A ringflow comparison and a list of bools select the same.
    np.testing.assert_array_equal(rf.where(rf.from_numpy(x) > 0, rx, ry).detach().numpy(), np.where(x > 0, x, y))
    np.testing.assert_array_equal(rf.where([[True], [False], [False], [True]], rx, ry).detach().numpy(),
                                  np.where(np.array([[True], [False], [False], [True]]), x, y))
    with pytest.raises(ValueError, match=re.escape("where: the condition's shape (3,) does not broadcast with the "
                                                   "values' (4, 5) (input (4, 5), other (1, 5))")):
        rf.where(np.array([True, False, True]), rx, ry)
    with pytest.raises(ValueError, match=re.escape("where: input (4, 5) and other (3,) cannot be broadcast")):
        rf.where(x > 0, rx, rf.zeros(3))


def test_reductions():
    check(lambda m, x: x.sum(), [(3, 4)])
    check(lambda m, x: x.sum(1, keepdim=True) * x, [(3, 4)])
    check(lambda m, x: x.mean((0, 2)), [(2, 3, 4)])
    check(lambda m, x: x.var(1), [(3, 5)])
    check(lambda m, x: x.var(1, unbiased=False), [(3, 5)])
    check(lambda m, x: x.amax(0) + x.amin(1).sum(), [(4, 5)])
    check(lambda m, x: x.max(1)[0], [(4, 5)])
    check(lambda m, x: x.softmax(1) + x.log_softmax(0), [(3, 4)])


def test_argmax_and_max_indices():
    x = np.random.default_rng(1).normal(size=(4, 6)).astype(np.float32)
    assert rf.from_numpy(x).argmax(1).tolist() == torch.from_numpy(x).argmax(1).tolist()
    assert rf.from_numpy(x).max(0)[1].tolist() == torch.from_numpy(x).max(0)[1].tolist()
    assert rf.from_numpy(x).argmax().item() == torch.from_numpy(x).argmax().item()


def test_matmul_and_shapes():
    check(lambda m, x, y: x @ y, [(3, 4), (4, 5)])
    check(lambda m, x, y: m.matmul(x, y), [(2, 3, 4), (4, 2)])
    check(lambda m, x, w, b: F(m).linear(x, w, b), [(5, 4), (3, 4), (3,)])
    check(lambda m, x, y: m.cat([x, y], 1), [(2, 3), (2, 2)])
    check(lambda m, x: x.reshape(4, 3).t().flatten() * 2, [(3, 4)])
    check(lambda m, x: x.permute(2, 0, 1).narrow(0, 1, 2).transpose(1, 2), [(2, 3, 4)])
    check(lambda m, x: x.unsqueeze(1).expand(3, 2, 4) * 1.0, [(3, 4)])
    check(lambda m, x: x[1:, ::2] * 3, [(3, 5)])
    check(lambda m, x, i: x.gather(1, i), [(3, 4)], consts=[np.array([[0, 3], [1, 1], [2, 0]])])


def test_layers():
    check(lambda m, x, w, b: F(m).conv2d(x, w, b, stride=2, padding=1), [(2, 3, 7, 7), (4, 3, 3, 3), (4,)],
          atol=1e-4)
    check(lambda m, x, w: F(m).conv2d(x, w, padding=(0, 1), dilation=2), [(1, 2, 8, 8), (3, 2, 3, 3)], atol=1e-4)
    check(lambda m, x: F(m).max_pool2d(x, 2), [(2, 3, 6, 6)])
    check(lambda m, x: F(m).max_pool2d(x, 3, stride=2, padding=1, ceil_mode=True), [(1, 2, 7, 7)])
    check(lambda m, x: F(m).avg_pool2d(x, (2, 3), padding=(1, 1), count_include_pad=False), [(1, 2, 6, 7)])
    check(lambda m, x: F(m).adaptive_avg_pool2d(x, 1), [(2, 3, 5, 5)])
    check(lambda m, x, w, b: F(m).batch_norm(x, None, None, w, b, training=True), [(4, 3, 2, 2), (3,), (3,)],
          atol=1e-4)


def test_batch_norm_updates_running_stats():
    x = np.random.default_rng(2).normal(size=(4, 3, 2, 2)).astype(np.float32)
    stats = {}
    for m in (torch, rf):
        mean, var = m.zeros(3), m.ones(3)
        F(m).batch_norm(m.from_numpy(x), mean, var, training=True, momentum=0.2)
        stats[m] = (np.array(mean.tolist()), np.array(var.tolist()))
    np.testing.assert_allclose(stats[rf][0], stats[torch][0], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(stats[rf][1], stats[torch][1], rtol=1e-5, atol=1e-6)


def test_losses():
    target = np.array([2, 0, 1, 2], dtype=np.int64)
    check(lambda m, x, t: F(m).cross_entropy(x, t), [(4, 3)], consts=[target])
    check(lambda m, x, t: F(m).cross_entropy(x, t, reduction="sum", label_smoothing=0.1), [(4, 3)],
          consts=[target])
    check(lambda m, x, t: F(m).nll_loss(F(m).log_softmax(x, 1), t, reduction="none"), [(4, 3)], consts=[target])
    check(lambda m, x, y: F(m).mse_loss(x, y), [(3, 4), (3, 4)])
    check(lambda m, x, t: m.nn.CrossEntropyLoss()(x, t), [(4, 3)], consts=[target])
