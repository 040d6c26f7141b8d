"""Peak numbers of common GPUs (vendor datasheets, dense, boost clock) and a roofline helper."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True)
class GPUSpec:
    """Datasheet peaks of one GPU: TFLOP/s by dtype (dense tensor-core rates for 16-bit and tf32)."""

    name: str
    sms: int
    memory_gb: float
    bandwidth_gbs: float  # HBM/GDDR bandwidth, 10^9 bytes per second
    l2_mb: float
    tflops: dict[str, float]  # "fp32" (CUDA cores), "tf32", "fp16", "bf16", "fp8" (tensor cores)

    def peak(self, dtype: str) -> float:
        """Peak TFLOP/s for `dtype` ("fp32", "tf32", "fp16", "bf16", "fp8")."""
        if dtype not in self.tflops:
            raise KeyError(f"{self.name} has no {dtype} peak listed; it has {sorted(self.tflops)}")
        return self.tflops[dtype]

    @property
    def half(self) -> str:
        """The 16-bit tensor-core dtype to quote for this GPU: "bf16" where it has one, else "fp16" (a T4)."""
        return "bf16" if "bf16" in self.tflops else "fp16"

    def ridge(self, dtype: str) -> float:
        """Arithmetic intensity (FLOP per byte) where memory-bound turns into compute-bound."""
        return self.peak(dtype) * 1e12 / (self.bandwidth_gbs * 1e9)


# Matched in order against the device name, so specific names come before general ones.
GPUS: dict[str, GPUSpec] = {
    "H200": GPUSpec(
        "NVIDIA H200 SXM", 132, 141, 4800, 60, {"fp32": 67, "tf32": 494.7, "fp16": 989.5, "bf16": 989.5, "fp8": 1979}
    ),
    "H100 PCIe": GPUSpec(
        "NVIDIA H100 PCIe", 114, 80, 2000, 50, {"fp32": 51, "tf32": 378, "fp16": 756, "bf16": 756, "fp8": 1513}
    ),
    "H100": GPUSpec(
        "NVIDIA H100 SXM", 132, 80, 3350, 50, {"fp32": 67, "tf32": 494.7, "fp16": 989.5, "bf16": 989.5, "fp8": 1979}
    ),
    "A100-SXM4-40GB": GPUSpec(
        "NVIDIA A100 SXM 40GB", 108, 40, 1555, 40, {"fp32": 19.5, "tf32": 156, "fp16": 312, "bf16": 312}
    ),
    "A100": GPUSpec("NVIDIA A100 SXM 80GB", 108, 80, 2039, 40, {"fp32": 19.5, "tf32": 156, "fp16": 312, "bf16": 312}),
    "L4": GPUSpec("NVIDIA L4", 58, 24, 300, 48, {"fp32": 30.3, "tf32": 60, "fp16": 121, "bf16": 121, "fp8": 242.5}),
    "T4": GPUSpec("NVIDIA T4", 40, 16, 320, 4, {"fp32": 8.1, "fp16": 65}),
    "RTX 4090": GPUSpec(
        "NVIDIA GeForce RTX 4090",
        128,
        24,
        1008,
        72,
        {"fp32": 82.6, "tf32": 82.6, "fp16": 165.2, "bf16": 165.2, "fp8": 330.3},
    ),
}


def lookup(device_name: str) -> GPUSpec | None:
    """The spec whose key is a word of `device_name` (e.g. "NVIDIA H200" -> H200), or None."""
    for key, spec in GPUS.items():
        if re.search(rf"\b{re.escape(key)}\b", device_name, re.IGNORECASE):
            return spec
    return None


def spec_for(env, reference: str | None = "H200") -> GPUSpec | None:
    """The spec of the GPU `env` runs on; on a CPU or an unlisted GPU, `GPUS[reference]` (None: no fallback).

    The fallback lets a notebook on a laptop print the reference GPU's roofline; the caller says so.
    """
    spec = lookup(env.device) if env.gpu else None
    if spec is None and reference is not None:
        spec = GPUS[reference]
    return spec


def attainable(spec: GPUSpec, dtype: str, intensity: float) -> float:
    """Roofline bound in TFLOP/s at `intensity` FLOP/byte: min(peak, bandwidth * intensity)."""
    return min(spec.peak(dtype), spec.bandwidth_gbs * 1e9 * intensity / 1e12)


def roofline_ms(flops: float, nbytes: float, peak_tflops: float, bw_gbs: float) -> float:
    """Roofline time in ms of one kernel: the longer of its compute time and its memory time."""
    return max(flops / (peak_tflops * 1e12), nbytes / (bw_gbs * 1e9)) * 1e3


def copy_bandwidth(nbytes: int = 2**30) -> float:
    """GB/s of a device-to-device copy of `nbytes` (read + written) measured on this GPU. Needs a CUDA GPU."""
    import torch

    from gpu_ml.bench import bench, gbps, require_gpu

    require_gpu("copy_bandwidth()")

    src = torch.empty(nbytes // 2, device="cuda", dtype=torch.bfloat16)
    dst = torch.empty_like(src)
    return gbps(2 * src.nbytes, bench(lambda: dst.copy_(src)))


def read_bandwidth(nbytes: int = 2**30) -> float:
    """GB/s of reading `nbytes` once on this GPU: `torch.sum` over them viewed as int64, replayed from a CUDA graph.

    Each byte is read once and almost nothing written, what a memory-bound kernel that only reads (decode attention)
    can reach. Integer adds keep the sum itself cheap: over bf16 with a float32 accumulator it ran 5% slower on an
    H200 (4,184 against 4,406 GB/s) and would set the roof too low. Needs a CUDA GPU.
    """
    import torch

    from gpu_ml.bench import bench, gbps, require_gpu

    require_gpu("read_bandwidth()")

    x = torch.randn(nbytes // 8 * 4, device="cuda", dtype=torch.bfloat16).view(torch.int64)  # random bits; sums wrap
    return gbps(x.nbytes, bench(lambda: x.sum(), cudagraph=True))


def measure_peaks(n: int = 8192, copy_bytes: int = 2**30, dtype: torch.dtype | None = None) -> tuple[float, float]:
    """(copy bandwidth in GB/s, matmul TFLOP/s) measured on this GPU: `copy_bytes` copied, an n^3 matmul in `dtype`
    (default: bf16 from compute capability 8.0, fp16 below it, as `spec.half` quotes the datasheet).

    The measured roof, beside the datasheet's; the buffers are freed on return. Needs a CUDA GPU.
    """
    import torch

    from gpu_ml.bench import bench, require_gpu, tflops
    from gpu_ml.env import capability

    require_gpu("measure_peaks()")
    if dtype is None:
        dtype = torch.bfloat16 if capability() >= (8, 0) else torch.float16
    copy_gbs = copy_bandwidth(copy_bytes)
    a = torch.randn(n, n, device="cuda", dtype=dtype)
    b = torch.randn(n, n, device="cuda", dtype=dtype)
    return copy_gbs, tflops(2 * n**3, bench(lambda: a @ b))


def plot_roofline(
    spec: GPUSpec,
    dtypes: tuple[str, ...] = ("bf16", "fp32"),
    points: dict[str, tuple[float, float]] | None = None,
    ax=None,
):
    """Draw the roofline of `spec` for each dtype; `points` maps a label to (FLOP/byte, TFLOP/s)."""
    import matplotlib.pyplot as plt
    import numpy as np

    if ax is None:
        _, ax = plt.subplots(figsize=(7, 4.5))
    x = np.logspace(-2, 4, 200)
    for dtype in dtypes:
        ax.plot(x, [attainable(spec, dtype, i) for i in x], label=f"{dtype} roof (ridge {spec.ridge(dtype):.0f})")
    for label, (intensity, achieved) in (points or {}).items():
        ax.scatter([intensity], [achieved], zorder=3)
        ax.annotate(label, (intensity, achieved), textcoords="offset points", xytext=(5, -12), fontsize=8)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOP / byte)")
    ax.set_ylabel("TFLOP/s")
    ax.set_title(f"Roofline: {spec.name} ({spec.bandwidth_gbs / 1000:.2f} TB/s)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    return ax
