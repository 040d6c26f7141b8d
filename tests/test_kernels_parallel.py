"""The scan, histogram and sort kernels of triton/06-parallel-algorithms (`gpu_ml.kernels.triton.scan`) on awkward
inputs: one element, ragged sizes, many tiles, int32 overflow, all-equal keys, special floats; and their refusals."""

from __future__ import annotations

import pytest
import torch
from kernel_checks import DEVICE, GPU

from gpu_ml.kernels.triton import scan as sc

SCANS = [sc.cumsum_reduce_then_scan, sc.cumsum_lookback]


@pytest.mark.parametrize("scan", SCANS, ids=lambda f: f.__name__)
@pytest.mark.parametrize("n", [1, 2, 31, 256, 257, 1000, 70001])
def test_scans_match_torch_in_float32_and_exactly_in_int32(scan, n):
    torch.manual_seed(n)
    x = torch.randn(n, device=DEVICE)
    exact = x.double().cumsum(0)
    # additions on a path (the notebook's bound): log2(block) in a block, log2(block) + 1 per level of block sums in
    # the three passes (two levels at 70001), and log2(window) + 2 per tile before it in the single pass
    i = torch.arange(n, device=DEVICE)
    depth = 3 * 8 + 2 + (i // 256) * (7 + 2)  # the default window of 128
    bound = depth.double() * 2.0**-24 * x.double().abs().cumsum(0)
    assert ((scan(x, block=256).double() - exact).abs() <= bound).all()
    xi = torch.randint(-(2**31), 2**31 - 1, (n,), device=DEVICE, dtype=torch.int32)  # overflows: int32 wraps
    assert torch.equal(scan(xi, block=256), xi.cumsum(0, dtype=torch.int32))


@pytest.mark.parametrize("window, sem, stride", [(2, "relaxed", 16), (32, "relaxed", 16), (32, "acq_rel", 16),
                                                  (32, "relaxed", 1), (8, "relaxed", 3)])
def test_lookback_through_many_windows_is_exact_in_int32(window, sem, stride):
    # small tiles and windows: on a GPU most tiles meet only aggregates in their first windows and walk further back
    n = 2**22 + 3 if GPU else 20_001
    x = torch.randint(-(2**31), 2**31 - 1, (n,), device=DEVICE, dtype=torch.int32)
    got = sc.cumsum_lookback(x, block=256, num_warps=4, window=window, sem=sem, stride=stride)
    assert torch.equal(got, x.cumsum(0, dtype=torch.int32))
    with pytest.raises(ValueError, match="sem must be"):
        sc.cumsum_lookback(x, sem="release")
    with pytest.raises(ValueError, match="stride must be a positive int"):
        sc.cumsum_lookback(x, stride=0)


@pytest.mark.parametrize("scan", SCANS, ids=lambda f: f.__name__)
def test_scans_of_an_empty_vector_special_values_and_refusals(scan):
    assert scan(torch.zeros(0, device=DEVICE)).shape == (0,)
    x = torch.tensor([1.0, float("inf"), -1.0, float("nan"), 2.0], device=DEVICE)
    torch.testing.assert_close(scan(x), torch.cumsum(x, 0), equal_nan=True)
    for bad, error, match in [(x.double(), TypeError, "dtype"), (x[None], ValueError, "1-D"),
                              (x[::2], ValueError, "contiguous"), (x.long(), TypeError, "dtype")]:
        with pytest.raises(error, match=match):
            scan(bad)


def test_linear_recurrence_matches_the_sequential_loop():
    torch.manual_seed(0)
    for rows, L in ((1, 1), (3, 37), (2, 1024)):
        a, b = torch.rand(rows, L, device=DEVICE) * 1.8 - 0.9, torch.randn(rows, L, device=DEVICE)
        exact = torch.zeros(rows, L, dtype=torch.float64, device=DEVICE)
        state = torch.zeros(rows, dtype=torch.float64, device=DEVICE)
        for t in range(L):
            state = a[:, t].double() * state + b[:, t].double()
            exact[:, t] = state
        torch.testing.assert_close(sc.linear_recurrence(a, b).double(), exact, rtol=0, atol=1e-5)
    assert sc.linear_recurrence(a[:0], b[:0]).shape == (0, L)
    with pytest.raises(ValueError, match="at most 8192"):
        sc.linear_recurrence(torch.ones(1, 8193, device=DEVICE), torch.ones(1, 8193, device=DEVICE))
    with pytest.raises(ValueError, match="shapes differ"):
        sc.linear_recurrence(a, b[:1].contiguous())


@pytest.mark.parametrize("bins", [1, 2, 100, 256, 4096])
def test_histogram_matches_bincount_uniform_and_all_equal(bins):
    torch.manual_seed(bins)
    for keys in (torch.randint(0, bins, (9001,), device=DEVICE), torch.full((5000,), bins - 1, device=DEVICE)):
        keys = keys.to(torch.int32)
        assert torch.equal(sc.histogram(keys, bins, block=1024).long(), torch.bincount(keys, minlength=bins))


def test_histogram_of_nothing_and_refusals():
    assert torch.equal(sc.histogram(torch.zeros(0, device=DEVICE, dtype=torch.int32), 5),
                       torch.zeros(5, device=DEVICE, dtype=torch.int32))
    keys = torch.tensor([0, 3, 9], device=DEVICE, dtype=torch.int32)
    for args, error, match in [((keys, 9), ValueError, "from 0 to 9"), ((keys - 1, 10), ValueError, "from -1"),
                               ((keys, 0), ValueError, "1 to 4096"), ((keys, 4097), ValueError, "1 to 4096"),
                               ((keys.long(), 10), TypeError, "dtype"), ((keys[None], 10), ValueError, "1-D")]:
        with pytest.raises(error, match=match):
            sc.histogram(*args)


@pytest.mark.parametrize("L", [1, 2, 17, 300] + ([1000, 4096] if GPU else []))  # tl.sort is slow interpreted
def test_sort_rows_matches_torch_sort_with_special_floats(L):
    torch.manual_seed(L)
    x = torch.randn(3, L, device=DEVICE) * 1e3
    specials = torch.tensor([float("nan"), -float("nan"), float("inf"), -float("inf"), -0.0, 0.0, 1e-45, -1e-45])
    x[0, : min(L, 8)] = specials[: min(L, 8)].to(DEVICE)
    x[1] = -3.0  # all equal
    # torch.sort on CUDA puts a NaN with its sign bit set first in rows long enough for CUB's radix sort
    # (pytorch/pytorch#117617); on the CPU, as documented, every NaN is last: that is the reference
    got, expected = sc.sort_rows(x), torch.sort(x.cpu(), dim=-1).values.to(DEVICE)
    assert torch.equal(got.isnan(), expected.isnan())
    assert torch.equal(got.nan_to_num(nan=0.5), expected.nan_to_num(nan=0.5))


def test_sort_rows_refusals_and_empty():
    assert sc.sort_rows(torch.zeros(0, 8, device=DEVICE)).shape == (0, 8)
    for bad, error, match in [(torch.zeros(2, 4097, device=DEVICE), ValueError, "at most 4096"),
                              (torch.zeros(2, 8, device=DEVICE).T, ValueError, "contiguous"),
                              (torch.zeros(2, 8, device=DEVICE, dtype=torch.float16), TypeError, "dtype")]:
        with pytest.raises(error, match=match):
            sc.sort_rows(bad)


def test_tile_sizes_are_refused_before_any_launch():
    """Tile sizes tl.arange cannot take (or a block of 1, with which the three-pass scan would never end)."""
    x, keys = torch.ones(5, device=DEVICE), torch.zeros(5, dtype=torch.int32, device=DEVICE)
    for call, match in [(lambda: sc.cumsum_reduce_then_scan(x, block=1), "block must be a power of two >= 2"),
                        (lambda: sc.cumsum_reduce_then_scan(x, block=1000), "block must be a power of two"),
                        (lambda: sc.cumsum_lookback(x, window=3), "window must be a power of two"),
                        (lambda: sc.histogram(keys, 4, block=1000), "block must be a power of two")]:
        with pytest.raises(ValueError, match=match):
            call()
