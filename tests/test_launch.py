"""`gpu_ml.launch.Launcher`: the same results as `kernel[grid](...)`, compiled kernels reused only where
Triton would specialize alike (on a GPU), and the plain path under the interpreter (on a CPU)."""

import pytest
import torch
import triton.language as tl

import triton
from gpu_ml.launch import Launcher

GPU = torch.cuda.is_available()  # without one, conftest has switched Triton to its interpreter
DEVICE = "cuda" if GPU else "cpu"


@triton.jit
def _axpy(x_ptr, y_ptr, out_ptr, a, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    ok = offs < n
    tl.store(out_ptr + offs, a * tl.load(x_ptr + offs, mask=ok) + tl.load(y_ptr + offs, mask=ok), mask=ok)


def _run(launch, x, y, a):
    out = torch.empty_like(x)
    n = x.numel()
    launch((triton.cdiv(n, 128),), x, y, out, a, n, BLOCK=128)
    return out


def test_same_results_as_the_plain_launch_and_keys_that_follow_specialization():
    launch = Launcher(_axpy)
    base = torch.randn(1000, device=DEVICE)
    for n in (1, 16, 100, 100, 999):  # 1 and multiples of 16 specialize differently; 100 twice: one entry
        for offset in (0, 1):  # aligned, and 4 bytes past a 16-byte boundary
            x, y = base[offset:offset + n], base.flip(0)[offset:offset + n]
            torch.testing.assert_close(_run(launch, x, y, 2.5), 2.5 * x + y)
            torch.testing.assert_close(_run(launch, x, y, -1.0), -x + y)  # a float is not part of the key
    if GPU:
        assert len(launch.compiled) == 8  # 4 sizes x 2 alignments
    else:
        assert launch.compiled == {}  # the interpreter returns no compiled kernel: every call is a plain one


def test_keyword_arguments_must_be_the_remaining_parameters():
    x = torch.randn(8, device=DEVICE)
    with pytest.raises(TypeError, match=r"must be exactly the parameters after the positional ones, \['BLOCK'\]"):
        Launcher(_axpy)((1,), x, x, x, 1.0, 8, BLOCKS=128)
