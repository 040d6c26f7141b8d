"""The FlashAttention lessons' benchmark: shapes, inputs, FLOPs, SDPA backends, the table and plot of a race.

Both lessons (forward and backward) measure at B * N = 16k tokens and H * d = 2048 over N in BENCH_N,
so every point does the same work per token, and compare against SDPA pinned to each backend.
"""

from __future__ import annotations

import math

import torch
from torch.nn.attention import SDPBackend

from gpu_ml.env import capability
from gpu_ml.models import attention_flops

TOKENS, HIDDEN = 16384, 2048  # B * N and H * d of every benchmark shape
BENCH_N = (1024, 4096, 16384)
BACKENDS = {"FLASH": SDPBackend.FLASH_ATTENTION, "cuDNN": SDPBackend.CUDNN_ATTENTION,
            "EFFICIENT": SDPBackend.EFFICIENT_ATTENTION}

Rows = dict[tuple[int, bool], dict[str, float]]  # (N, causal) -> {provider: TFLOP/s}


def bench_flops(n: int, d: int, causal: bool) -> int:
    """Forward FLOPs at sequence length n, head dim d: FlashAttention's count (half when causal)."""
    return attention_flops(TOKENS // n, HIDDEN // d, n, n, d, causal, causal_half=True)


def bench_inputs(n: int, d: int, count: int = 3, dtype: torch.dtype = torch.bfloat16,
                 requires_grad: bool = False, device: str = "cuda") -> list[torch.Tensor]:
    """`count` random [TOKENS // n, HIDDEN // d, n, d] tensors (q, k, v[, do]), the same for every call."""
    torch.manual_seed(0)
    b, h = TOKENS // n, HIDDEN // d
    return [torch.randn(b, h, n, d, device=device, dtype=dtype, requires_grad=requires_grad) for _ in range(count)]


def fused_backend() -> str:
    """The key in BACKENDS of SDPA's fused backend to race: "FLASH" from compute capability 8.0 (and without a GPU),
    else "EFFICIENT", saying so (FLASH needs 8.0+)."""
    cap = capability()
    if cap is None or cap >= (8, 0):
        return "FLASH"
    print(f"SDPA's FLASH backend needs compute capability 8.0+ (this GPU has {cap[0]}.{cap[1]}): its EFFICIENT "
          "backend stands in for it here")
    return "EFFICIENT"


def show_race(rows: Rows, d: int, axes, direction: str, ylabel: str = "TFLOP/s", baseline: str = "FLASH",
              dtype: str = "bf16") -> None:
    """Print TFLOP/s per provider and ours / baseline at every (N, causal); plot not causal and causal on two axes."""
    providers = list(rows[BENCH_N[0], False])
    print(f"d = {d}: {direction} TFLOP/s, and ours / {baseline} per point")
    print(f"{'N':>6} {'causal':>6} " + " ".join(f"{p:>9}" for p in providers) + f"   ours/{baseline}")
    for (n, causal), row in rows.items():
        print(f"{n:6} {causal!s:>6} " + " ".join(f"{t:9.0f}" for t in row.values())
              + f"   {row['ours'] / row[baseline]:.3f}x")
    for ax, causal in zip(axes, (False, True), strict=True):
        for provider in providers:
            ax.plot(BENCH_N, [rows[n, causal][provider] for n in BENCH_N], marker="o", label=provider)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("sequence length N (B * N = 16k tokens)")
        ax.set_ylabel(ylabel)
        ax.set_title(f"{direction}, {dtype}, d = {d}, {'causal' if causal else 'not causal'}")
        ax.grid(True, alpha=0.3)
        ax.legend()


def ratios(rows: Rows, baseline: str) -> list[float]:
    """ours / baseline at every point where the baseline ran (NaN: it refused the shape)."""
    return [row["ours"] / row[baseline] for row in rows.values() if not math.isnan(row[baseline])]
