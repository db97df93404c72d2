"""Bad input from Python raises a Python exception whose message names what is wrong, and never
crashes the interpreter: wrong shapes, wrong dtypes, arrays that cannot be shared (negative
strides, read-only memory), values that are no tensors, modules that are no modules. (A
destroyed process group: ddp_worker.py, under mpiexec.)"""
import numpy as np
import pytest

import ringflow as rf
from ringflow import nn
from ringflow.nn import functional as F


def test_wrong_shapes_name_the_shapes():
    with pytest.raises(ValueError, match=r"\(2, 3\) and \(4, 5\) cannot be multiplied"):
        rf.ones(2, 3) @ rf.ones(4, 5)
    with pytest.raises(ValueError, match=r"input \(1, 3, 8, 8\) has 3 channels but weight \(4, 2, 3, 3\)"):
        F.conv2d(rf.ones(1, 3, 8, 8), rf.ones(4, 2, 3, 3))
    with pytest.raises(ValueError, match=r"input of shape \(2, 5\) does not match weight of shape \(8, 4\)"):
        nn.Linear(4, 8)(rf.ones(2, 5))
    with pytest.raises(ValueError, match=r"target of shape \(3,\) for input of shape \(4, 3\)"):
        F.cross_entropy(rf.ones(4, 3), rf.tensor([0, 1, 2]))
    with pytest.raises(ValueError, match=r"shape \(4, 2\) is invalid for a tensor of 6 elements"):
        rf.ones(2, 3).reshape(4, 2)
    with pytest.raises(ValueError, match=r"use reshape"):
        rf.ones(2, 3).t().view(6)
    with pytest.raises(ValueError, match=r"BatchNorm2d\(3\): input \(2, 4, 3, 3\) has 4 channels"):
        nn.BatchNorm2d(3)(rf.ones(2, 4, 3, 3))
    with pytest.raises(ValueError, match=r"weight: loaded \(3, 3\), model \(2, 2\)"):
        nn.Linear(2, 2).load_state_dict({"weight": rf.ones(3, 3), "bias": rf.ones(2)})
    x = rf.ones(3, requires_grad=True)
    with pytest.raises(ValueError, match=r"gradient of shape \(5,\) for a tensor of shape \(3,\)"):
        x.grad = rf.zeros(5)
    with pytest.raises(ValueError, match=r"only for one-element outputs.*\(3,\)"):
        (x * 2).backward()
    with pytest.raises(ValueError, match=r"images \(N, ...\) and labels \(N\), got shapes \(4, 2\) and \(2,\)"):
        rf.data.TensorDataset(rf.ones(4, 2), rf.tensor([0, 1]))


def test_wrong_dtypes_name_the_dtypes():
    with pytest.raises(ValueError, match="dtypes differ"):
        rf.ones(2) + rf.ones(2, dtype=rf.float64)
    with pytest.raises(ValueError, match="target must be i64 class indices, got f32"):
        F.cross_entropy(rf.ones(4, 3), rf.tensor([0.0, 1.0, 2.0, 1.0]))
    with pytest.raises(ValueError, match="index must be i64, got f32"):
        rf.ones(3, 4).gather(1, rf.tensor([[0.0], [1.0], [2.0]]))
    with pytest.raises(ValueError, match="softmax of a i64 tensor"):
        rf.ones(2, dtype=rf.int64).softmax(0)
    with pytest.raises(ValueError, match="a f64 gradient on cpu for a f32 tensor"):
        rf.ones(3, requires_grad=True).grad = rf.zeros(3, dtype=rf.float64)
    with pytest.raises(ValueError, match="labels must be integer class indices, got f32"):
        rf.data.TensorDataset(rf.ones(4, 2), rf.tensor([0.5, 1.0, 1.0, 1.0]))
    with pytest.raises(ValueError, match=r"autocast: dtype ringflow.int32 \(choices"):
        rf.autocast("cpu", dtype=rf.int32)
    for dtype in (np.uint8, np.bool_, np.complex64, ">f4"):
        with pytest.raises(TypeError, match="has no ringflow dtype"):
            rf.from_numpy(np.zeros(3, dtype=dtype))
    with pytest.raises(TypeError, match="DLPack dtype"):
        rf.from_dlpack(np.zeros(3, dtype=np.uint8))


def test_arrays_that_cannot_be_shared():
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    with pytest.raises(ValueError, match="negative or not whole items"):
        rf.from_numpy(a[::-1])
    fields = np.zeros(3, dtype=[("x", np.float32), ("tag", np.int8)])
    with pytest.raises(ValueError, match="negative or not whole items"):
        rf.from_numpy(fields["x"])
    # The copying functions copy them instead, values in order.
    assert rf.tensor(a[::-1, ::-2]).tolist() == a[::-1, ::-2].tolist()
    assert rf.as_tensor(a[::-1]).tolist() == a[::-1].tolist()
    assert rf.as_tensor(fields["x"]).tolist() == [0.0] * 3
    # Positive strides are shared as they are (test_interop.py).
    assert rf.from_numpy(a[:, 1::2]).data_ptr() == a[:, 1::2].ctypes.data


def test_read_only_arrays_are_refused_or_copied(tmp_path):
    np.save(tmp_path / "w.npy", np.arange(4, dtype=np.float32))
    mapped = np.load(tmp_path / "w.npy", mmap_mode="r")  # read-only pages: a write would crash
    for read_only in (mapped, np.frombuffer(b"\0" * 16, dtype=np.float32), np.broadcast_to(np.ones(2), (3, 2))):
        assert not read_only.flags.writeable
        with pytest.raises(ValueError, match="read-only"):
            rf.from_numpy(read_only)
        copy = rf.as_tensor(read_only)
        assert copy.data_ptr() != read_only.ctypes.data and copy.tolist() == read_only.tolist()
        copy.add_(rf.ones_like(copy))  # its own memory
    net = nn.Linear(4, 1)
    net.load_state_dict({"weight": mapped.reshape(1, 4), "bias": np.zeros(1, dtype=np.float32)})
    assert net.weight.tolist() == [[0.0, 1.0, 2.0, 3.0]]
    net.weight.detach().mul_(2.0)
    assert mapped.tolist() == [0.0, 1.0, 2.0, 3.0]


def test_values_that_are_no_tensors_or_modules():
    with pytest.raises(TypeError, match="expected a number .* got 'a' of type str"):
        rf.tensor([["a"]])
    with pytest.raises(TypeError, match="got None of type NoneType"):
        rf.tensor(None)
    with pytest.raises(TypeError, match="got 's' of type str"):
        rf.zeros(3)[0] = "s"
    with pytest.raises(TypeError, match="from_numpy: expected a numpy.ndarray .* got int"):
        rf.from_numpy(3)
    with pytest.raises(TypeError, match=r"SGD: parameters must be ringflow tensors .* item 1 is of type int"):
        rf.optim.SGD([rf.ones(2, requires_grad=True), 1], lr=0.1)
    with pytest.raises(ValueError, match="Adam: got an empty parameter list"):
        rf.optim.Adam(iter([]))
    with pytest.raises(TypeError, match="Sequential: expected a ringflow.nn.Module, got int"):
        nn.Sequential(nn.ReLU(), 1)
    with pytest.raises(ValueError, match="num_classes -5 is negative"):
        rf.models.make("small_cnn", num_classes=-5)
    with pytest.raises(OverflowError, match=r"\(4611686018427387904,\) and dtype f32 has more bytes"):
        rf.zeros(1 << 62)


class ReturnsInt(nn.Module):
    def forward(self, x):
        return 3


def test_modules_without_a_proper_forward():
    with pytest.raises(NotImplementedError, match='Module \\[Module\\] is missing the required "forward"'):
        nn.Sequential(nn.Module())(rf.ones(2))
    with pytest.raises(TypeError, match="ReturnsInt.forward returned int"):
        nn.Sequential(ReturnsInt())(rf.ones(2))

    class NoInit(nn.Module):
        def __init__(self):
            pass

    with pytest.raises(TypeError, match="__init__"):
        NoInit()


def test_out_of_range_values():
    with pytest.raises(ValueError, match=r"target\[3\] = 5 is out of range for 3 classes"):
        F.cross_entropy(rf.ones(4, 3), rf.tensor([0, 1, 2, 5]))
    with pytest.raises(ValueError, match=r"index values must be in \[0, 4\)"):
        rf.ones(3, 4).gather(1, rf.tensor([[0], [1], [9]]))
    with pytest.raises(ValueError, match="dimension 5 is out of range"):
        rf.ones(2, 3).softmax(5)
    with pytest.raises(IndexError, match="out of bounds"):
        rf.zeros(2, 3)[0, 3]
    with pytest.raises(ValueError, match="rank 3 outside"):
        rf.data.DistributedSampler(rf.data.SyntheticDataset(10), num_replicas=2, rank=3)
    with pytest.raises(IndexError, match="out of range"):
        rf.data.SyntheticDataset(4)[4]
