"""What a lesson's first cell calls: `setup()` (mode, interpreter, `%%cuda`, GPU cells) and `pick()` (sizes)."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from typing import TYPE_CHECKING

from gpu_ml.bench import claim_gpu_lock, hold_gpu
from gpu_ml.env import Env, arch_number, capability, detect, free_memory, has_gpu, in_colab

if TYPE_CHECKING:
    import torch

# Packages a notebook may need that Colab's image does not always have.
_COLAB_PACKAGES = ("triton", "tqdm", "ipywidgets")

# The first line of a cell that needs a CUDA GPU (the cell also carries the tag `gpu`, which the
# test harness reads); in Jupyter, `gpu_cell` makes such a cell skip itself where there is no GPU.
# `#| gpu sm_80` asks for compute capability 8.0 or newer: on an older GPU the cell skips itself too.
GPU_LINE = re.compile(r"#\| gpu(?: (sm_\d+a?))?")
SKIPPED = ("skipped: this cell needs a CUDA GPU (its first line says #| gpu) and this machine has none. "
           "The notebook goes on without it; on Colab, pick a GPU under Runtime > Change runtime type.")


def gpu_cell(lines: list[str]) -> list[str]:
    """IPython input transformer: a cell whose first line is `#| gpu` (or `#| gpu sm_80`) runs as written on a
    machine with a CUDA GPU (of that compute capability or newer); elsewhere it is replaced by a line that prints
    why it was skipped."""
    marker = GPU_LINE.fullmatch(lines[0].strip()) if lines else None
    if marker is None:
        return lines
    if not has_gpu():
        return [f"print({SKIPPED!r})\n"]
    need, cap = marker.group(1), capability()
    if need and cap is not None and 10 * cap[0] + cap[1] < arch_number(need):
        why = (f"skipped: this cell needs a GPU of compute capability {arch_number(need) / 10:.1f} or newer (its "
               f"first line says #| gpu {need}); this one has {cap[0]}.{cap[1]}. The notebook goes on without it.")
        return [f"print({why!r})\n"]
    return lines


def _defined_jit_kernels() -> list[str]:
    """Names of compiled-mode @triton.jit kernels already defined in the notebook's namespace."""
    if "triton" not in sys.modules:
        return []
    from triton.runtime.jit import JITFunction

    namespace = vars(sys.modules["__main__"]) if "__main__" in sys.modules else {}
    return [name for name, value in namespace.items() if isinstance(value, JITFunction)]


def _colab_install() -> None:
    missing = [p for p in _COLAB_PACKAGES if importlib.util.find_spec(p) is None]
    if missing:
        print(f"Colab: installing {', '.join(missing)}")
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", *missing], check=True)


def _prepare_ipython() -> None:
    """In IPython/Jupyter: load `%%cuda`, and let `#| gpu` cells skip themselves without a GPU."""
    try:
        from IPython import get_ipython
    except ImportError:
        return
    ip = get_ipython()
    if ip is not None:
        from gpu_ml.cuda import CudaMagics

        ip.register_magics(CudaMagics)
        if gpu_cell not in ip.input_transformers_cleanup:
            ip.input_transformers_cleanup.append(gpu_cell)
        if claim_gpu_lock() and _hold_for_cell not in ip.events.callbacks["pre_run_cell"]:
            ip.events.register("pre_run_cell", _hold_for_cell)
            ip.events.register("post_run_cell", _release_after_cell)


def _hold_for_cell(info) -> None:
    """Under `gpu-ml test` with notebooks sharing one GPU: every cell runs holding the lock shared, beside other
    notebooks' cells; only measurements (gpu_alone) have the GPU alone, and they pause the cells running elsewhere
    (gpu_ml.bench.hold_gpu). `#| gpu` cells were held exclusively until 2026-12-04: a whole-suite run with six
    notebooks at a time then spent most of its time waiting for the lock (a measurement waited for the cells
    running, and every cell for the measurements); a cell that times anything itself wraps that in gpu_alone."""
    hold_gpu("shared")


def _release_after_cell(result) -> None:
    hold_gpu(None)


def setup(*, quiet: bool = False) -> Env:
    """Prepare a notebook: detect the GPU, switch Triton to its interpreter on CPU, load `%%cuda`,
    and make cells whose first line is `#| gpu` skip themselves (with a message) where there is no GPU.

    Call it in the first code cell, before any `@triton.jit` kernel is defined: on a CPU-only
    machine it sets TRITON_INTERPRET=1, which Triton reads when a kernel is defined.
    """
    if in_colab():
        _colab_install()
    gpu = has_gpu()
    if not gpu:
        too_late = _defined_jit_kernels()
        if too_late and os.environ.get("TRITON_INTERPRET") != "1":
            raise RuntimeError(
                "setup() ran after these Triton kernels were defined: "
                + ", ".join(too_late)
                + ". On a CPU they must be defined after setup() switches Triton to its "
                "interpreter: restart the kernel and run the setup cell first."
            )
        os.environ["TRITON_INTERPRET"] = "1"
        patch_interpreter()
    _prepare_ipython()
    env = detect()
    if not quiet:
        print(env.summary())
    return env


def patch_interpreter() -> None:
    """Mend two faults of older Triton interpreters with NumPy 2, as Triton 3.9's interpreter behaves.

    A loop over a scalar argument (`range(0, N, B)`): Triton 3.6 takes int() of the argument's 1-element array, a
    TypeError since NumPy 2.4; 3.9 squeezes the array first. An integer reduction to a scalar that overflows (an
    int32 `tl.sum`, which compiled kernels wrap): 3.6 raises OverflowError, as NumPy 2 refuses an out-of-range Python
    integer in `np.array(..., dtype)`; 3.9 narrows it with `astype` (triton-lang/triton#11531). It wraps
    `triton.runtime.interpreter._patch_lang` and replaces `ReduceScanOpInterface.to_tensor`; calling it again
    changes nothing.
    """
    import numpy as np
    import triton.language as tl
    from triton.runtime import interpreter

    original = interpreter._patch_lang
    if not getattr(original, "squeezes_index", False):
        def patch_lang(fn):
            scope = original(fn)
            scope.set_attr(tl.core.tensor, "__index__", lambda self: int(self.handle.data.squeeze()))
            return scope

        patch_lang.squeezes_index, patch_lang.__wrapped__ = True, original
        interpreter._patch_lang = patch_lang

    reductions = interpreter.ReduceScanOpInterface
    if not getattr(reductions.to_tensor, "narrows", False):
        def to_tensor(self, ret, dtype):
            np_dtype = interpreter._get_np_dtype(dtype)
            if hasattr(ret, "shape") and ret.shape:
                return tl.core.tensor(interpreter.TensorHandle(ret.astype(np_dtype), dtype.scalar),
                                      tl.block_type(dtype, list(ret.shape)))
            return tl.core.tensor(interpreter.TensorHandle(np.array([ret]).astype(np_dtype), dtype.scalar), dtype)

        to_tensor.narrows, to_tensor.__wrapped__ = True, reductions.to_tensor
        reductions.to_tensor = to_tensor


def pick(*, gpu, cpu):
    """Choose a problem size (or any value): `gpu` when a CUDA GPU is present, else `cpu`."""
    return gpu if has_gpu() else cpu


def fits(nbytes: float, *, share: float = 0.9) -> bool:
    """True when `nbytes` more fit in `share` of the GPU memory this process may still allocate (`free_memory()`):
    how a benchmark leaves out the sizes a smaller GPU (a 15 GB T4, an 8 GB laptop) cannot hold. False without a GPU."""
    available = free_memory()
    return available is not None and nbytes <= share * available


def keep_fitting(sizes: list[int], bytes_per: float) -> list[int]:
    """The sizes whose `size * bytes_per` bytes `fits`, saying which were left out; without a GPU all of them."""
    if not has_gpu():
        return list(sizes)
    left_out = [n for n in sizes if not fits(n * bytes_per)]
    if left_out:
        print("left out, more than the free GPU memory holds: " + ", ".join(
            f"2^{n.bit_length() - 1}" if n & (n - 1) == 0 else str(n) for n in left_out))
    return [n for n in sizes if n not in left_out]


def halve_to_fit(n: int, bytes_per: float, *, what: str, at_least: int = 1) -> int:
    """`n`, halved until `n * bytes_per` bytes `fits` (never below `at_least`), saying so when it halved.

    How a cell sized for the reference GPU keeps its size there and shrinks on a smaller one. Without a GPU `n`
    comes back as it is (CPU runs pick their own sizes).
    """
    if not has_gpu():
        return n
    chosen = n
    while chosen // 2 >= at_least and not fits(chosen * bytes_per):
        chosen //= 2
    if chosen != n:
        print(f"{what}: {chosen} instead of {n}, to fit in the {free_memory() / 2**30:.1f} GiB this process may "
              "still allocate")
    return chosen


def half_precision(env: Env) -> tuple[str, torch.dtype]:
    """("bf16", torch.bfloat16) on a GPU with bf16 (8.0+), else ("fp16", torch.float16), saying why on a GPU below
    8.0 (a T4): the 16-bit dtype a lesson measures in."""
    import torch

    if env.bf16:
        return "bf16", torch.bfloat16
    if env.gpu:
        print(f"bf16 needs compute capability 8.0+ (this GPU has {env.capability[0]}.{env.capability[1]}): fp16 here")
    return "fp16", torch.float16
