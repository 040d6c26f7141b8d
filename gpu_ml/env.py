"""Detection only: GPU or CPU mode, capability, versions. Imports nothing else of gpu_ml."""

from __future__ import annotations

import functools
import importlib.util
import os
import platform
import re
import sys
from dataclasses import dataclass, field


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
    def bf16(self) -> bool:
        """True on a GPU with bf16 arithmetic: compute capability 8.0+ (Ampere on), not a T4 (7.5), not CPU."""
        return self.gpu and self.capability >= (8, 0)

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


def arch_number(arch: str) -> int:
    """75 for "sm_75", 90 for "sm_90a": compute capability as nvcc's arch names it, for comparisons."""
    match = re.fullmatch(r"sm_(\d+)a?", arch)
    if match is None:
        raise ValueError(f"not an nvcc arch like sm_80 or sm_90a: {arch!r}")
    return int(match.group(1))


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


# GPU_ML_EMULATE=<profile>: a smaller GPU, on a bigger one. The capability reported (so capability-gated
# paths are the small GPU's, and %%cuda cells and PyTorch extensions build for its arch, run by the driver's JIT from
# PTX) and the memory torch may allocate are the profile's; the speed is not.
EMULATED = {"t4": ("Tesla T4", (7, 5), 15.0), "a100": ("NVIDIA A100-SXM4-80GB", (8, 0), 80.0)}


def emulated() -> tuple[str, tuple[int, int], float] | None:
    """(name, capability, memory GB) of the GPU_ML_EMULATE profile, or None when it is not set."""
    profile = os.environ.get("GPU_ML_EMULATE", "")
    if not profile:
        return None
    if profile not in EMULATED:
        raise ValueError(f"GPU_ML_EMULATE={profile!r}: the profiles are {', '.join(EMULATED)}")
    return EMULATED[profile]


def capability() -> tuple[int, int] | None:
    """This GPU's compute capability (the emulated one under GPU_ML_EMULATE), or None without a GPU."""
    if not has_gpu():
        return None
    profile = emulated()
    if profile is not None:
        return profile[1]
    import torch

    return _device_capability(torch.cuda.current_device())


@functools.cache
def _device_capability(index: int) -> tuple[int, int]:
    """A device's capability, asked once: wrappers check it on every launch of a bf16 kernel."""
    import torch

    return torch.cuda.get_device_capability(index)


def free_memory() -> int | None:
    """Bytes this process may still allocate on the GPU: the device's free memory plus what torch's caching
    allocator holds unused; under GPU_ML_EMULATE at most the profile's memory less what torch has allocated.
    None without a GPU."""
    if not has_gpu():
        return None
    import torch

    free, _ = torch.cuda.mem_get_info()
    allocated = torch.cuda.memory_allocated()
    available = free + torch.cuda.memory_reserved() - allocated
    profile = emulated()
    if profile is not None:
        available = min(available, int(profile[2] * 2**30) - allocated)
    return max(0, available)


def detect() -> Env:
    """The GPU torch sees (name, capability, SMs) or CPU mode, with versions.

    Under GPU_ML_EMULATE it reports the profile's name and capability, caps the memory torch may
    allocate at the profile's (torch.cuda.set_per_process_memory_fraction), and has PyTorch's extensions built
    for the profile's arch with PTX (TORCH_CUDA_ARCH_LIST, replacing one that names the real GPU).
    """
    if not has_gpu():
        return Env(mode="cpu", device="CPU: Triton interpreter, CUDA compile-only", versions=versions())
    import torch

    props = torch.cuda.get_device_properties(0)
    name, profile = props.name, emulated()
    if profile is not None:
        name = f"{profile[0]} (emulated)"  # not the host's name: hardware.lookup must find the profile's
        torch.cuda.set_per_process_memory_fraction(min(1.0, profile[2] * 2**30 / props.total_memory))
        os.environ["TORCH_CUDA_ARCH_LIST"] = "{}.{}+PTX".format(*profile[1])
    return Env(
        mode="gpu",
        device=name,
        capability=capability(),
        sm_count=props.multi_processor_count,
        versions=versions(),
    )
