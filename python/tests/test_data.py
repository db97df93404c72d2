"""ringflow.data: the Fashion-MNIST reader against the IDX files read here, the DataLoader's
batches (deterministic whatever the worker count), transforms, samplers (DistributedSampler
as PyTorch's partitions), TensorDataset and Subset."""
import gzip
import os

import numpy as np
import pytest

import ringflow as rf
from ringflow import data


def idx_images(path):
    with gzip.open(path) as f:
        raw = f.read()
    n, h, w = (int.from_bytes(raw[4 + 4 * i:8 + 4 * i], "big") for i in range(3))
    return np.frombuffer(raw, dtype=np.uint8, offset=16).reshape(n, h, w)


@pytest.mark.skipif(not os.path.isdir(data.FASHION_MNIST_DIR), reason="no Fashion-MNIST (dataset-fashion-mnist)")
def test_fashion_mnist_reads_the_idx_files():
    test = data.FashionMNIST(train=False)
    assert len(test) == 10000 and test.image_shape == [1, 28, 28] and test.num_classes == 10
    raw = idx_images(os.path.join(data.FASHION_MNIST_DIR, "t10k-images-idx3-ubyte.gz"))
    image, label = test[7]
    np.testing.assert_allclose(image.numpy()[0], raw[7] / 255.0, rtol=1e-6)
    assert isinstance(label, int) and 0 <= label < 10
    with pytest.raises(IndexError):
        test[10000]


def make_set(n=50):
    rng = np.random.default_rng(0)
    images = rng.normal(size=(n, 2, 4, 4)).astype(np.float32)
    labels = rng.integers(0, 5, size=n)
    return images, labels, data.TensorDataset(images, labels)


def test_loader_batches_are_deterministic():
    images, labels, ds = make_set()
    seen = []
    for workers in (0, 1, 3):
        loader = data.DataLoader(ds, batch_size=8, shuffle=True, drop_last=True, seed=5, num_workers=workers)
        assert len(loader) == 6
        seen.append([(x.tolist(), y.tolist()) for x, y in loader.epoch(2)])
    assert seen[0] == seen[1] == seen[2]
    x, y = next(iter(data.DataLoader(ds, batch_size=50)))
    np.testing.assert_array_equal(x.numpy(), images)  # no shuffle: in order
    assert y.tolist() == labels.tolist() and y.dtype == rf.int64
    loader = data.DataLoader(ds, batch_size=50, shuffle=True)
    first, second = [next(iter(loader))[1].tolist() for _ in range(2)]
    assert sorted(first) == sorted(second) and first != second  # epochs 0 and 1: two orders


def test_transforms():
    images, labels, ds = make_set(10)
    norm = data.transforms.Normalize([0.5, -1.0], [2.0, 0.5])
    x, _ = next(iter(data.DataLoader(ds, batch_size=10, transforms=data.transforms.Compose([norm]))))
    expected = (images - np.array([0.5, -1.0]).reshape(1, 2, 1, 1)) / np.array([2.0, 0.5]).reshape(1, 2, 1, 1)
    np.testing.assert_allclose(x.numpy(), expected, rtol=1e-6, atol=1e-6)
    flip = data.DataLoader(ds, batch_size=10, transforms=[data.transforms.RandomHorizontalFlip(p=1.0)])
    np.testing.assert_array_equal(next(iter(flip))[0].numpy(), images[..., ::-1])
    with pytest.raises(ValueError, match="RandomCrop"):
        data.DataLoader(ds, transforms=[data.transforms.RandomCrop(32, padding=4)])


def test_subset_and_samplers():
    images, labels, ds = make_set(10)
    sub = data.Subset(ds, [3, 1])
    assert len(sub) == 2 and sub[0][1] == labels[3]
    assert data.SequentialSampler(ds).indices() == list(range(10))
    assert sorted(data.RandomSampler(ds, seed=1).indices(0)) == list(range(10))
    torch = pytest.importorskip("torch")
    for drop_last in (False, True):
        for rank in range(3):
            ours = data.DistributedSampler(ds, num_replicas=3, rank=rank, shuffle=False, drop_last=drop_last)
            ref = torch.utils.data.DistributedSampler(range(10), num_replicas=3, rank=rank, shuffle=False,
                                                      drop_last=drop_last)
            assert ours.indices(0) == list(ref) and len(ours) == len(ref)
    with pytest.raises(RuntimeError, match="init_process_group"):
        data.DistributedSampler(ds)
