"""ringflow.Tensor: creation, metadata, views, indexing, conversions, autograd state, modes,
and C++ errors arriving as Python exceptions with their messages."""
import pytest

import ringflow as rf


def test_creation_and_metadata():
    t = rf.zeros(2, 3)
    assert t.shape == (2, 3) and t.size() == (2, 3) and t.size(-1) == 3
    assert t.stride() == (3, 1) and t.dim() == 2 and t.ndim == 2 and t.numel() == 6
    assert t.dtype == rf.float32 and str(t.device) == "cpu" and not t.is_cuda
    assert rf.ones((4,), dtype=rf.int64).dtype == rf.int64
    assert rf.full((2,), 7.0).tolist() == [7.0, 7.0]
    assert rf.arange(4).dtype == rf.int64 and rf.arange(4).tolist() == [0, 1, 2, 3]
    assert rf.arange(0.0, 1.0, 0.25).dtype == rf.float32
    assert rf.tensor([[1, 2], [3, 4]]).dtype == rf.int64
    assert rf.tensor([1.5, 2.5]).dtype == rf.float32
    assert rf.tensor([1.5], dtype=rf.float64).item() == 1.5
    assert repr(rf.float32) == "ringflow.float32" and rf.float == rf.float32
    assert rf.device("cuda", 1) == rf.device("cuda:1") and rf.device("cuda:1").index == 1


def test_seeded_random_is_reproducible():
    rf.manual_seed(3)
    a = rf.randn(5)
    rf.manual_seed(3)
    assert rf.randn(5).tolist() == a.tolist()
    g1, g2 = rf.Generator(9), rf.Generator(9)
    assert rf.rand(4, generator=g1).tolist() == rf.rand(4, generator=g2).tolist()


def test_views_share_storage():
    t = rf.arange(12).float().reshape(3, 4)
    v = t.t()
    assert v.shape == (4, 3) and v.stride() == (1, 4) and not v.is_contiguous()
    assert v.data_ptr() == t.data_ptr()
    assert t.view(2, 6).shape == (2, 6) and t.permute(1, 0).shape == (4, 3)
    assert t.unsqueeze(0).shape == (1, 3, 4) and t.unsqueeze(0).squeeze().shape == (3, 4)
    assert t.narrow(1, 1, 2).tolist() == [[1, 2], [5, 6], [9, 10]]
    assert t[1].tolist() == [4, 5, 6, 7] and t[-1, -1].item() == 11
    assert t[:, 1:3].tolist() == [[1, 2], [5, 6], [9, 10]]
    assert t[::2, ::3].tolist() == [[0, 3], [8, 11]]
    assert t[None, ..., 0].shape == (1, 3)
    assert t[1:1].shape == (0, 4)
    t[0, :] = 1.0
    t[2] = rf.tensor([9.0, 9.0, 9.0, 9.0])
    assert t.tolist()[0] == [1, 1, 1, 1] and t.tolist()[2] == [9, 9, 9, 9]


def test_iteration_stops_at_the_end():
    assert [row.tolist() for row in rf.arange(4).reshape(2, 2)] == [[0, 1], [2, 3]]
    with pytest.raises(IndexError, match="out of bounds"):
        rf.zeros(3)[3]


def test_conversions():
    t = rf.tensor([1.25, -2.5])
    assert t.double().dtype == rf.float64 and t.to(rf.float16).dtype == rf.float16
    assert t.to("cpu", rf.float64).dtype == rf.float64 and t.to(dtype=rf.bfloat16).dtype == rf.bfloat16
    assert t.long().tolist() == [1, -2] and isinstance(t[0].item(), float)
    assert float(t[0]) == 1.25 and int(rf.tensor(3)) == 3 and bool(rf.tensor(1.0))
    assert "tensor(" in repr(t)


def test_autograd_state():
    x = rf.tensor([1.0, 2.0, 3.0], requires_grad=True)
    y = (x * x).sum()
    assert y.grad_fn is not None and x.is_leaf and not y.is_leaf and x.grad is None
    y.backward()
    assert x.grad.tolist() == [2.0, 4.0, 6.0]
    x.grad = None
    assert x.grad is None
    d = x.detach()
    assert not d.requires_grad and d.data_ptr() == x.data_ptr()
    z = rf.zeros(2)
    assert z.requires_grad_() is z and z.requires_grad


def test_in_place_returns_self():
    t = rf.zeros(3)
    assert t.fill_(2.0) is t and t.add_(rf.ones(3), alpha=3) is t and t.mul_(0.5) is t
    assert t.tolist() == [2.5, 2.5, 2.5]
    assert t.zero_().tolist() == [0.0, 0.0, 0.0]


def test_no_grad_and_autocast():
    x = rf.ones(2, 2, requires_grad=True)
    with rf.no_grad():
        assert not rf.is_grad_enabled() and not (x * 2).requires_grad
    assert rf.is_grad_enabled() and (x * 2).requires_grad

    @rf.no_grad()
    def double(t):
        return t * 2

    assert not double(x).requires_grad
    scope = rf.no_grad()
    with scope:
        with scope:
            pass
        assert not rf.is_grad_enabled()
    assert rf.is_grad_enabled()
    w = rf.ones(3, 2)
    with rf.autocast("cpu", dtype=rf.bfloat16):
        assert rf.is_autocast_enabled() and rf.matmul(x, w.t()).dtype == rf.bfloat16
    assert rf.matmul(x, w.t()).dtype == rf.float32


def test_errors_carry_the_cpp_messages():
    with pytest.raises(ValueError, match=r"shapes \(2,\) and \(3,\) cannot be broadcast together"):
        rf.add(rf.ones(2), rf.ones(3))
    with pytest.raises(ValueError, match="dtypes differ"):
        rf.ones(2) + rf.ones(2, dtype=rf.float64)
    with pytest.raises(RuntimeError, match="no-such-file.safetensors"):
        rf.load("/nonexistent/no-such-file.safetensors")
    with pytest.raises(ValueError, match="unknown device|device"):
        rf.device("tpu")
    with pytest.raises(TypeError):
        rf.zeros(2)[rf.zeros(1)]
