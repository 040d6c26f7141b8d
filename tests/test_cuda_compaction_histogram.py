"""The kernels cuda/06-parallel-algorithms/02_compaction_and_histogram exports (gpu_ml/kernels/cuda/compact.cuh and
histogram.cuh): the stable single-pass compaction (built on the scan headers of 01_scan) and the five histogram
variants, through their launchers `launch_compact` and `launch_histogram`.

One library includes both headers and adds an `extern "C"` shim per launcher and dtype (the notebook's own cells do
the same; `%%cuda`'s wrapper fills in the stream). On a CPU it is only compiled, with the host program that
compute-sanitizer runs; on a GPU the compaction runs against `x[x > t]` (order included) and the histograms against
`torch.bincount` on ragged sizes, every tile size, many tiles, unaligned inputs, special floats, skewed and all-equal
keys, keys out of range, refusals, a side stream and a CUDA graph, and under memcheck and racecheck.
"""

from __future__ import annotations

import pytest
import torch

from gpu_ml import cuda, sanitize
from gpu_ml.env import has_gpu

SOURCE = """#include "cuda/compact.cuh"
#include "cuda/histogram.cuh"

extern "C" int compact_f32(const float* x, float* out, int* count, long long* status, long long words, long long n,
                           float threshold, int items, cudaStream_t stream) {
    return launch_compact(x, out, count, status, words, n, threshold, items, stream);
}
extern "C" int compact_i32(const int* x, int* out, int* count, long long* status, long long words, long long n,
                           int threshold, int items, cudaStream_t stream) {
    return launch_compact(x, out, count, status, words, n, threshold, items, stream);
}
extern "C" int histogram_i32(const int* keys, int* hist, long long n, int bins, int variant, cudaStream_t stream) {
    return launch_histogram(keys, hist, n, bins, variant, stream);
}
"""
ITEMS = (4, 8, 16, 32)
DTYPES = (torch.float32, torch.int32)
VARIANTS = ("global", "global, warp-aggregated", "private", "private, warp-aggregated", "private, uniform warps")
MAX_BINS = 12288
SENTINEL = 12345

needs_nvcc = pytest.mark.skipif(not cuda.has_nvcc(), reason="nvcc not found: CUDA cells cannot compile")
needs_gpu = pytest.mark.skipif(not has_gpu(), reason="the kernels need a CUDA GPU")


@pytest.fixture(scope="module")
def lib():
    """{name: CudaFunction} of the shims, built once (cached by gpu_ml.cuda like a %%cuda cell)."""
    if not cuda.has_nvcc():
        pytest.skip("nvcc not found")
    return cuda.load_library(cuda.build(SOURCE, library=True), SOURCE)


def status_words(n: int, items: int) -> int:
    """The status words of 6.1's one-pass scan: a 128-byte line of 16 per tile and the tile counter."""
    return 16 * -(-n // (256 * items)) + 1


def compact(lib, x, t, items=16, out=None):
    """(out buffer, k): the launcher's result, out pre-filled with SENTINEL unless given."""
    fn = lib["compact_f32" if x.dtype == torch.float32 else "compact_i32"]
    out = torch.full_like(x, SENTINEL) if out is None else out
    count = torch.full((1,), -1, dtype=torch.int32, device="cuda")
    status = torch.full((status_words(x.numel(), items),), -1, dtype=torch.int64, device="cuda")  # zeroed by it
    rc = fn(x, out, count, status, status.numel(), x.numel(), t, items)  # launched here, not inside an assert
    assert rc == 0, f"launch_compact refused a valid launch ({rc})"
    return out, int(count.item())


def assert_compact(lib, x, t, items=16, name=""):
    out, k = compact(lib, x, t, items)
    expected = x[x > t]
    assert k == expected.numel(), f"{name}: count {k}, expected {expected.numel()}"
    assert torch.equal(out[:k], expected), f"{name}: differs from x[x > t] (order included)"
    assert (out[k:] == SENTINEL).all(), f"{name}: a store past out[k]"


def histogram(lib, keys, bins, variant):
    hist = torch.full((bins,), -1, dtype=torch.int32, device="cuda")  # the launcher zeroes it
    rc = lib["histogram_i32"](keys, hist, keys.numel(), bins, VARIANTS.index(variant))
    assert rc == 0, f"launch_histogram refused a valid launch ({rc})"
    return hist


def bincount(keys: torch.Tensor, bins: int) -> torch.Tensor:
    """torch.bincount of the keys inside [0, bins) (the kernels skip the others), as int32."""
    inside = keys[(keys >= 0) & (keys < bins)]
    return torch.bincount(inside.long(), minlength=bins).int()


def zipf_keys(n: int, bins: int, s: float) -> torch.Tensor:
    p = torch.arange(1, bins + 1, dtype=torch.float64) ** -s
    cdf = (p.cumsum(0) / p.sum()).float().cuda()
    return torch.searchsorted(cdf, torch.rand(n, device="cuda")).clamp_(max=bins - 1).to(torch.int32)


@needs_nvcc
def test_the_shims_compile(lib):
    assert set(lib) == {"compact_f32", "compact_i32", "histogram_i32"}
    params = [p.ctype for p in lib["compact_i32"].params]
    assert params[-1] == "cudaStream_t" and params[-3] == "int" and params[3] == "long long"


# ----------------------------------------------------------------------------- compaction


@needs_gpu
@pytest.mark.parametrize("items", ITEMS)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("n", [1, 2, 31, 1023, 1024, 1025, 3 * 4096 + 1, 70_001, 2**20 + 7])
def test_compaction_matches_torch(lib, dtype, items, n):
    if dtype == torch.float32:
        x, thresholds = torch.randn(n, device="cuda"), (0.0, -1.0, 2.5)
    else:
        x, thresholds = torch.randint(-100, 100, (n,), device="cuda", dtype=torch.int32), (0, -60, 99)
    for t in thresholds:
        assert_compact(lib, x, t, items, f"{dtype} n={n} items={items} t={t}")


@needs_gpu
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_compaction_over_many_tiles(lib, dtype):
    """12,289 tiles of 1024: look-backs that cross many windows of 32 tiles."""
    x = torch.randint(-1000, 1000, (3 * 2**22 + 5,), device="cuda", dtype=torch.int32)
    assert_compact(lib, x.float() if dtype == torch.float32 else x, 3, 4, "many tiles")


@needs_gpu
@pytest.mark.parametrize("offset", [1, 2, 3])
def test_compaction_of_unaligned_slices(lib, offset):
    x = torch.randn(2 * 4096 + 5 + offset, device="cuda")[offset:]
    assert_compact(lib, x, 0.25, 16, f"offset {offset}")
    buf = torch.full((x.numel() + 3,), float(SENTINEL), device="cuda")
    out, k = compact(lib, x, 0.25, 16, out=buf[3:])  # an output that does not start on a 16-byte boundary either
    assert torch.equal(out[:k], x[x > 0.25]) and (buf[:3] == SENTINEL).all()


@needs_gpu
def test_compaction_of_special_values_and_extreme_thresholds(lib):
    special = torch.tensor([1.0, float("nan"), -0.0, 0.0, float("inf"), -float("inf"), 2.0, float("nan")] * 1000,
                           device="cuda")
    for t in (0.0, -float("inf"), float("inf"), float("nan"), 1.5):
        assert_compact(lib, special, t, 16, f"special values, t={t}")
    ints = torch.tensor([5, -(2**31), 2**31 - 1, 0, -1] * 777, dtype=torch.int32, device="cuda")
    for t in (-(2**31), 2**31 - 1, 0, -1):
        assert_compact(lib, ints, t, 8, f"int32 extremes, t={t}")
    full = torch.full((777,), 5, dtype=torch.int32, device="cuda")  # the zeros past n must not count as kept
    assert_compact(lib, full, -10, 32, "negative threshold, one partial tile")


@needs_gpu
def test_compaction_refusals(lib):
    fn = lib["compact_i32"]
    x = torch.ones(5000, dtype=torch.int32, device="cuda")
    out, count = torch.full_like(x, 7), torch.full((1,), -1, dtype=torch.int32, device="cuda")
    status = torch.zeros(status_words(x.numel(), 16), dtype=torch.int64, device="cuda")
    assert fn(x, out, count, status, status.numel(), x.numel(), 0, 12) == -1  # no such tile size
    assert fn(x, out, count, status, status.numel() - 1, x.numel(), 0, 16) == -1  # status too small
    assert fn(x, out, count, status, status.numel(), -1, 0, 16) == -1
    assert fn(x, out, count, status, status.numel(), 2**31, 0, 16) == -1  # the count is an int
    assert fn(x, out, count, status, status.numel(), 0, 0, 16) == 0  # n = 0: nothing launched
    assert (out == 7).all() and count.item() == -1, "a refused launch wrote something"


@needs_gpu
def test_compaction_on_a_side_stream_and_in_a_cuda_graph(lib):
    x = torch.randn(2**22 + 3, device="cuda")
    fn = lib["compact_f32"]
    fn.sync = False
    try:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            out, k = compact(lib, x, 0.0)
        torch.cuda.current_stream().wait_stream(side)
        assert torch.equal(out[:k], x[x > 0])
        out = torch.empty_like(x)
        count = torch.empty(1, dtype=torch.int32, device="cuda")
        status = torch.empty(status_words(x.numel(), 16), dtype=torch.int64, device="cuda")
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            fn(x, out, count, status, status.numel(), x.numel(), 0.0, 16)
        for _ in range(2):
            out.fill_(0)
            graph.replay()
            torch.cuda.synchronize()
            k = int(count.item())
            assert torch.equal(out[:k], x[x > 0]), "the compaction replayed from a CUDA graph"
    finally:
        fn.sync = True


# ----------------------------------------------------------------------------- histogram


@needs_gpu
@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("bins", [1, 7, 256, 4097, MAX_BINS])
@pytest.mark.parametrize("n", [1, 3, 31, 1001, 70_001, 2**20 + 7])
def test_histogram_matches_bincount(lib, variant, bins, n):
    keys = torch.randint(0, bins, (n,), device="cuda", dtype=torch.int32)
    assert torch.equal(histogram(lib, keys, bins, variant), bincount(keys, bins)), f"{variant} bins={bins} n={n}"


@needs_gpu
@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("keys", ["all equal", "zipf 1", "zipf 2", "two alternating", "sorted"])
def test_histogram_of_skewed_keys(lib, variant, keys):
    n = 2**22 + 3
    made = {"all equal": lambda: torch.full((n,), 200, device="cuda", dtype=torch.int32),
            "zipf 1": lambda: zipf_keys(n, 256, 1.0),
            "zipf 2": lambda: zipf_keys(n, 256, 2.0),
            "two alternating": lambda: (torch.arange(n, device="cuda") % 2 * 255).to(torch.int32),
            "sorted": lambda: torch.randint(0, 256, (n,), device="cuda", dtype=torch.int32).sort().values}[keys]()
    assert torch.equal(histogram(lib, made, 256, variant), bincount(made, 256)), f"{variant}, {keys}"


@needs_gpu
@pytest.mark.parametrize("variant", VARIANTS)
def test_histogram_skips_keys_out_of_range_and_reads_unaligned_keys(lib, variant):
    wild = torch.randint(-300, 600, (100_003,), device="cuda", dtype=torch.int32)
    wild[::1000] = -(2**31)
    wild[1::1000] = 2**31 - 1
    assert torch.equal(histogram(lib, wild, 256, variant), bincount(wild, 256))
    for offset in (1, 2, 3):
        keys = torch.randint(0, 256, (2**20 + 9,), device="cuda", dtype=torch.int32)[offset:]
        assert torch.equal(histogram(lib, keys, 256, variant), bincount(keys, 256)), f"offset {offset}"


@needs_gpu
def test_histogram_refusals_and_empty(lib):
    fn = lib["histogram_i32"]
    keys = torch.zeros(100, dtype=torch.int32, device="cuda")
    hist = torch.full((MAX_BINS + 1,), 7, dtype=torch.int32, device="cuda")
    assert fn(keys, hist, keys.numel(), 0, 0) == -1
    assert fn(keys, hist, keys.numel(), MAX_BINS + 1, 2) == -1
    assert fn(keys, hist, keys.numel(), 256, 5) == -1  # no such variant
    assert fn(keys, hist, -1, 256, 0) == -1
    assert (hist == 7).all(), "a refused launch wrote the histogram"
    assert fn(keys, hist, 0, 256, 3) == 0  # n = 0: the bins are zeroed, nothing counted
    assert (hist[:256] == 0).all() and (hist[256:] == 7).all()


@needs_gpu
def test_histogram_in_a_cuda_graph_counts_afresh_each_replay(lib):
    fn = lib["histogram_i32"]
    keys = zipf_keys(2**22, 256, 1.0)
    hist = torch.empty(256, dtype=torch.int32, device="cuda")
    fn.sync = False
    try:
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            fn(keys, hist, keys.numel(), 256, VARIANTS.index("private, warp-aggregated"))
        for _ in range(3):
            graph.replay()
            torch.cuda.synchronize()
            assert torch.equal(hist, bincount(keys, 256)), "the histogram replayed from a CUDA graph"
    finally:
        fn.sync = True


# ----------------------------------------------------------------------------- compute-sanitizer

PROGRAM = r"""
#include <cstdio>
#include <vector>
#include "cuda/compact.cuh"
#include "cuda/histogram.cuh"
#include "gpu_ml.cuh"  // CHECK

// The compaction of n small integers (as float and as int) and the histogram of keys partly out of range, every
// variant, into exactly sized buffers, checked on the host.
template <typename T>
static int check_compact(long long n) {
    const long long words = scan_status_words(n, 16);
    std::vector<T> x(n), out(n);
    for (long long i = 0; i < n; ++i) x[i] = (T)((int)((i * 2654435761ull) % 201) - 100);
    T *dx, *dout;
    int* dcount;
    long long* status;
    CHECK(cudaMalloc(&dx, n * sizeof(T)));
    CHECK(cudaMalloc(&dout, n * sizeof(T)));
    CHECK(cudaMalloc(&dcount, sizeof(int)));
    CHECK(cudaMalloc(&status, words * sizeof(long long)));
    CHECK(cudaMemcpy(dx, x.data(), n * sizeof(T), cudaMemcpyHostToDevice));
    const int rc = launch_compact(dx, dout, dcount, status, words, n, (T)7, 16, 0);
    if (rc != 0) return 100 + rc;
    CHECK(cudaDeviceSynchronize());
    int k = 0;
    CHECK(cudaMemcpy(&k, dcount, sizeof(int), cudaMemcpyDeviceToHost));
    CHECK(cudaMemcpy(out.data(), dout, k * sizeof(T), cudaMemcpyDeviceToHost));
    int wrong = 0, j = 0;
    for (long long i = 0; i < n; ++i)
        if (x[i] > (T)7) wrong += j >= k || out[j++] != x[i];
    wrong += j != k;
    CHECK(cudaFree(dx));
    CHECK(cudaFree(dout));
    CHECK(cudaFree(dcount));
    CHECK(cudaFree(status));
    return wrong;
}

static int check_histogram(long long n, int bins) {
    std::vector<int> keys(n), expected(bins, 0), hist(bins);
    for (long long i = 0; i < n; ++i) {
        keys[i] = i % 5 == 0 ? 7 : (int)((i * 2654435761ull) % (bins + 40)) - 20;  // a hot key, some out of range
        if (keys[i] >= 0 && keys[i] < bins) ++expected[keys[i]];
    }
    int *dkeys, *dhist;
    CHECK(cudaMalloc(&dkeys, n * sizeof(int)));
    CHECK(cudaMalloc(&dhist, bins * sizeof(int)));
    CHECK(cudaMemcpy(dkeys, keys.data(), n * sizeof(int), cudaMemcpyHostToDevice));
    int wrong = 0;
    for (int variant = HIST_GLOBAL; variant <= HIST_PRIVATE_UNIFORM; ++variant) {
        const int rc = launch_histogram(dkeys, dhist, n, bins, variant, 0);
        if (rc != 0) return 100 + rc;
        CHECK(cudaDeviceSynchronize());
        CHECK(cudaMemcpy(hist.data(), dhist, bins * sizeof(int), cudaMemcpyDeviceToHost));
        for (int b = 0; b < bins; ++b) wrong += hist[b] != expected[b];
    }
    CHECK(cudaFree(dkeys));
    CHECK(cudaFree(dhist));
    return wrong;
}

int main() {
    const int compaction = check_compact<int>(3 * 4096 + 77) + check_compact<float>(3 * 4096 + 77);  // 4 tiles
    const int histograms = check_histogram(100003, 256) + check_histogram(4099, 1000);
    std::printf("compaction: %d wrong, histogram: %d wrong\n", compaction, histograms);
    return compaction == 0 && histograms == 0 ? 0 : 4;
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
    assert report.clean and "compaction: 0 wrong, histogram: 0 wrong" in report.output, report.output[-4000:]
