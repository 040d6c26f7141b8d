"""What a lesson's first cell calls: `setup()` (mode, interpreter, `%%cuda`) and `pick()` (sizes)."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

from gpu_ml.env import Env, detect, has_gpu, in_colab

# Packages a notebook may need that Colab's image does not always have.
_COLAB_PACKAGES = ("triton", "tqdm", "ipywidgets")


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


def _load_cuda_magic() -> None:
    try:
        from IPython import get_ipython
    except ImportError:
        return
    ip = get_ipython()
    if ip is not None:
        from gpu_ml.cuda import CudaMagics

        ip.register_magics(CudaMagics)


def setup(*, quiet: bool = False) -> Env:
    """Prepare a notebook: detect the GPU, switch Triton to its interpreter on CPU, load `%%cuda`.

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
    _load_cuda_magic()
    env = detect()
    if not quiet:
        print(env.summary())
    return env


def pick(*, gpu, cpu):
    """Choose a problem size (or any value): `gpu` when a CUDA GPU is present, else `cpu`."""
    return gpu if has_gpu() else cpu
