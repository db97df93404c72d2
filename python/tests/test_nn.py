"""ringflow.nn: a Module subclass written in Python registers its layers and parameters,
trains as PyTorch's does on the same data, lives as long as C++ holds it, and saves and
loads its state; the layers and the model registry keep PyTorch's names."""
import gc
import weakref

import numpy as np
import pytest

import ringflow as rf
from ringflow import nn


def make_net(lib):
    """The same Module subclass over ringflow or torch: their names are the same."""

    class Net(lib.nn.Module):
        def __init__(self):
            super().__init__()
            self.scale = lib.nn.Parameter(lib.ones(3))
            self.fc1 = lib.nn.Linear(4, 8)
            self.fc2 = lib.nn.Linear(8, 3)

        def forward(self, x):
            return self.fc2(self.fc1(x).relu()) * self.scale

    return Net()


def test_subclass_registers_what_it_assigns():
    net = make_net(rf)
    assert [n for n, _ in net.named_parameters()] == ["scale", "fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"]
    assert list(net.state_dict()) == [n for n, _ in net.named_parameters()]
    assert isinstance(net.fc1, nn.Linear) and net.fc1.weight.shape == (8, 4)
    assert net.scale.requires_grad and net.num_parameters() == 3 + 8 * 4 + 8 + 8 * 3 + 3
    assert [n for n, _ in net.named_children()] == ["fc1", "fc2"]
    assert [n for n, _ in net.named_modules()] == ["", "fc1", "fc2"] and net.modules()[0] is net
    net.note = "plain attribute"
    assert net.note == "plain attribute"
    assert "Net(" in repr(net) and "(fc1): Linear()" in repr(net)
    assert net.eval() is net and not net.training and not net.fc1.training
    net.train()
    assert net.fc2.training
    with pytest.raises(AttributeError, match="no attribute 'missing'"):
        net.missing
    with pytest.raises(ValueError, match="'fc1': the name is already taken"):
        net.fc1 = nn.Linear(4, 8)


def test_parameter_object_is_the_registered_tensor():
    net = nn.Module()
    p = nn.Parameter(rf.zeros(2))
    net.w = p
    assert p.data_ptr() == net.w.data_ptr() and p.is_leaf and p.requires_grad
    (net.w * 3).sum().backward()
    assert p.grad.tolist() == [3.0, 3.0]


torch = pytest.importorskip("torch")


def test_subclass_trains_as_torch_does():
    ours, ref = make_net(rf), make_net(torch)
    ours.load_state_dict(ref.state_dict())  # torch's tensors, shared through DLPack
    rng = np.random.default_rng(0)
    x = rng.normal(size=(16, 4)).astype(np.float32)
    y = rng.integers(0, 3, size=16)
    opt = rf.optim.SGD(ours.parameters(), lr=0.1, momentum=0.9)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1, momentum=0.9)
    for _ in range(5):
        loss = rf.nn.functional.cross_entropy(ours(rf.from_numpy(x)), rf.from_numpy(y))
        ref_loss = torch.nn.functional.cross_entropy(ref(torch.from_numpy(x)), torch.from_numpy(y))
        np.testing.assert_allclose(loss.item(), ref_loss.item(), rtol=1e-5)
        opt.zero_grad()
        ref_opt.zero_grad()
        loss.backward()
        ref_loss.backward()
        opt.step()
        ref_opt.step()
    for (name, p), (ref_name, q) in zip(ours.named_parameters(), ref.named_parameters()):
        assert name == ref_name
        np.testing.assert_allclose(p.detach().numpy(), q.detach().numpy(), rtol=1e-5, atol=1e-6)


def test_python_modules_live_while_cpp_holds_them():
    inner = make_net(rf)
    alive = weakref.ref(inner)
    seq = nn.Sequential(inner, nn.ReLU())
    del inner
    gc.collect()
    assert alive() is not None and len(seq) == 2 and seq[0] is alive()
    assert seq(rf.ones(2, 4)).shape == (2, 3)  # C++ Sequential calls the Python forward
    outer = nn.Module()
    outer.body = seq
    del seq
    gc.collect()
    assert outer.body[0] is alive() and [n for n, _ in outer.named_parameters()][0] == "body.0.scale"
    del outer
    gc.collect()
    assert alive() is None


def test_layers_match_torch():
    rng = np.random.default_rng(1)
    x = rng.normal(size=(2, 3, 8, 8)).astype(np.float32)
    for make in [lambda m: m.Conv2d(3, 4, 3, stride=2, padding=1), lambda m: m.BatchNorm2d(3),
                 lambda m: m.MaxPool2d(2), lambda m: m.AvgPool2d(3, stride=1, padding=1),
                 lambda m: m.AdaptiveAvgPool2d((2, 2)), lambda m: m.Flatten(), lambda m: m.ReLU()]:
        ours, ref = make(nn), make(torch.nn)
        if ref.state_dict():
            ours.load_state_dict(ref.state_dict())
        assert list(ours.state_dict()) == list(ref.state_dict())
        np.testing.assert_allclose(ours(rf.from_numpy(x)).detach().numpy(),
                                   ref(torch.from_numpy(x)).detach().numpy(), rtol=1e-5, atol=1e-5)


def test_model_registry_keeps_torchvision_names():
    torchvision = pytest.importorskip("torchvision")
    assert "resnet18" in rf.models.names() and rf.models.input_shape("resnet18") == [3, 224, 224]
    ours = rf.models.make("resnet18").state_dict()
    ref = torchvision.models.resnet18().state_dict()
    assert list(ours) == list(ref)
    assert all(ours[k].shape == tuple(ref[k].shape) for k in ref)
    with pytest.raises(ValueError, match="no_such_model"):
        rf.models.make("no_such_model")


def test_state_dict_round_trip(tmp_path):
    rf.manual_seed(0)
    a = rf.models.make("small_cnn")
    rf.manual_seed(1)
    b = rf.models.make("small_cnn")
    path = str(tmp_path / "weights.safetensors")
    rf.save(a.state_dict(), path)
    b.load_state_dict(rf.load(path))
    x = rf.randn(2, 1, 28, 28)
    a.eval()
    b.eval()
    assert a(x).tolist() == b(x).tolist()
    with pytest.raises(ValueError, match="missing"):
        b.load_state_dict({"fc.weight": rf.zeros(10, 1568)})
