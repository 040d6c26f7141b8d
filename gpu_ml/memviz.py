"""Which elements a Triton kernel reads and writes: a launch run in Triton's interpreter, every access recorded.

`trace(kernel, grid, *args)` runs the kernel on CPU copies of its tensor arguments (in Triton's
interpreter, also on a machine with a GPU) and records, for each tensor argument, how many times
each element is read and written, by which programs, and every access that falls outside all the
tensor arguments (an out-of-bounds access: recorded and suppressed, so that it cannot crash the
process). `draw(t)` pictures it, one row per tensor argument (reads, writes); `show` does both and
prints a summary. The idea is triton-viz's, used by Triton-Puzzles; this is a small version built
on the interpreter the project already uses.
"""

from __future__ import annotations

import inspect
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np
import torch

from gpu_ml.notebook import patch_interpreter
from gpu_ml.validate import span


@dataclass
class Access:
    """Counts of reads and writes per element of one tensor argument, in its storage order."""

    name: str
    shape: tuple[int, ...]
    reads: np.ndarray
    writes: np.ndarray
    read_by: np.ndarray  # the (linear) id of the last program that read each element, -1 for none
    written_by: np.ndarray  # ... that wrote it
    programs: set[tuple[int, int, int]] = field(default_factory=set)

    @classmethod
    def empty(cls, name: str, t: torch.Tensor) -> Access:
        n = span(t)
        pitch = t.stride(0) if t.dim() == 2 and t.stride(1) == 1 and t.stride(0) != t.shape[1] else None
        return cls(name, tuple(t.shape), np.zeros(n, np.int64), np.zeros(n, np.int64), np.full(n, -1), np.full(n, -1),
                   pitch=pitch)

    pitch: int | None = None  # elements from one row to the next in memory (2-D tensors), else None

    def grid(self, counts: np.ndarray) -> np.ndarray:
        """`counts` (one per element of the tensor's memory span) as a 2-D picture: rows x the row pitch
        (a 1-D tensor is one row; a row slice of a wider matrix shows the columns between its rows)."""
        cols = self.pitch or (self.shape[-1] if len(self.shape) >= 1 and self.shape[-1] > 0 else 0) or counts.size
        cols = max(1, cols)
        padded = np.full(-(-counts.size // cols) * cols, -1 if counts.min(initial=0) < 0 else 0, dtype=counts.dtype)
        padded[: counts.size] = counts
        return padded.reshape(-1, cols)


@dataclass
class Trace:
    """Everything one traced launch did: per-tensor access counts and the out-of-bounds accesses."""

    grid: tuple[int, int, int]
    tensors: dict[str, Access]
    out_of_bounds: list[str]

    def summary(self) -> str:
        """One line per tensor argument, then each out-of-bounds access (at most 5 listed)."""
        lines = [f"grid {self.grid}: {self.grid[0] * self.grid[1] * self.grid[2]} programs"]
        for a in self.tensors.values():
            racy = int((a.writes > 1).sum())
            lines.append(f"  {a.name} {list(a.shape)}: {int((a.reads > 0).sum())} elements read, "
                         f"{int((a.writes > 0).sum())} written" + (f", {racy} written more than once" if racy else ""))
        if self.out_of_bounds:
            lines.append(f"  {len(self.out_of_bounds)} out-of-bounds accesses (suppressed), e.g.:")
            lines += [f"    {m}" for m in self.out_of_bounds[:5]]
        else:
            lines.append("  no out-of-bounds access")
        return "\n".join(lines)


def _interpreted(kernel):
    """The kernel as Triton's interpreter runs it: itself in interpreter mode, else an InterpretedFunction of it."""
    from triton.runtime.interpreter import InterpretedFunction

    if isinstance(kernel, InterpretedFunction):
        return kernel
    fn = getattr(kernel, "fn", None)
    if fn is None or not callable(fn):
        raise TypeError(f"trace() needs a @triton.jit kernel, got {type(kernel).__name__}")
    return InterpretedFunction(fn)


@contextmanager
def _recording(tensors: dict[str, torch.Tensor], trace: Trace):
    """Patch the interpreter's masked load and store to count accesses per tensor and drop out-of-bounds ones."""
    import triton.language as tl
    from triton.runtime import interpreter
    from triton.runtime.jit import JITFunction

    builder = interpreter.interpreter_builder
    ranges = []  # (start address, end address, element size, name), one per tensor argument
    for name, t in tensors.items():
        start = t.data_ptr()
        ranges.append((start, start + trace.tensors[name].reads.size * t.element_size(), t.element_size(), name))

    def account(kind: str, ptrs, mask) -> np.ndarray:
        addresses = np.asarray(ptrs.data).astype(np.int64)
        active = np.broadcast_to(np.asarray(mask.data).astype(bool), addresses.shape)
        inside = np.zeros(addresses.shape, dtype=bool)
        for start, end, size, name in ranges:
            hit = active & (addresses >= start) & (addresses < end)
            if hit.any():
                access, index = trace.tensors[name], (addresses[hit] - start) // size
                x, y, z = builder.grid_idx
                np.add.at(access.reads if kind == "read" else access.writes, index, 1)
                (access.read_by if kind == "read" else access.written_by)[index] = x + trace.grid[0] * (
                    y + trace.grid[1] * z)
                access.programs.add(builder.grid_idx)
                inside |= hit
        stray = active & ~inside
        if stray.any() and len(trace.out_of_bounds) < 100:
            trace.out_of_bounds.append(f"program {builder.grid_idx} {kind}s {int(stray.sum())} address(es) outside "
                                       f"every tensor argument, e.g. {_describe(int(addresses[stray][0]), ranges)}")
        return inside  # the accesses that may go ahead

    original_load, original_store = builder.create_masked_load, builder.create_masked_store
    original_call, interpreted = JITFunction.__call__, {}
    patch_interpreter()  # before any program runs: Triton 3.6 + NumPy 2 fail scalar loops and int sums that wrap

    def device_call(self, *args, **kwargs):
        """A @triton.jit function called from the traced kernel (tl.sum, say, outside interpreter mode): interpreted,
        as InterpretedFunction.__call__ does, but with its patches of triton.language undone afterwards (Triton never
        undoes them: harmless in interpreter mode, but on a GPU the compiler would then build with them)."""
        if self.fn not in interpreted:
            interpreted[self.fn] = interpreter.InterpretedFunction(self.fn)
        scope = interpreter._patch_lang(self.fn)
        try:
            return interpreted[self.fn].rewrite()(*args, **kwargs)
        except Exception as exc:
            raise interpreter.InterpreterError(repr(exc)) from exc
        finally:
            scope.restore()

    def load(ptrs, mask, other, *rest):
        safe = interpreter.TensorHandle(account("read", ptrs, mask), tl.int1)
        return original_load(ptrs, safe, other, *rest)

    def store(ptrs, value, mask, *rest):
        safe = interpreter.TensorHandle(account("write", ptrs, mask), tl.int1)
        return original_store(ptrs, value, safe, *rest)

    builder.create_masked_load, builder.create_masked_store = load, store
    JITFunction.__call__ = device_call
    try:
        yield
    finally:
        builder.create_masked_load, builder.create_masked_store = original_load, original_store
        JITFunction.__call__ = original_call


def _describe(address: int, ranges) -> str:
    """Where a stray address lies: its element offset from the nearest tensor argument."""
    start, end, size, name = min(ranges, key=lambda r: min(abs(address - r[0]), abs(address - r[1])))
    return f"offset {(address - start) // size} of {name}, which has {(end - start) // size} elements"


def trace(kernel, grid: tuple[int, ...], *args, **kwargs) -> Trace:
    """Run `kernel[grid](*args, **kwargs)` in Triton's interpreter on CPU copies of the tensor arguments.

    Returns the Trace; the caller's tensors are not modified. A tensor argument may be a strided view
    (e.g. rows of a wider matrix): its copy keeps the strides, and its counts cover its memory span.
    """
    if not isinstance(grid, tuple) or not 1 <= len(grid) <= 3 or not all(isinstance(g, int) and g > 0 for g in grid):
        raise ValueError(f"grid must be a tuple of 1 to 3 positive ints, got {grid!r}")
    fn = _interpreted(kernel)
    bound = inspect.signature(fn.fn).bind(*args, **kwargs)
    tensors = {}
    for name, value in bound.arguments.items():
        if isinstance(value, torch.Tensor):
            memory = value.detach().as_strided((span(value),), (1,)).to("cpu", copy=True)  # its whole span
            tensors[name] = memory.as_strided(value.shape, value.stride())  # the same view of the copy
            bound.arguments[name] = tensors[name]
    full = grid + (1,) * (3 - len(grid))
    result = Trace(full, {n: Access.empty(n, t) for n, t in tensors.items()}, [])
    with _recording(tensors, result):
        fn[grid](*bound.args, **bound.kwargs)
    return result


def draw(t: Trace, *, max_cells: int = 4096):
    """A figure with one row per tensor argument: the elements each program read, and wrote.

    A cell's colour is the program that last touched it (programs numbered x + gx * (y + gy * z)),
    white where no program did; a cell touched more than once is marked with its count (when the
    picture is small enough to read). Out-of-bounds accesses are counted in the title, in red.
    """
    import matplotlib.pyplot as plt

    programs = t.grid[0] * t.grid[1] * t.grid[2]
    cmap = plt.get_cmap("tab20", max(2, min(programs, 20))).with_extremes(bad="white")
    rows = max(1, len(t.tensors))
    fig, axes = plt.subplots(rows, 2, figsize=(10, 0.8 + 1.8 * rows), squeeze=False)
    for (ax_r, ax_w), access in zip(axes, t.tensors.values(), strict=False):
        for ax, by, counts, kind in ((ax_r, access.read_by, access.reads, "read"),
                                     (ax_w, access.written_by, access.writes, "written")):
            picture = access.grid(by[:max_cells])
            ax.pcolormesh(np.ma.masked_less(picture % 20, 0) if programs > 20 else np.ma.masked_less(picture, 0),
                          cmap=cmap, vmin=0, vmax=max(1, min(programs, 20) - 1), edgecolors="lightgray",
                          linewidth=0.5)
            if picture.size <= 256:
                for (r, c), n in np.ndenumerate(access.grid(counts[:max_cells])):
                    if n > 1:
                        ax.text(c + 0.5, r + 0.5, str(n), ha="center", va="center", fontsize=7)
            ax.set_aspect("equal")
            ax.invert_yaxis()
            ax.set_title(f"{access.name} {list(access.shape)}: {kind}", fontsize=9)
            ax.set_xticks([])
            ax.set_yticks([])
    title = f"grid {t.grid}: colour = program"
    if t.out_of_bounds:
        title += f"; {len(t.out_of_bounds)} out-of-bounds accesses (suppressed)"
    fig.suptitle(title, color="red" if t.out_of_bounds else "black")
    fig.tight_layout()
    return fig


def show(kernel, grid: tuple[int, ...], *args, **kwargs) -> Trace:
    """trace() a launch, print its summary and draw it (in a notebook the figure appears below the cell)."""
    import matplotlib.pyplot as plt

    t = trace(kernel, grid, *args, **kwargs)
    print(t.summary())
    draw(t)
    plt.show()
    return t
