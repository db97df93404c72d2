"""Tensors shared with NumPy and PyTorch without copies: the same addresses both ways, writes
seen through either, owners kept alive, and clear errors where sharing cannot be had."""
import gc
import sys

import numpy as np
import pytest

import ringflow as rf


def test_from_numpy_shares_memory_and_keeps_the_array_alive():
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    refs = sys.getrefcount(a)
    t = rf.from_numpy(a)
    assert t.data_ptr() == a.ctypes.data and t.shape == (3, 4) and t.stride() == (4, 1)
    assert sys.getrefcount(a) == refs + 1  # the tensor holds the array's buffer
    a[0, 0] = 42.0
    assert t[0, 0].item() == 42.0
    t[1, 1] = -1.0
    assert a[1, 1] == -1.0
    del t
    gc.collect()
    assert sys.getrefcount(a) == refs
    t = rf.from_numpy(np.full(5, 3.0, dtype=np.float64))  # the only owner of the array now
    gc.collect()
    assert t.dtype == rf.float64 and t.tolist() == [3.0] * 5


def test_from_numpy_views_and_dtypes():
    a = np.arange(24, dtype=np.int64).reshape(4, 6)
    v = rf.from_numpy(a[1:, ::2])
    assert v.stride() == (6, 2) and v.data_ptr() == a[1:, ::2].ctypes.data
    assert v.tolist() == a[1:, ::2].tolist()
    assert rf.from_numpy(a.T).stride() == (1, 6)
    for dtype, expected in [(np.float16, rf.float16), (np.int32, rf.int32), (np.float64, rf.float64)]:
        assert rf.from_numpy(np.zeros(2, dtype=dtype)).dtype == expected
    with pytest.raises(TypeError, match="uint8"):
        rf.from_numpy(np.zeros(3, dtype=np.uint8))
    with pytest.raises(ValueError, match="negative"):
        rf.from_numpy(a[::-1])


def test_numpy_shares_memory_and_keeps_the_tensor_alive():
    t = rf.arange(6).float().reshape(2, 3)
    a = t.numpy()
    assert a.ctypes.data == t.data_ptr() and a.dtype == np.float32 and a.shape == (2, 3)
    a[0, 1] = 10.0
    assert t[0, 1].item() == 10.0
    assert np.shares_memory(np.asarray(t), a)
    assert t.t().numpy().strides == (4, 12)  # bytes
    del t
    gc.collect()
    assert a.tolist() == [[0.0, 10.0, 2.0], [3.0, 4.0, 5.0]]
    with pytest.raises(RuntimeError, match="requires grad"):
        rf.ones(2, requires_grad=True).numpy()
    with pytest.raises(TypeError, match="bfloat16"):
        rf.ones(2, dtype=rf.bfloat16).numpy()


def test_numpy_writes_are_seen_by_kernels_that_cache():
    # Kernels keep weights reordered per storage version; memory NumPy also writes to must
    # not be read from such a cache (the tensor is marked shared).
    x = rf.randn(2, 3, 8, 8)
    w = rf.randn(4, 3, 3, 3)
    w_np = w.numpy()
    first = rf.nn.functional.conv2d(x, w).tolist()
    w_np *= 2.0
    second = rf.nn.functional.conv2d(x, w)
    np.testing.assert_allclose(second.numpy(), 2.0 * np.array(first), rtol=1e-5, atol=1e-5)


def test_dlpack_with_numpy():
    a = np.arange(6, dtype=np.float32)
    t = rf.from_dlpack(a)
    assert t.data_ptr() == a.ctypes.data
    b = np.from_dlpack(t)
    assert b.ctypes.data == t.data_ptr()


def test_copies_are_copies():
    a = np.ones(3, dtype=np.float32)
    t = rf.tensor(a)
    assert t.data_ptr() != a.ctypes.data
    assert rf.as_tensor(a).data_ptr() == a.ctypes.data
    with pytest.raises(ValueError, match="ragged"):
        rf.tensor([[1, 2], [3]])


torch = pytest.importorskip("torch")


def test_dlpack_with_torch_both_ways():
    tt = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    r = rf.from_dlpack(tt)
    assert r.data_ptr() == tt.data_ptr() and r.shape == (3, 4)
    tt[0, 0] = 7.0
    assert r[0, 0].item() == 7.0
    back = torch.from_dlpack(r)
    assert back.data_ptr() == tt.data_ptr()
    r_t = rf.from_dlpack(tt.t())
    assert r_t.stride() == (1, 4) and r_t.data_ptr() == tt.data_ptr()
    for dtype, expected in [(torch.bfloat16, rf.bfloat16), (torch.float16, rf.float16), (torch.int64, rf.int64),
                            (torch.float64, rf.float64), (torch.int32, rf.int32)]:
        x = torch.ones(5, dtype=dtype)
        y = rf.from_dlpack(x)
        assert y.dtype == expected and y.data_ptr() == x.data_ptr()
        z = torch.from_dlpack(y)
        assert z.dtype == dtype and z.data_ptr() == x.data_ptr()


def test_dlpack_lifetimes():
    r = rf.from_dlpack(torch.full((4,), 2.5))  # the torch tensor lives on in r only
    gc.collect()
    assert r.tolist() == [2.5] * 4
    t = torch.from_dlpack(rf.full((3,), 1.5))  # the ringflow tensor lives on in t only
    gc.collect()
    assert t.tolist() == [1.5] * 3
    capsule = torch.utils.dlpack.to_dlpack(torch.ones(2))
    rf.from_dlpack(capsule)
    with pytest.raises(ValueError, match="consumed once"):
        rf.from_dlpack(capsule)
    with pytest.raises(RuntimeError, match="require gradient"):
        torch.from_dlpack(rf.ones(2, requires_grad=True))


def test_torch_state_dict_loads_into_a_ringflow_model():
    net = rf.nn.Linear(3, 2)
    ref = torch.nn.Linear(3, 2)
    net.load_state_dict(ref.state_dict())
    x = np.random.default_rng(0).normal(size=(4, 3)).astype(np.float32)
    np.testing.assert_allclose(net(rf.from_numpy(x)).detach().numpy(),
                               ref(torch.from_numpy(x)).detach().numpy(), rtol=1e-6, atol=1e-6)


@pytest.mark.skipif(not rf.cuda.is_available(), reason="no CUDA device for ringflow")
def test_dlpack_on_cuda():
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device for torch")
    tt = torch.arange(8, dtype=torch.float32, device="cuda")
    r = rf.from_dlpack(tt)
    assert r.device == rf.device("cuda:0") and r.data_ptr() == tt.data_ptr()
    s = (r * 2).sum().item()
    assert s == float((tt * 2).sum())
    back = torch.from_dlpack(r * 3)
    assert back.device.type == "cuda" and back.tolist() == [3.0 * i for i in range(8)]
