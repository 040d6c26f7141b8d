"""Environment detection for the notebooks: GPU or CPU mode, versions, problem sizes."""

from __future__ import annotations

import importlib.util
import os
import platform
import subprocess
import sys
from dataclasses import dataclass, field

# Packages a notebook may need that Colab's image does not always have.
_COLAB_PACKAGES = ("triton", "tqdm", "ipywidgets")


@dataclass(frozen=True)
class Env:
    """What `setup()` found: the mode the notebook runs in and the machine under it."""

    mode: str  # "gpu" or "cpu"
    device: str  # e.g. "NVIDIA H200" or "CPU: Triton interpreter"
    capability: tuple[int, int] | None = None
    sm_count: int | None = None
    versions: dict[str, str] = field(default_factory=dict)

    @property
    def gpu(self) -> bool:
        """True when a CUDA GPU is present and every cell runs on it."""
        return self.mode == "gpu"

    @property
    def arch(self) -> str | None:
        """nvcc architecture of this GPU, e.g. "sm_90a" on Hopper, or None on CPU."""
        return None if self.capability is None else nvcc_arch(self.capability)

    def summary(self) -> str:
        """One line: device, SMs, capability and versions."""
        parts = [self.device]
        if self.gpu:
            parts.append(f"{self.sm_count} SMs, sm_{self.capability[0]}{self.capability[1]}")
        parts.append(", ".join(f"{k} {v}" for k, v in self.versions.items()))
        return " | ".join(parts)


def nvcc_arch(capability: tuple[int, int]) -> str:
    """nvcc -arch for a compute capability: (9, 0) -> "sm_90a", (8, 6) -> "sm_86"."""
    major, minor = capability
    suffix = "a" if major >= 9 else ""  # arch-specific features (wgmma, TMA) need the "a"
    return f"sm_{major}{minor}{suffix}"


def has_gpu() -> bool:
    """True when torch sees a CUDA device (and GPU_ML_FORCE_CPU is not set)."""
    if os.environ.get("GPU_ML_FORCE_CPU") == "1":
        return False
    import torch

    return torch.cuda.is_available()


def in_colab() -> bool:
    """True inside Google Colab."""
    return "google.colab" in sys.modules


def versions() -> dict[str, str]:
    """Versions of Python, torch, triton and the CUDA runtime torch was built with."""
    import torch

    out = {"python": platform.python_version(), "torch": torch.__version__}
    if importlib.util.find_spec("triton") is not None:
        import triton

        out["triton"] = triton.__version__
    if torch.version.cuda:
        out["cuda"] = torch.version.cuda
    return out


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
    if gpu:
        import torch

        props = torch.cuda.get_device_properties(0)
        env = Env(
            mode="gpu",
            device=props.name,
            capability=(props.major, props.minor),
            sm_count=props.multi_processor_count,
            versions=versions(),
        )
    else:
        env = Env(mode="cpu", device="CPU: Triton interpreter, CUDA compile-only", versions=versions())
    if not quiet:
        print(env.summary())
    return env


def pick(*, gpu, cpu):
    """Choose a problem size (or any value): `gpu` when a CUDA GPU is present, else `cpu`."""
    return gpu if has_gpu() else cpu
