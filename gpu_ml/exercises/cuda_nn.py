"""Exercises of cuda/03-nn-components 01-02 (CUDA ones graded like cudalings, on a GPU)."""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F

from gpu_ml.cudalings import Cudaling, checked_call, guarded_buffer, inside_guard, seeded_rng
from gpu_ml.exercises.core import Cases, CudaExercise, Exercise

REDUCTIONS = "cuda/03-nn-components/01_reductions_and_warp_shuffles.ipynb"
SOFTMAX_LN = "cuda/03-nn-components/02_softmax_and_layernorm.ipynb"


def _integers(g: torch.Generator, n: int, device: str) -> torch.Tensor:
    """n float32 integers in [-4, 4]: every partial sum is exact in fp32, so any order gives the exact total."""
    return torch.randint(-4, 5, (n,), generator=g).float().to(device)


# ----------------------------------------------------------------------------- 3.1: sum_one_launch

ONE_LAUNCH_BLOCKS = 256  # the most blocks the stub's host function launches: the size of `partials`


def _one_launch_cases(device: str) -> Cases:
    g = seeded_rng()
    return {"n=1": (torch.tensor([2.5], device=device),),
            "n=1000, normal": (torch.randn(1000, generator=g).to(device),),
            "n=4097, normal (2 blocks)": (torch.randn(4097, generator=g).to(device),),
            "n=2^20+3, integers (256 blocks)": (_integers(g, 2**20 + 3, device),),
            # fractions in 256 blocks: only a fixed order of adding them gives the same bits on both calls
            "n=2^20+3, normal / 100 (256 blocks)": ((torch.randn(2**20 + 3, generator=g) / 100).to(device),),
            "n=3000000, integers (256 blocks, 12 loads per thread)": (_integers(g, 3_000_000, device),)}


def _one_launch_run(fn: Callable, x: torch.Tensor):
    """Two calls on the same counter: the second must find it at 0 again and give the same bits."""
    device = x.device.type
    partials, counter = guarded_buffer(ONE_LAUNCH_BLOCKS, device), guarded_buffer(1, device, torch.int32)
    counter[0] = 0
    outs = []
    for call in ("first", "second"):
        out = guarded_buffer(1, device)
        checked_call(fn, x, partials, counter, out, x.numel())
        left = int(inside_guard(counter, 1, "counter")[0])
        if left != 0:
            raise AssertionError(f"after the {call} call the counter is {left}: the last block must reset it to 0, "
                                 "or the next call never finds its last block")
        inside_guard(partials, ONE_LAUNCH_BLOCKS, "partials")
        outs.append(inside_guard(out, 1))
    if not outs[0].isnan().any() and not torch.equal(outs[0], outs[1]):  # (an out never written: compared below)
        raise AssertionError(f"two calls on the same input gave {outs[0].item()!r} and {outs[1].item()!r}: the last "
                             "block must add the partials in a fixed order (no atomicAdd on the result)")
    return outs[0]


# ----------------------------------------------------------------------------- 3.1: grid_max

MAX_BLOCKS = 1024  # the most blocks grid_max's first pass launches: the size of `partials`


def _max_cases(device: str) -> Cases:
    g = seeded_rng()
    negative = -1 - torch.rand(100_003, generator=g)
    negative[-1] = -0.5  # the largest is the very last element
    masked = torch.randn(5000, generator=g)
    masked[::2] = -torch.inf
    return {"n=1, negative": (torch.tensor([-3.0], device=device),),
            "n=1000, all negative": (-1 - torch.rand(1000, generator=g).to(device),),
            "n=100003, all negative, the largest last": (negative.to(device),),
            "n=5000, every other one -inf": (masked.to(device),),
            "n=7, all -inf": (torch.full((7,), -torch.inf, device=device),),
            "n=3000000, normal": (torch.randn(3_000_000, generator=g).to(device),)}


def _max_run(fn: Callable, x: torch.Tensor):
    partials, out = guarded_buffer(MAX_BLOCKS, x.device.type), guarded_buffer(1, x.device.type)
    partials[:MAX_BLOCKS] = torch.inf  # a second pass over partials the first did not write gets inf (fmaxf drops NaN)
    checked_call(fn, x, partials, out, x.numel())
    inside_guard(partials, MAX_BLOCKS, "partials")
    return inside_guard(out, 1)


# ----------------------------------------------------------------------------- 3.1: tree_plan (Python, on CPU)


def _tree_levels(n: int) -> list[int]:
    levels = [-(-n // 256)]
    while levels[-1] > 1:
        levels.append(-(-levels[-1] // 256))
    return levels


def _tree_plan_cases() -> Cases:
    return {f"n={n}": (n,) for n in (1, 256, 257, 65536, 65537, 10**6, 10**9, 2**31 - 1)}


def _tree_plan_ref(n: int) -> torch.Tensor:
    levels = _tree_levels(n)
    return torch.tensor([len(levels), sum(levels[:-1])])


def _tree_plan_call(fn: Callable, n: int) -> torch.Tensor:
    launches, scratch = fn(n)
    return torch.tensor([int(launches), int(scratch)])


# ----------------------------------------------------------------------------- 3.2: softmax_backward


def _softmax_backward_cases(device: str) -> Cases:
    g = seeded_rng()

    def case(x: torch.Tensor) -> tuple:
        y = torch.softmax(x.double(), dim=1).float()
        return y.to(device), torch.randn(x.shape, generator=g).to(device)

    masked = 3 * torch.randn(5, 300, generator=g)
    masked[:, ::3] = -torch.inf  # y = 0 there: dx must be 0 too
    one_hot = torch.zeros(2, 100)
    one_hot[:, 17] = 1e4  # y is (numerically) one-hot
    return {f"{r} x {c}": case(3 * torch.randn(r, c, generator=g)) for r, c in [(1, 1), (3, 31), (7, 1000),
                                                                               (4, 4099)]} | {
        "5 x 300, every third logit -inf": case(masked), "2 x 100, one-hot y": case(one_hot)}


def softmax_backward_run(fn: Callable, y: torch.Tensor, dy: torch.Tensor):
    rows, cols = y.shape
    dx = guarded_buffer(y.numel(), y.device.type)
    checked_call(fn, y, dy, dx, rows, cols)
    return inside_guard(dx, y.numel(), "dx").view(rows, cols)


def softmax_backward_ref(y: torch.Tensor, dy: torch.Tensor):
    y, dy = y.double(), dy.double()
    return y * (dy - (y * dy).sum(1, keepdim=True))


# ----------------------------------------------------------------------------- 3.2: softmax_grouped


def _grouped_cases(device: str) -> Cases:
    g = seeded_rng()
    masked = 3 * torch.randn(9, 8, generator=g)
    masked[0, ::2] = -torch.inf  # masked positions
    masked[1, :] = -torch.inf  # a fully masked row: NaN, as torch.softmax gives
    masked[2, 1:] = -torch.inf  # one finite entry: probability 1
    big = (torch.randint(0, 2, (6, 32), generator=g) * 2e4 - 1e4).float()  # logits of +-1e4
    cases = {f"{r} x {c}": (3 * torch.randn(r, c, generator=g),) for r, c in [(1, 1), (3, 5), (17, 32), (100, 17)]}
    cases |= {"9 x 8, with -inf": (masked,), "6 x 32, logits +-1e4": (big,)}
    return {name: (x.to(device),) for name, (x,) in cases.items()}


def _grouped_run(fn: Callable, x: torch.Tensor):
    rows, cols = x.shape
    y = guarded_buffer(x.numel(), x.device.type)
    checked_call(fn, x, y, rows, cols)
    return inside_guard(y, x.numel(), "y").view(rows, cols)


# ----------------------------------------------------------------------------- 3.2: layer_norm_welford

EPS = 1e-5


def _layer_norm_cases(device: str) -> Cases:
    g = seeded_rng()

    def case(rows: int, cols: int, mean: float = 0.0) -> tuple:
        x = mean + torch.randn(rows, cols, generator=g)
        w, b = 1 + 0.5 * torch.randn(cols, generator=g), torch.randn(cols, generator=g)
        return x.to(device), w.to(device), b.to(device)

    return {"1 x 1 (variance 0: y = b)": case(1, 1), "3 x 5 (most threads see no column)": case(3, 5),
            "4 x 1000": case(4, 1000), "3 x 4099, mean 1000": case(3, 4099, 1000.0),
            "2 x 20000, mean 1000 (wider than a block's registers)": case(2, 20000, 1000.0)}


def _layer_norm_run(fn: Callable, x: torch.Tensor, w: torch.Tensor, b: torch.Tensor):
    rows, cols = x.shape
    y = guarded_buffer(x.numel(), x.device.type)
    checked_call(fn, x, w, b, y, rows, cols, EPS)
    return inside_guard(y, x.numel(), "y").view(rows, cols)


def _layer_norm_ref(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor):
    return F.layer_norm(x.double(), x.shape[1:], w.double(), b.double(), EPS)


# ----------------------------------------------------------------------------- the exercises

EXERCISES: list[Exercise] = [
    Exercise("tree_plan", REDUCTIONS, "tree_plan", _tree_plan_cases, reference=_tree_plan_ref, call=_tree_plan_call),
]
CUDA_EXERCISES: list[CudaExercise] = [
    CudaExercise(REDUCTIONS, Cudaling("sum_one_launch", ("float*", "float*", "int*", "float*", "int"),
                                      _one_launch_cases, _one_launch_run, lambda x: x.double().sum().reshape(1),
                                      atol=1e-4, rtol=1e-5)),
    CudaExercise(REDUCTIONS, Cudaling("grid_max", ("float*", "float*", "float*", "int"), _max_cases, _max_run,
                                      lambda x: x.max().reshape(1), atol=0.0, rtol=0.0)),
    CudaExercise(SOFTMAX_LN, Cudaling("softmax_backward_block", ("float*", "float*", "float*", "int", "int"),
                                      _softmax_backward_cases, softmax_backward_run, softmax_backward_ref,
                                      atol=1e-6, rtol=1e-4)),
    CudaExercise(SOFTMAX_LN, Cudaling("layer_norm_welford", ("float*", "float*", "float*", "float*", "int", "int",
                                                             "float"),
                                      _layer_norm_cases, _layer_norm_run, _layer_norm_ref, atol=1e-3, rtol=1e-3)),
    CudaExercise(SOFTMAX_LN, Cudaling("softmax_grouped", ("float*", "float*", "int", "int"), _grouped_cases,
                                      _grouped_run, lambda x: torch.softmax(x.double(), dim=1), atol=1e-6, rtol=1e-5)),
]
