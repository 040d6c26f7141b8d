"""MNIST for the classifier notebooks: from $MNIST_DIR, torchvision's download, or Fashion-MNIST offline."""

from __future__ import annotations

import gzip
import os
import socket
import struct
from pathlib import Path
from typing import NamedTuple

import numpy as np
import torch

DEBIAN_FASHION_DIR = "/usr/share/datasets/fashion-mnist"  # Debian's dataset-fashion-mnist package
FASHION_CLASSES = (
    "T-shirt/top",
    "Trouser",
    "Pullover",
    "Dress",
    "Coat",
    "Sandal",
    "Shirt",
    "Sneaker",
    "Bag",
    "Ankle boot",
)
DIGITS = tuple(str(i) for i in range(10))
_FILES = {
    "train_images": "train-images-idx3-ubyte",
    "train_labels": "train-labels-idx1-ubyte",
    "test_images": "t10k-images-idx3-ubyte",
    "test_labels": "t10k-labels-idx1-ubyte",
}


class Dataset(NamedTuple):
    """Images as uint8 [N, 28, 28], labels as int64 [N], and which dataset this is."""

    name: str
    classes: tuple[str, ...]
    train_images: torch.Tensor
    train_labels: torch.Tensor
    test_images: torch.Tensor
    test_labels: torch.Tensor


def read_idx(path: Path) -> np.ndarray:
    """Read one IDX file (the MNIST format), gzipped or not."""
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as f:
        data = f.read()
    if len(data) < 4 or len(data) < 4 + 4 * data[3]:
        raise ValueError(f"{path}: {len(data)} bytes, shorter than an IDX header")
    zero, dtype_code, ndim = struct.unpack(">HBB", data[:4])
    if zero != 0 or dtype_code != 0x08:
        raise ValueError(f"{path} is not an unsigned-byte IDX file")
    shape = struct.unpack(f">{ndim}I", data[4 : 4 + 4 * ndim])
    array = np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim)
    if array.size != int(np.prod(shape)):
        raise ValueError(f"{path}: header says {shape}, file holds {array.size} bytes")
    return array.reshape(shape)


def load_idx_dir(folder: Path, name: str, classes: tuple[str, ...]) -> Dataset:
    """Load the four MNIST-format files (raw or .gz) from `folder`."""
    tensors = {}
    for key, stem in _FILES.items():
        candidates = [folder / stem, folder / f"{stem}.gz"]
        path = next((c for c in candidates if c.exists()), None)
        if path is None:
            raise FileNotFoundError(f"{folder} lacks {stem}[.gz]")
        array = read_idx(path)
        tensors[key] = torch.from_numpy(array.copy()).to(torch.int64 if "labels" in key else torch.uint8)
    for split in ("train", "test"):  # what Dataset promises: images [N, 28, 28], labels [N] in 0..len(classes)-1
        images, labels = tensors[f"{split}_images"], tensors[f"{split}_labels"]
        if images.dim() != 3 or images.shape[1:] != (28, 28) or labels.shape != (images.shape[0],):
            raise ValueError(f"{folder}: {split} images {tuple(images.shape)} and labels {tuple(labels.shape)}: "
                             "need [N, 28, 28] and [N]")
        if labels.numel() and not 0 <= int(labels.min()) <= int(labels.max()) < len(classes):
            raise ValueError(f"{folder}: {split} labels must lie in 0..{len(classes) - 1}")
    return Dataset(name, classes, **tensors)


def _download_mnist(root: Path) -> Dataset:
    from torchvision.datasets import MNIST

    previous = socket.getdefaulttimeout()
    socket.setdefaulttimeout(15)  # an unreachable mirror should fail fast, not hang
    try:
        train = MNIST(root, train=True, download=True)
        test = MNIST(root, train=False, download=True)
    finally:
        socket.setdefaulttimeout(previous)
    return Dataset("MNIST", DIGITS, train.data, train.targets, test.data, test.targets)


def load_mnist(source: str = "auto", root: str | Path | None = None) -> Dataset:
    """MNIST from $MNIST_DIR or a download, else the offline Fashion-MNIST stand-in; prints which.

    source: "auto" (MNIST, falling back to Fashion-MNIST), "mnist" or "fashion". MNIST is read
    from $MNIST_DIR (a folder with the four *-ubyte(.gz) files) when it is set, else downloaded by
    torchvision into `root`; Fashion-MNIST is read from $FASHION_MNIST_DIR or
    /usr/share/datasets/fashion-mnist. Raises FileNotFoundError when $MNIST_DIR is set but is no
    folder, and when no dataset can be had.
    """
    if source not in ("auto", "mnist", "fashion"):
        raise ValueError(f"source must be 'auto', 'mnist' or 'fashion', got {source!r}")
    root = Path(root or Path.home() / ".cache" / "gpu_ml" / "data")
    mnist_error = None
    if source in ("auto", "mnist") and os.environ.get("MNIST_DIR"):
        folder = Path(os.environ["MNIST_DIR"])
        if not folder.is_dir():
            raise FileNotFoundError(f"MNIST_DIR={folder} is not a folder; point it at the four *-ubyte(.gz) files")
        data = load_idx_dir(folder, "MNIST", DIGITS)
        print(f"Loaded MNIST from {folder}: {len(data.train_labels)} train / {len(data.test_labels)} test images")
        return data
    if source in ("auto", "mnist"):
        try:
            data = _download_mnist(root)
            print(f"Loaded MNIST: {len(data.train_labels)} train / {len(data.test_labels)} test images")
            return data
        except Exception as exc:  # no internet, a mirror down: fall back or report
            if source == "mnist":
                raise RuntimeError(f"MNIST could not be downloaded (and MNIST_DIR is not set): {exc}") from exc
            mnist_error = exc
    folders = [Path(p) for p in (os.environ.get("FASHION_MNIST_DIR"), DEBIAN_FASHION_DIR) if p]
    for folder in folders:
        if folder.is_dir():
            data = load_idx_dir(folder, "Fashion-MNIST", FASHION_CLASSES)
            why = f" (MNIST download failed: {type(mnist_error).__name__})" if mnist_error else ""
            print(
                f"Loaded Fashion-MNIST from {folder}{why}: "
                f"{len(data.train_labels)} train / {len(data.test_labels)} test images"
            )
            return data
    raise FileNotFoundError(
        "No dataset available: MNIST_DIR is not set, MNIST could not be downloaded"
        + (f" ({mnist_error})" if mnist_error else "")
        + " and Fashion-MNIST was not found in $FASHION_MNIST_DIR or "
        + DEBIAN_FASHION_DIR
        + ". Set MNIST_DIR (or FASHION_MNIST_DIR) to a folder with the four *-ubyte(.gz) files."
    )
