import gzip
import json
import struct

import numpy as np
import pytest
import torch

from gpu_ml import data, results


def _write_idx(path, array, compress):
    header = struct.pack(">HBB", 0, 8, array.ndim) + struct.pack(f">{array.ndim}I", *array.shape)
    payload = header + array.astype(np.uint8).tobytes()
    with gzip.open(str(path) + ".gz", "wb") if compress else open(path, "wb") as f:
        f.write(payload)


def _fake_dataset(folder, n_train=6, n_test=4, compress=True):
    rng = np.random.default_rng(0)
    folder.mkdir(exist_ok=True)
    _write_idx(folder / "train-images-idx3-ubyte", rng.integers(0, 256, (n_train, 28, 28)), compress)
    _write_idx(folder / "train-labels-idx1-ubyte", rng.integers(0, 10, n_train), compress)
    _write_idx(folder / "t10k-images-idx3-ubyte", rng.integers(0, 256, (n_test, 28, 28)), not compress)
    _write_idx(folder / "t10k-labels-idx1-ubyte", rng.integers(0, 10, n_test), not compress)
    return folder


@pytest.fixture
def offline(monkeypatch):
    def fail(root):
        raise OSError("no internet")

    monkeypatch.setattr(data, "_download_mnist", fail)
    monkeypatch.setattr(data, "DEBIAN_FASHION_DIR", "/nonexistent")
    monkeypatch.delenv("MNIST_DIR", raising=False)


def test_offline_falls_back_to_fashion_mnist(tmp_path, monkeypatch, offline, capsys):
    monkeypatch.setenv("FASHION_MNIST_DIR", str(_fake_dataset(tmp_path / "f")))
    ds = data.load_mnist()
    assert ds.name == "Fashion-MNIST" and ds.classes[0] == "T-shirt/top"
    assert ds.train_images.shape == (6, 28, 28) and ds.train_images.dtype == torch.uint8
    assert ds.test_labels.shape == (4,) and ds.test_labels.dtype == torch.int64
    assert "Loaded Fashion-MNIST" in capsys.readouterr().out
    assert data.load_mnist("fashion").name == "Fashion-MNIST"


def test_mnist_dir_is_read_before_any_download(tmp_path, monkeypatch, offline, capsys):
    monkeypatch.setenv("MNIST_DIR", str(_fake_dataset(tmp_path / "m", n_train=5)))
    monkeypatch.setenv("FASHION_MNIST_DIR", str(_fake_dataset(tmp_path / "f")))
    ds = data.load_mnist()
    assert ds.name == "MNIST" and ds.classes == data.DIGITS and ds.train_images.shape == (5, 28, 28)
    assert f"Loaded MNIST from {tmp_path / 'm'}" in capsys.readouterr().out
    assert data.load_mnist("mnist").name == "MNIST" and data.load_mnist("fashion").name == "Fashion-MNIST"
    monkeypatch.setenv("MNIST_DIR", str(tmp_path / "missing"))
    with pytest.raises(FileNotFoundError, match="MNIST_DIR=.*is not a folder"):
        data.load_mnist()


def test_no_dataset_is_a_clear_error(monkeypatch, offline):
    monkeypatch.delenv("FASHION_MNIST_DIR", raising=False)
    with pytest.raises(FileNotFoundError, match="FASHION_MNIST_DIR"):
        data.load_mnist()
    with pytest.raises(RuntimeError, match="MNIST could not be downloaded"):
        data.load_mnist("mnist")
    with pytest.raises(ValueError, match="source"):
        data.load_mnist("cifar")


def test_corrupt_idx_files_are_refused(tmp_path):
    (tmp_path / "bad").write_bytes(b"\x00\x00\x0d\x01\x00\x00\x00\x02ab")
    with pytest.raises(ValueError, match="unsigned-byte"):
        data.read_idx(tmp_path / "bad")
    (tmp_path / "short").write_bytes(b"\x00\x00\x08\x01\x00\x00\x00\x05ab")
    with pytest.raises(ValueError, match="header says"):
        data.read_idx(tmp_path / "short")
    with pytest.raises(FileNotFoundError, match="lacks"):
        data.load_idx_dir(tmp_path, "x", ())
    for truncated in (b"", b"\x00\x00\x08", b"\x00\x00\x08\x03\x00\x00"):  # no header, or a header cut short
        (tmp_path / "cut").write_bytes(truncated)
        with pytest.raises(ValueError, match="shorter than an IDX header"):
            data.read_idx(tmp_path / "cut")


def test_a_folder_whose_files_disagree_is_refused(tmp_path):
    folder = _fake_dataset(tmp_path / "mnist")
    _write_idx(folder / "train-labels-idx1-ubyte", np.zeros(5), True)  # 6 images, 5 labels
    with pytest.raises(ValueError, match=r"train images \(6, 28, 28\) and labels \(5,\)"):
        data.load_idx_dir(folder, "MNIST", data.DIGITS)
    _write_idx(folder / "train-labels-idx1-ubyte", np.full(6, 200), True)
    with pytest.raises(ValueError, match="train labels must lie in 0..9"):
        data.load_idx_dir(folder, "MNIST", data.DIGITS)


def test_record_and_render_table(tmp_path, monkeypatch):
    monkeypatch.delenv("GPU_ML_EMULATE", raising=False)  # the GPU it names is the one it fakes, not an emulated one
    (tmp_path / "pyproject.toml").write_text("")
    (tmp_path / "README.md").write_text(f"intro\n{results.START}\nold\n{results.END}\nend\n")
    monkeypatch.setattr(results, "has_gpu", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "NVIDIA H200")
    results.record("nb", "bandwidth", 4000.0, "GB/s", baseline="torch.add", ratio=0.97, root=tmp_path)
    results.record("nb", "bandwidth", 4100.0, "GB/s", baseline="torch.add", ratio=0.98, root=tmp_path)
    entries = json.loads((tmp_path / "results" / "nvidia-h200.json").read_text())
    assert len(entries) == 1 and entries[0]["value"] == 4100.0
    results.update_readme(tmp_path)
    text = (tmp_path / "README.md").read_text()
    assert "| NVIDIA H200 | nb | bandwidth | 4100 GB/s | 0.980x torch.add |" in text
    assert "old" not in text and text.startswith("intro") and text.endswith("end\n")


def test_record_on_cpu_stores_nothing(tmp_path, monkeypatch):
    monkeypatch.setattr(results, "has_gpu", lambda: False)
    results.record("nb", "m", 1.0, "x", root=tmp_path)
    assert not (tmp_path / "results").exists()


def test_an_emulated_run_records_nothing_and_asserts_no_bar(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(results, "has_gpu", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "NVIDIA H200")
    monkeypatch.setenv("GPU_ML_EMULATE", "t4")
    results.record("nb", "m", 1.0, "x", root=tmp_path)
    assert not (tmp_path / "results").exists()
    assert "not recorded (GPU_ML_EMULATE run): m" in capsys.readouterr().out
    assert not results.on_reference_gpu()
    monkeypatch.delenv("GPU_ML_EMULATE")
    assert results.on_reference_gpu()


def test_readme_without_markers_is_refused(tmp_path):
    (tmp_path / "pyproject.toml").write_text("")
    (tmp_path / "README.md").write_text("no table here\n")
    with pytest.raises(ValueError, match="markers"):
        results.update_readme(tmp_path)


def _reference_run(tmp_path):
    (tmp_path / "pyproject.toml").write_text("")
    (tmp_path / "results").mkdir()
    entry = {"notebook": "nb", "metric": "speed", "ratio": 1.25}
    (tmp_path / "results" / results.REFERENCE_RESULTS).write_text(json.dumps([entry]))
    return tmp_path


def test_bar_is_asserted_on_the_reference_gpu(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(results, "on_reference_gpu", lambda: True)
    assert results.bar("kernel vs torch", 1.3, at_least=1.2)
    assert "bar met: kernel vs torch at 1.300x (bar: >= 1.2x)" in capsys.readouterr().out
    with pytest.raises(AssertionError, match=r"bar missed: kernel vs torch at 1\.100x \(bar: >= 1\.2x\)"):
        results.bar("kernel vs torch", 1.1, at_least=1.2)
    with pytest.raises(AssertionError, match=r"bar: <= 1\.0x"):
        results.bar("epoch time", 1.05, at_most=1.0)
    with pytest.raises(ValueError, match="needs at_least or at_most"):
        results.bar("nothing", 1.0)
    with pytest.raises(ValueError, match="no ratio could meet it"):
        results.bar("impossible", 1.0, at_least=2.0, at_most=1.0)
    with pytest.raises(ValueError, match="is NaN"):
        results.bar("broken", float("nan"), at_least=1.0)


def test_bar_elsewhere_prints_the_reference_figure_and_never_fails(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(results, "on_reference_gpu", lambda: False)
    root = _reference_run(tmp_path)
    assert not results.bar("kernel vs torch", 0.5, at_least=1.2, reference=("nb", "speed"), root=root)
    out = capsys.readouterr().out
    assert "0.500x on" in out and "the reference run on an H200 measured 1.250x" in out
    assert "asserted on an H100/H200 only; this GPU misses it, which is not an error here." in out
    assert results.reference_ratio("nb", "missing", root=root) is None


def test_reference_gpu_class(monkeypatch):
    monkeypatch.delenv("GPU_ML_EMULATE", raising=False)  # the GPU it names is the one it fakes, not an emulated one
    monkeypatch.setattr(results, "has_gpu", lambda: True)
    for name, expected in (("NVIDIA H200", True), ("NVIDIA H100 80GB HBM3", True), ("Tesla T4", False),
                           ("NVIDIA A100-SXM4-80GB", False), ("NVIDIA GeForce RTX 4090", False)):
        monkeypatch.setattr("torch.cuda.get_device_name", lambda name=name: name)
        assert results.on_reference_gpu() is expected, name
