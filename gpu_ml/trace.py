"""Count the memory traffic (and matmul FLOPs) of PyTorch code, one ATen op at a time; and its peak memory.

`Traffic` is a `TorchDispatchMode`: every ATen operation PyTorch runs inside it (in eager mode,
one kernel each) passes through it with its input and output tensors. It charges each op the
bytes of those tensors: logical traffic, what the kernel asks of memory before any cache absorbs
part of it. It runs on any device, also on `meta` tensors, which have shapes but no storage.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, NamedTuple

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from gpu_ml.bench import require_gpu

# Ops that move no data although PyTorch does not mark them as views: a reshape of a fresh result
# and allocations (their memory is written by the op that fills it).
FREE_OPS = frozenset({"_unsafe_view", "scalar_tensor", "empty", "empty_strided"})
MATMULS = frozenset({"mm", "bmm", "addmm"})


class Op(NamedTuple):
    """One recorded ATen op: short name ("mul"), overload ("mul.Tensor"), output dtype ("float32"),
    matmul FLOPs (0 for other ops), bytes of the tensors read and of those written."""

    name: str
    overload: str
    dtype: str
    flops: int
    read: int
    written: int

    @property
    def nbytes(self) -> int:
        return self.read + self.written


def _tensors(tree: Any) -> list[torch.Tensor]:
    return [t for t in tree_leaves(tree) if isinstance(t, torch.Tensor)]


def _nbytes(tensors: list[torch.Tensor]) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


def matmul_flops(name: str, args: tuple) -> int:
    """2 * batch * m * k * n for mm, bmm and addmm (whose bias add is not counted); 0 for other ops."""
    if name not in MATMULS:
        return 0
    a, b = (args[1], args[2]) if name == "addmm" else (args[0], args[1])
    *batch, m, k = a.shape
    return 2 * math.prod(batch) * m * k * b.shape[-1]


class Traffic(TorchDispatchMode):
    """Records each ATen op run inside it as an `Op` in `self.ops`; views and allocations are skipped.

    `_safe_softmax` (a C++ composite the mode sees as one call) is run as the ops it is made of,
    as aten/src/ATen/native/SoftMax.cpp writes it: softmax, isneginf, all over the row, where.
    """

    def __init__(self) -> None:
        super().__init__()
        self.ops: list[Op] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = func.overloadpacket.__name__
        if name == "_safe_softmax":
            x, dim = args[0], args[1]
            with self:
                p = torch.softmax(x, dim)
                return torch.where(torch.isneginf(x).all(dim, keepdim=True), 0.0, p)
        out = func(*args, **kwargs)
        if not func.is_view and name not in FREE_OPS:
            outputs = _tensors(out)
            dtype = str(outputs[0].dtype).removeprefix("torch.") if outputs else ""
            self.ops.append(Op(name, str(func).removeprefix("aten."), dtype, matmul_flops(name, args),
                               _nbytes(_tensors((args, kwargs))), _nbytes(outputs)))
        return out

    def total_bytes(self) -> int:
        """Bytes read and written by every recorded op."""
        return sum(op.nbytes for op in self.ops)

    def total_flops(self) -> int:
        """Matmul FLOPs of every recorded op."""
        return sum(op.flops for op in self.ops)


def peak_bytes(fn: Callable[[], object]) -> int:
    """Peak CUDA memory allocated while `fn()` runs, above what was allocated before (its result is freed)."""
    require_gpu("peak_bytes()")
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    out = fn()
    torch.cuda.synchronize()
    del out
    return torch.cuda.max_memory_allocated() - base
