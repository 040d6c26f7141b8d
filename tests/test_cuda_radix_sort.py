"""The radix sorts cuda/06-parallel-algorithms/03_radix_sort exports (gpu_ml/kernels/cuda/radix_*.cuh): the classic
LSD form (counts, 6.1's scan, scatter per pass) and onesweep (one histogram, then one pass per digit with a decoupled
look-back per digit), through `launch_radix_sort` of `cuda/radix_sort.cuh`.

One library includes the header and adds an `extern "C"` shim for keys and one for key-value pairs (the notebook's own
cell does the same; `%%cuda`'s wrapper fills in the stream). On a CPU it is only compiled, with the host program that
compute-sanitizer runs; on a GPU the sorts run against torch.sort(stable=True) on the CPU (keys bit for bit, the
permutation through int32 values) on ragged sizes, every tile size, uint32/int32/float32 keys with NaN, infinities and
zeros of both signs, sorted/reverse/all-equal inputs, many tiles, unaligned views, refusals, a side stream and a CUDA
graph, and under memcheck and racecheck.
"""

from __future__ import annotations

import pytest
import torch

from gpu_ml import cuda, sanitize
from gpu_ml.env import has_gpu

SOURCE = '#include "cuda/radix_sort.cuh"\n' + """
extern "C" int radix_sort_keys(const unsigned* x, unsigned* y, unsigned* alt, int* counts, long long count_words,
                               long long* status, long long status_words, long long n, int kind, int items,
                               bool onesweep, cudaStream_t stream) {
    return launch_radix_sort(x, nullptr, y, nullptr, alt, nullptr, counts, count_words, status, status_words, n, kind,
                             items, onesweep, stream);
}
extern "C" int radix_sort_pairs(const unsigned* x, const unsigned* xv, unsigned* y, unsigned* yv, unsigned* alt,
                                unsigned* alt_v, int* counts, long long count_words, long long* status,
                                long long status_words, long long n, int kind, int items, bool onesweep,
                                cudaStream_t stream) {
    return launch_radix_sort(x, xv, y, yv, alt, alt_v, counts, count_words, status, status_words, n, kind, items,
                             onesweep, stream);
}
"""
ITEMS = (8, 16, 24)
FORMS = {"classic": False, "onesweep": True}
DTYPES = (torch.uint32, torch.int32, torch.float32)
KIND = {torch.uint32: 0, torch.int32: 1, torch.float32: 2}

needs_nvcc = pytest.mark.skipif(not cuda.has_nvcc(), reason="nvcc not found: CUDA cells cannot compile")
needs_gpu = pytest.mark.skipif(not has_gpu(), reason="the sorts need a CUDA GPU")


@pytest.fixture(scope="module")
def sorts():
    """{name: CudaFunction} of the shims, built once (cached by gpu_ml.cuda like a %%cuda cell)."""
    if not cuda.has_nvcc():
        pytest.skip("nvcc not found")
    return cuda.load_library(cuda.build(SOURCE, library=True), SOURCE)


def tiles(n: int, items: int) -> int:
    return -(-n // (256 * items))


def scratch(n: int, items: int, onesweep: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """(counts, status) as large as launch_radix_sort needs, filled with junk: the launcher zeroes what it uses."""
    cells = 256 * tiles(n, items)
    counts = torch.full((2 * 4 * 256 if onesweep else 2 * cells,), -7, dtype=torch.int32, device="cuda")
    status = torch.full((cells + 1 if onesweep else 16 * -(-cells // 4096) + 1,), -1, dtype=torch.int64, device="cuda")
    return counts, status


def run(sorts, x, values=None, onesweep=True, items=16, y=None, yv=None):
    """The sort of x (and values) through the shims; y / yv: where to write (fresh tensors if None)."""
    n = x.numel()
    y = torch.empty(n, dtype=torch.int32, device="cuda") if y is None else y
    alt = torch.empty(n, dtype=torch.int32, device="cuda")
    counts, status = scratch(n, items, onesweep)
    rest = (counts, counts.numel(), status, status.numel(), n, KIND[x.dtype], items, onesweep)
    if values is None:
        rc = sorts["radix_sort_keys"](x.view(torch.int32), y, alt, *rest)
    else:
        yv = torch.empty(n, dtype=torch.int32, device="cuda") if yv is None else yv
        alt_v = torch.empty(n, dtype=torch.int32, device="cuda")
        rc = sorts["radix_sort_pairs"](x.view(torch.int32), values.view(torch.int32), y, yv, alt, alt_v, *rest)
    assert rc == 0, f"launch_radix_sort refused a valid launch ({rc})"
    return y if values is None else (y, yv)


def order_key(x: torch.Tensor) -> torch.Tensor:
    """The notebook's host order key: uint32 bits, int32 with the sign flipped, float32 by the sign-flip trick with
    every NaN last and -0.0 tied with +0.0 (int64)."""
    bits = x.view(torch.int32).long() & 0xFFFFFFFF
    if x.dtype == torch.int32:
        return bits ^ 0x80000000
    if x.dtype == torch.float32:
        bits = torch.where(bits == 0x80000000, 0, bits)
        key = torch.where(bits >= 0x80000000, bits ^ 0xFFFFFFFF, bits | 0x80000000)
        return torch.where(x.isnan(), 0xFFFFFFFF, key)
    return bits


def reference(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """torch.sort(stable=True) on the CPU: (the sorted keys' bits as int32, the permutation)."""
    xc = x.cpu()
    order = torch.sort(order_key(xc) if x.dtype == torch.uint32 else xc, stable=True).indices
    return xc.view(torch.int32)[order], order


SPECIALS = [0.0, -0.0, float("nan"), -float("nan"), float("inf"), -float("inf"), 1e-45, -1e-45, 3.4e38, -3.4e38]


def inputs(n: int, dtype: torch.dtype, pattern: str = "random", seed: int = 0) -> torch.Tensor:
    g = torch.Generator(device="cuda").manual_seed(seed)
    bits = torch.randint(-(2**31), 2**31 - 1, (n,), device="cuda", dtype=torch.int32, generator=g)
    if dtype == torch.float32:
        x = torch.randn(n, device="cuda", generator=g)
        x *= torch.exp2(torch.randint(-60, 60, (n,), device="cuda", generator=g).float())
        special = torch.tensor(SPECIALS, device="cuda")
        pick = torch.randint(0, n, (max(1, n // 50),), device="cuda", generator=g)
        x[pick] = special[torch.randint(0, special.numel(), pick.shape, device="cuda", generator=g)]
        bits = x.view(torch.int32)
    if pattern == "all equal":
        bits = bits[:1].repeat(n)
    elif pattern in ("sorted", "reverse"):
        bits = reference(bits.view(dtype))[0].cuda()
        bits = bits.flip(0) if pattern == "reverse" else bits
    elif pattern == "few distinct":
        bits = bits[:3][torch.randint(0, min(3, n), (n,), device="cuda", generator=g)]
    return bits.contiguous().view(dtype)


def assert_sorted(sorts, x: torch.Tensor, name: str, onesweep: bool, items: int = 16) -> None:
    keys, order = reference(x)
    y = run(sorts, x, onesweep=onesweep, items=items)
    assert torch.equal(y.cpu(), keys), f"{name}: keys differ from torch.sort on the CPU"
    y, idx = run(sorts, x, torch.arange(x.numel(), dtype=torch.int32, device="cuda"), onesweep, items)
    assert torch.equal(y.cpu(), keys), f"{name}: the pairs' keys differ"
    assert torch.equal(idx.cpu().long(), order), f"{name}: the permutation differs (not stable?)"


@needs_nvcc
def test_the_shims_compile(sorts):
    assert set(sorts) == {"radix_sort_keys", "radix_sort_pairs"}
    params = [p.ctype for p in sorts["radix_sort_pairs"].params]
    assert params[-1] == "cudaStream_t" and params[0] == "unsigned" and params[10] == "long long"


@needs_gpu
@pytest.mark.parametrize("items", ITEMS)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("n", [1, 2, 31, 2047, 2048, 2049, 6145, 70_001, 2**20 + 7])
def test_sorts_match_torch(sorts, form, dtype, items, n):
    assert_sorted(sorts, inputs(n, dtype, seed=n), f"{form} {dtype} n={n} items={items}", FORMS[form], items)


@needs_gpu
@pytest.mark.parametrize("pattern", ["all equal", "sorted", "reverse", "few distinct"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("form", FORMS)
def test_patterns(sorts, form, dtype, pattern):
    for n in (5, 4097, 300_001):
        assert_sorted(sorts, inputs(n, dtype, pattern), f"{form} {dtype} {pattern} n={n}", FORMS[form])


@needs_gpu
@pytest.mark.parametrize("form", FORMS)
def test_special_floats_alone(sorts, form):
    x = torch.tensor(SPECIALS * 3 + [1.0, -1.0], device="cuda")
    payloads = torch.tensor([0x7F800001, -1, 0x7FC00000, -4194304], dtype=torch.int32, device="cuda")
    x = torch.cat([x, payloads.view(torch.float32), x.flip(0)])
    assert_sorted(sorts, x, f"{form} special floats", FORMS[form])


@needs_gpu
@pytest.mark.parametrize("form", FORMS)
def test_many_tiles(sorts, form):
    """3 * 2^22 + 5 keys in 6145 tiles of 2048: look-backs over many tiles; against torch.sort on the GPU (int32)."""
    x = inputs(3 * 2**22 + 5, torch.int32)
    ref = torch.sort(x, stable=True)
    y, idx = run(sorts, x, torch.arange(x.numel(), dtype=torch.int32, device="cuda"), FORMS[form], 8)
    assert torch.equal(y, ref.values) and torch.equal(idx.long(), ref.indices)


@needs_gpu
@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize(("x_offset", "y_offset"), [(1, 0), (0, 1), (3, 2)])
def test_unaligned_views_and_nothing_written_outside(sorts, form, x_offset, y_offset):
    n = 2 * 4096 + 5
    x = inputs(n + x_offset, torch.int32)[x_offset:]
    buf = torch.full((n + y_offset + 64,), 12345, dtype=torch.int32, device="cuda")
    vbuf = torch.full_like(buf, 12345)
    y, yv = buf[y_offset:y_offset + n], vbuf[y_offset:y_offset + n]
    run(sorts, x, torch.arange(n, dtype=torch.int32, device="cuda"), FORMS[form], y=y, yv=yv)
    keys, order = reference(x)
    assert torch.equal(y.cpu(), keys) and torch.equal(yv.cpu().long(), order)
    for b in (buf, vbuf):
        assert (b[:y_offset] == 12345).all() and (b[y_offset + n:] == 12345).all(), "a store outside the output"


@needs_gpu
@pytest.mark.parametrize("form", FORMS)
def test_refusals_and_empty(sorts, form):
    onesweep = FORMS[form]
    fn = sorts["radix_sort_keys"]
    x = torch.ones(5000, dtype=torch.int32, device="cuda")
    y, alt = torch.full_like(x, 7), torch.empty_like(x)
    counts, status = scratch(x.numel(), 16, onesweep)

    def call(n=5000, kind=1, items=16, short_counts=0, short_status=0):
        return fn(x, y, alt, counts, counts.numel() - short_counts, status, status.numel() - short_status, n, kind,
                  items, onesweep)

    assert call(items=12) == -1  # no such tile size
    assert call(kind=3) == -1  # no such kind of key
    assert call(n=-1) == -1
    assert call(short_counts=1) == -1  # scratch too small
    assert call(short_status=1) == -1
    assert call(n=0) == 0  # nothing to do
    assert (y == 7).all(), "a refused launch wrote the output"


@needs_gpu
def test_the_status_words_are_reset_by_every_call(sorts):
    """Two onesweep sorts with one scratch: the launcher zeroes the words and the counter before every pass."""
    fn = sorts["radix_sort_keys"]
    x = inputs(100_003, torch.int32)
    counts, status = scratch(x.numel(), 16, True)
    for _ in range(2):
        y, alt = torch.empty_like(x), torch.empty_like(x)
        assert fn(x, y, alt, counts, counts.numel(), status, status.numel(), x.numel(), 1, 16, True) == 0
        assert torch.equal(y, torch.sort(x).values)
    assert status[-1].item() == tiles(x.numel(), 16)  # the last pass's counter handed out one number per tile


@needs_gpu
@pytest.mark.parametrize("form", FORMS)
def test_a_side_stream_and_a_cuda_graph(sorts, form):
    x = inputs(2**22 + 3, torch.int32)
    expected = torch.sort(x).values
    fn = sorts["radix_sort_keys"]
    fn.sync = False  # as for a benchmark: no device-wide synchronization, which a capture would refuse
    try:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            y = run(sorts, x, onesweep=FORMS[form])
        torch.cuda.current_stream().wait_stream(side)
        torch.cuda.synchronize()
        assert torch.equal(y, expected)
        y, alt = torch.empty_like(x), torch.empty_like(x)
        counts, status = scratch(x.numel(), 16, FORMS[form])
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):  # captures on a stream of its own, which %%cuda's wrapper passes
            fn(x, y, alt, counts, counts.numel(), status, status.numel(), x.numel(), 1, 16, FORMS[form])
        for _ in range(2):
            y.fill_(0)
            graph.replay()
            torch.cuda.synchronize()
            assert torch.equal(y, expected), "the sort replayed from a CUDA graph"
    finally:
        fn.sync = True


# ----------------------------------------------------------------------------- compute-sanitizer

PROGRAM = r"""
#include <algorithm>
#include <cstdio>
#include <numeric>
#include <vector>
#include "cuda/radix_sort.cuh"
#include "gpu_ml.cuh"  // CHECK

// One sort of n keys (uint32 or int32 bits) with their indices as values, into exactly sized buffers; the number
// of keys or values that differ from std::stable_sort's.
static int check(long long n, bool onesweep, int kind, int items) {
    std::vector<unsigned> x(n), idx(n), y(n), yv(n);
    for (long long i = 0; i < n; ++i) x[i] = (unsigned)((i * 2654435761ull) >> 7) % (i % 3 ? 1000003u : 77u);
    std::iota(idx.begin(), idx.end(), 0u);
    std::vector<unsigned> order(idx);
    auto key = [&](unsigned i) { return kind == RADIX_INT32 ? x[i] ^ 0x80000000u : x[i]; };
    std::stable_sort(order.begin(), order.end(), [&](unsigned a, unsigned b) { return key(a) < key(b); });
    const long long count_words = radix_count_words(n, items, onesweep);
    const long long status_words = radix_status_words(n, items, onesweep);
    unsigned *dx, *dv, *dy, *dyv, *alt, *alt_v;
    int* counts;
    long long* status;
    for (unsigned** p : {&dx, &dv, &dy, &dyv, &alt, &alt_v}) CHECK(cudaMalloc(p, n * sizeof(unsigned)));
    CHECK(cudaMalloc(&counts, count_words * sizeof(int)));
    CHECK(cudaMalloc(&status, status_words * sizeof(long long)));
    CHECK(cudaMemcpy(dx, x.data(), n * sizeof(unsigned), cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(dv, idx.data(), n * sizeof(unsigned), cudaMemcpyHostToDevice));
    const int rc = launch_radix_sort(dx, dv, dy, dyv, alt, alt_v, counts, count_words, status, status_words, n, kind,
                                     items, onesweep, 0);
    if (rc != 0) return 1000 + rc;
    CHECK(cudaDeviceSynchronize());
    CHECK(cudaMemcpy(y.data(), dy, n * sizeof(unsigned), cudaMemcpyDeviceToHost));
    CHECK(cudaMemcpy(yv.data(), dyv, n * sizeof(unsigned), cudaMemcpyDeviceToHost));
    int wrong = 0;
    for (long long i = 0; i < n; ++i) wrong += (y[i] != x[order[i]]) + (yv[i] != order[i]);
    for (void* p : {(void*)dx, (void*)dv, (void*)dy, (void*)dyv, (void*)alt, (void*)alt_v, (void*)counts,
                    (void*)status})
        CHECK(cudaFree(p));
    return wrong;
}

int main() {
    const long long n = 3 * 4096 + 77;  // 4 tiles of 4096, the last one partial
    const int wrong = check(n, false, RADIX_UINT32, 16) + check(n, true, RADIX_UINT32, 16) +
                      check(n, true, RADIX_INT32, 8) + check(n, false, RADIX_INT32, 24);
    std::printf("radix sort: %d wrong elements\n", wrong);
    return wrong == 0 ? 0 : 4;
}
"""


@needs_nvcc
def test_the_sanitizer_program_compiles():
    assert cuda.build(PROGRAM, library=False).exists()


@pytest.mark.gpu
@pytest.mark.skipif(not sanitize.available(), reason="needs a CUDA GPU and compute-sanitizer")
@pytest.mark.parametrize("tool", ["memcheck", "racecheck"])
def test_sanitizer_reports_no_error(tool):
    report = sanitize.sanitize_program(cuda.build(PROGRAM, library=False), tool=tool)
    assert report.clean and "radix sort: 0 wrong elements" in report.output, report.output[-4000:]
