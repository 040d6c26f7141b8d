"""One input check for every kernel wrapper: refuse, before any launch, what a kernel cannot take."""

from __future__ import annotations

import os

import torch

from gpu_ml.env import capability

FLOATS = (torch.float32, torch.float16, torch.bfloat16)
INT32_MAX = 2**31 - 1


def interpreting() -> bool:
    """True when Triton runs kernels in its interpreter (CPU mode: `setup()` set TRITON_INTERPRET=1)."""
    return os.environ.get("TRITON_INTERPRET") == "1"


def kernel_device() -> str:
    """Where tensors must live for the kernels in this mode: "cpu" in the interpreter, else "cuda".

    CUDA C++ wrappers share it: in CPU mode their checks run on CPU tensors, and the launch itself
    is then refused by `gpu_ml.cuda` (a `%%cuda` function needs CUDA tensors and a GPU).
    """
    return "cpu" if interpreting() else "cuda"


def span(t: torch.Tensor) -> int:
    """Elements from a tensor's first to its last element, both included: the offsets a kernel computes."""
    return 0 if t.numel() == 0 else 1 + sum((n - 1) * abs(st) for n, st in zip(t.shape, t.stride(), strict=True))


def bf16_ok() -> bool:
    """True where the kernels can compute in bf16: a GPU of compute capability 8.0+ (not a T4, not the
    interpreter, which has no bf16 arithmetic)."""
    cap = capability()
    return not interpreting() and cap is not None and cap >= (8, 0)


def usable(dtypes: tuple[torch.dtype, ...]) -> tuple[torch.dtype, ...]:
    """The dtypes of `dtypes` the kernels can run here: bf16 only where `bf16_ok()`."""
    return tuple(d for d in dtypes if d != torch.bfloat16 or bf16_ok())


def require(
    fn: str,
    /,
    *,
    dtypes: tuple[torch.dtype, ...] = FLOATS,
    ndim: int | None = None,
    contiguous: bool = False,
    same_shape: bool = False,
    max_span: int | None = None,
    device: torch.device | None = None,
    **tensors: object,
) -> None:
    """Raise TypeError/ValueError naming `fn` and the argument unless every tensor in `tensors` fits.

    Each must be a torch.Tensor on the kernels' device (`kernel_device()`), of one of `dtypes`
    (never bf16 in the interpreter, which has no bf16 arithmetic), with `ndim` dimensions,
    contiguous if asked, and spanning at most `max_span` elements of memory (the largest offset the
    kernel computes, plus one: `numel()` for a contiguous tensor). All share one device (`device`, when given:
    that of the arguments checked in another call) and dtype, and one shape if `same_shape`.
    """
    expected = kernel_device()  # once per call: wrappers run it on every launch (11 per MNIST step)
    on_gpu = expected == "cuda"
    first_name, first = None, None
    for name, t in tensors.items():
        where = f"{fn}(): {name}"
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{where} must be a torch.Tensor, got {type(t).__name__}")
        if not (t.is_cuda if on_gpu else t.is_cpu):  # cheaper than comparing t.device.type
            mode = "on the CPU (Triton's interpreter)" if expected == "cpu" else "on the GPU"
            raise ValueError(f"{where} is on {t.device}, but the kernels run {mode}: use .to({expected!r})")
        if t.dtype not in dtypes:
            raise TypeError(f"{where} has dtype {t.dtype}; supported: {', '.join(map(str, dtypes))}")
        # bf16 is checked on the first tensor only (the others must share its dtype): once per call, not per tensor
        if first is None and t.dtype == torch.bfloat16 and not bf16_ok():
            cap = capability()
            why = ("Triton's interpreter has no bf16 arithmetic" if interpreting() or cap is None
                   else f"this GPU has compute capability {cap[0]}.{cap[1]}")
            raise TypeError(f"{where} has dtype torch.bfloat16: bfloat16 needs a GPU of compute capability 8.0+ "
                            f"({why}); use float16")
        if ndim is not None and t.dim() != ndim:
            raise ValueError(f"{where} must be {ndim}-D, got shape {tuple(t.shape)}")
        if contiguous and not t.is_contiguous():
            raise ValueError(f"{where} must be contiguous, got shape {tuple(t.shape)} with strides {t.stride()} "
                             "(call .contiguous())")
        if max_span is not None and span(t) > max_span:
            raise ValueError(f"{where} spans {span(t)} elements; at most {max_span} fit the kernel's int32 offsets")
        if device is not None and t.device != device:
            raise ValueError(f"{where} is on {t.device}, the other arguments on {device}")
        if first is None:
            first_name, first = name, t
            continue
        if t.device != first.device:
            raise ValueError(f"{fn}(): devices differ: {first_name} on {first.device}, {name} on {t.device}")
        if t.dtype != first.dtype:
            raise TypeError(f"{fn}(): dtypes differ: {first_name} {first.dtype} vs {name} {t.dtype}")
        if same_shape and t.shape != first.shape:
            raise ValueError(f"{fn}(): shapes differ: {first_name} {tuple(first.shape)} vs {name} {tuple(t.shape)}")


def overlaps(t: torch.Tensor) -> bool:
    """True when two elements of `t` may share memory (an expanded tensor, strides too small for the dimensions
    inside them), which a kernel writing `t` in place must refuse: its programs would race. Each dimension of more
    than one element, taken by increasing stride, must step past the whole extent of those before it (a sufficient
    test: a view whose dimensions interleave without touching is taken for overlapping)."""
    if t.numel() == 0:
        return False
    extent = 1
    for stride, size in sorted((st, n) for n, st in zip(t.shape, t.stride(), strict=True) if n > 1):
        if stride < extent:
            return True
        extent += (size - 1) * stride
    return False


def require_tiles(fn: str, minimum: int = 1, **sizes: int) -> None:
    """Refuse a tile size a kernel cannot use, before any launch: each of `sizes` must be a power of two (what
    `tl.arange` takes) of at least `minimum` (16 where it is a side of a `tl.dot`)."""
    for name, value in sizes.items():
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum or value & (value - 1):
            raise ValueError(f"{fn}(): {name} must be a power of two >= {minimum}, got {value!r}")
