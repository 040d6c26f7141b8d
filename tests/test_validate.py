"""`gpu_ml.validate.require`: the one input check every kernel wrapper calls before a launch."""

import pytest
import torch

from gpu_ml.validate import interpreting, kernel_device, overlaps, require, require_tiles, span, usable


@pytest.fixture
def cpu_mode(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")


def test_accepts_what_fits(cpu_mode):
    x = torch.randn(3, 4)
    require("f", x=x, y=torch.randn(3, 4), ndim=2, contiguous=True, same_shape=True, max_span=12)
    assert interpreting() and kernel_device() == "cpu"


@pytest.mark.parametrize(
    ("tensors", "options", "error", "message"),
    [
        ({"x": [1.0]}, {}, TypeError, "f(): x must be a torch.Tensor, got list"),
        ({"x": torch.zeros(2, device="meta")}, {}, ValueError, "f(): x is on meta"),
        ({"x": torch.zeros(2, dtype=torch.float64)}, {}, TypeError, "x has dtype torch.float64; supported"),
        ({"x": torch.zeros(2, dtype=torch.bfloat16)}, {}, TypeError, "bfloat16 needs a GPU"),
        ({"x": torch.zeros(2)}, {"ndim": 2}, ValueError, "x must be 2-D, got shape (2,)"),
        ({"x": torch.zeros(3, 2).T}, {"contiguous": True}, ValueError, "x must be contiguous"),
        ({"x": torch.zeros(5)}, {"max_span": 4}, ValueError, "x spans 5 elements; at most 4 fit"),
        ({"x": torch.zeros(2, 10)[:, :2]}, {"max_span": 11}, ValueError, "x spans 12 elements"),
        ({"x": torch.zeros(2), "y": torch.zeros(2).half()}, {}, TypeError, "dtypes differ: x torch.float32 vs y"),
        ({"x": torch.zeros(2), "y": torch.zeros(3)}, {"same_shape": True}, ValueError, "shapes differ: x (2,)"),
        ({"x": torch.zeros(2, dtype=torch.int32)}, {"dtypes": (torch.int64,)}, TypeError, "supported: torch.int64"),
        ({"x": torch.zeros(2)}, {"device": torch.device("cuda", 1)}, ValueError,
         "f(): x is on cpu, the other arguments on cuda:1"),
    ],
)
def test_refuses_with_a_message_naming_the_function_and_argument(cpu_mode, tensors, options, error, message):
    with pytest.raises(error, match=message.replace("(", r"\(").replace(")", r"\)")):
        require("f", **options, **tensors)


def test_device_follows_the_mode(monkeypatch):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    monkeypatch.setattr("gpu_ml.validate.capability", lambda: (9, 0))
    assert kernel_device() == "cuda" and usable((torch.float32, torch.bfloat16)) == (torch.float32, torch.bfloat16)
    with pytest.raises(ValueError, match="the kernels run on the GPU"):
        require("f", x=torch.zeros(2))
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    assert usable((torch.float32, torch.bfloat16)) == (torch.float32,)


def test_bf16_needs_compute_capability_8(monkeypatch):
    """A T4 (7.5) has no bf16 arithmetic: bf16 is neither offered by usable() nor accepted by require()."""
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    monkeypatch.setattr("gpu_ml.validate.capability", lambda: (7, 5))
    assert usable((torch.float16, torch.bfloat16)) == (torch.float16,)
    monkeypatch.setattr("gpu_ml.validate.kernel_device", lambda: "cpu")  # past the device check, on a CPU
    with pytest.raises(TypeError, match=r"capability 8\.0\+ \(this GPU has compute capability 7\.5\); use float16"):
        require("f", x=torch.zeros(2, dtype=torch.bfloat16))


def test_span_counts_the_memory_a_view_reaches():
    assert span(torch.zeros(3, 4)) == 12 and span(torch.zeros(0, 4)) == 0
    assert span(torch.zeros(4, 10)[:, :3]) == 33 and span(torch.zeros(1).expand(5)) == 1


def test_overlaps_finds_elements_that_share_memory():
    base = torch.zeros(4, 6, 8)
    for t in (base, base[:, ::2], base.transpose(0, 2), base[1:, :3, 4:], torch.zeros(1, 5).expand(1, 5),
              torch.zeros(0, 3).expand(7, 0, 3), base[:, 0, 0]):
        assert not overlaps(t), (t.shape, t.stride())
    for t in (torch.zeros(1, 8).expand(3, 8), torch.zeros(16).as_strided((3, 8), (4, 1)),
              torch.zeros(6).as_strided((2, 2, 3), (3, 0, 1))):
        assert overlaps(t), (t.shape, t.stride())


def test_require_tiles_takes_powers_of_two_from_a_minimum():
    require_tiles("f", 16, BM=16, BN=256)
    require_tiles("f", block=1)
    for value in (0, 3, 48, 8, True, 2.0, None):
        with pytest.raises(ValueError, match=r"f\(\): BK must be a power of two >= 16, got"):
            require_tiles("f", 16, BM=32, BK=value)
