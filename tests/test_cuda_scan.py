"""The scans cuda/06-parallel-algorithms/01_scan exports (gpu_ml/kernels/cuda/scan*.cuh): reduce-then-scan in three
kernels and the single pass with decoupled look-back, through the launchers of `cuda/scan.cuh`.

One library includes the header and adds an `extern "C"` shim per launcher and dtype (the notebook's own cell does the
same; `%%cuda`'s wrapper fills in the stream). On a CPU it is only compiled, with the host program that
compute-sanitizer runs; on a GPU the scans run against torch.cumsum on ragged sizes, every tile size, many tiles,
unaligned inputs and outputs, int32 overflow, inf and NaN, a side stream and a CUDA graph, and under memcheck and
racecheck.
"""

from __future__ import annotations

import pytest
import torch

from gpu_ml import cuda, sanitize
from gpu_ml.env import has_gpu

SOURCE = '#include "cuda/scan.cuh"\n' + "".join(f"""
extern "C" int reduce_then_scan_{s}(const {t}* x, {t}* y, {t}* sums, long long words, long long n, bool exclusive,
                                    int items, cudaStream_t stream) {{
    return launch_reduce_then_scan(x, y, sums, words, n, exclusive, items, stream);
}}
extern "C" int scan_lookback_{s}(const {t}* x, {t}* y, long long* status, long long words, long long n,
                                 bool exclusive, int items, cudaStream_t stream) {{
    return launch_scan_lookback(x, y, status, words, n, exclusive, items, stream);
}}
""" for t, s in (("float", "f32"), ("int", "i32")))
VARIANTS = ("reduce_then_scan", "scan_lookback")
ITEMS = (4, 8, 16, 32)
DTYPES = (torch.float32, torch.int32)

needs_nvcc = pytest.mark.skipif(not cuda.has_nvcc(), reason="nvcc not found: CUDA cells cannot compile")
needs_gpu = pytest.mark.skipif(not has_gpu(), reason="the scans need a CUDA GPU")


@pytest.fixture(scope="module")
def scans():
    """{name: CudaFunction} of the shims, built once (cached by gpu_ml.cuda like a %%cuda cell)."""
    if not cuda.has_nvcc():
        pytest.skip("nvcc not found")
    return cuda.load_library(cuda.build(SOURCE, library=True), SOURCE)


def tiles(n: int, items: int) -> int:
    return -(-n // (256 * items))


def status_words(n: int, items: int) -> int:
    """The one pass's status words: a 128-byte line of 16 per tile (cuda/scan_status.cuh) and the tile counter."""
    return 16 * tiles(n, items) + 1


def scratch(variant: str, n: int, items: int, dtype: torch.dtype) -> torch.Tensor:
    """One sum per tile (three kernels), or the status words (one pass)."""
    if variant == "scan_lookback":
        return torch.full((status_words(n, items),), -1, dtype=torch.int64, device="cuda")  # the launcher zeroes it
    return torch.empty(max(1, tiles(n, items)), dtype=dtype, device="cuda")


def run(scans, variant, x, exclusive=False, items=16, y=None):
    fn = scans[f"{variant}_{'f32' if x.dtype == torch.float32 else 'i32'}"]
    y = torch.empty_like(x) if y is None else y
    work = scratch(variant, x.numel(), items, x.dtype)
    rc = fn(x, y, work, work.numel(), x.numel(), exclusive, items)  # launched here, not inside an assert
    assert rc == 0, f"{variant} refused a valid launch ({rc})"
    return y


def reference(x: torch.Tensor, exclusive: bool) -> torch.Tensor:
    """float64 scan of float32, or the wrapping int32 scan (torch.cumsum(dtype=int32)); shifted if exclusive."""
    y = x.double().cumsum(0) if x.dtype == torch.float32 else x.cumsum(0, dtype=torch.int32)
    return torch.nn.functional.pad(y[:-1], (1, 0)) if exclusive else y


def bound(x: torch.Tensor, items: int) -> torch.Tensor:
    """The notebook's bound: gamma_d * (scan of |x|), d = 96 + 11 * (the element's tile)."""
    depth = (96 + 11 * (torch.arange(x.numel(), device=x.device) // (256 * items))).double()
    u = 2.0**-24
    return depth * u / (1 - depth * u) * x.double().abs().cumsum(0)


def assert_scan(got: torch.Tensor, x: torch.Tensor, exclusive: bool, items: int, name: str) -> None:
    expected = reference(x, exclusive)
    if x.dtype == torch.int32:
        assert torch.equal(got, expected), f"{name}: int32 differs from torch.cumsum(dtype=int32)"
        return
    err = (got.double() - expected).abs()
    worst = int((err - bound(x, items)).argmax())
    assert (err <= bound(x, items)).all(), f"{name}: error {err[worst].item():.3g} at {worst} above the bound"


def inputs(n: int, dtype: torch.dtype, offset: int = 0) -> torch.Tensor:
    """n values starting `offset` elements into an allocation: int32 from the whole range (most prefixes wrap)."""
    if dtype == torch.int32:
        return torch.randint(-(2**31), 2**31 - 1, (n + offset,), device="cuda", dtype=torch.int32)[offset:]
    return torch.randn(n + offset, device="cuda")[offset:]


@needs_nvcc
def test_the_shims_compile(scans):
    assert set(scans) == {f"{v}_{s}" for v in VARIANTS for s in ("f32", "i32")}
    params = [p.ctype for p in scans["scan_lookback_i32"].params]
    assert params[-1] == "cudaStream_t" and params[2] == "long long"


@needs_gpu
@pytest.mark.parametrize("exclusive", [False, True])
@pytest.mark.parametrize("items", ITEMS)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("n", [1, 2, 31, 1023, 1024, 1025, 3 * 4096 + 1, 70_001, 2**20 + 7])
def test_scans_match_torch(scans, variant, dtype, items, exclusive, n):
    x = inputs(n, dtype)
    assert_scan(run(scans, variant, x, exclusive, items), x, exclusive, items, f"{variant} n={n} items={items}")


@needs_gpu
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("variant", VARIANTS)
def test_many_tiles(scans, variant, dtype):
    """12,289 tiles of 1024 (look-backs that cross many windows; 13 rounds of the one-block scan of the sums)."""
    x = inputs(3 * 2**22 + 5, dtype)
    for exclusive in (False, True):
        assert_scan(run(scans, variant, x, exclusive, 4), x, exclusive, 4, f"{variant} many tiles")


@needs_gpu
@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize(("x_offset", "y_offset"), [(1, 0), (0, 1), (3, 2)])
def test_unaligned_input_or_output_and_nothing_written_outside(scans, variant, x_offset, y_offset):
    """Slices that start off a 16-byte boundary take the element-by-element path; the elements around y stay."""
    n = 2 * 4096 + 5
    x = inputs(n, torch.int32, x_offset)
    buf = torch.full((n + y_offset + 64,), 12345, dtype=torch.int32, device="cuda")
    y = buf[y_offset:y_offset + n]
    assert_scan(run(scans, variant, x, y=y), x, False, 16, f"{variant} offsets {x_offset}, {y_offset}")
    assert (buf[:y_offset] == 12345).all() and (buf[y_offset + n:] == 12345).all(), "a store outside y"


@needs_gpu
@pytest.mark.parametrize("variant", VARIANTS)
def test_special_values_and_int32_wraparound(scans, variant):
    x = torch.tensor([1.0, float("inf"), -1.0, float("nan"), 2.0, -float("inf")], device="cuda")
    for exclusive in (False, True):
        torch.testing.assert_close(run(scans, variant, x, exclusive), reference(x, exclusive).float(), equal_nan=True)
    big = torch.full((5000,), 2**30, dtype=torch.int32, device="cuda")
    assert torch.equal(run(scans, variant, big, items=4), big.cumsum(0, dtype=torch.int32))


@needs_gpu
@pytest.mark.parametrize("variant", VARIANTS)
def test_refusals_and_empty(scans, variant):
    fn = scans[f"{variant}_i32"]
    x = torch.ones(5000, dtype=torch.int32, device="cuda")
    y = torch.full_like(x, 7)
    enough = scratch(variant, x.numel(), 16, x.dtype)
    assert fn(x, y, enough, enough.numel(), x.numel(), False, 12) == -1  # no such tile size
    assert fn(x, y, enough, enough.numel() - 1, x.numel(), False, 16) == -1  # scratch too small
    assert fn(x, y, enough, enough.numel(), -1, False, 16) == -1
    assert fn(x, y, enough, enough.numel(), 0, False, 16) == 0  # n = 0: nothing to do
    assert (y == 7).all(), "a refused launch wrote the output"


@needs_gpu
def test_the_status_words_are_reset_by_every_call(scans):
    """Two calls with one status buffer: the launcher zeroes it on the stream, so the second finds a fresh counter."""
    fn = scans["scan_lookback_i32"]
    x = inputs(100_003, torch.int32)
    status = scratch("scan_lookback", x.numel(), 16, x.dtype)
    for _ in range(2):
        y = torch.empty_like(x)
        assert fn(x, y, status, status.numel(), x.numel(), False, 16) == 0
        assert torch.equal(y, reference(x, False))
    assert status[-1].item() == tiles(x.numel(), 16)  # the counter handed out one number per tile


@needs_gpu
@pytest.mark.parametrize("variant", VARIANTS)
def test_a_side_stream_and_a_cuda_graph(scans, variant):
    x = inputs(2**22 + 3, torch.int32)
    fn = scans[f"{variant}_i32"]
    fn.sync = False  # as for a benchmark: no device-wide synchronization, which a capture would refuse
    try:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            y = run(scans, variant, x)
        torch.cuda.current_stream().wait_stream(side)
        assert torch.equal(y, reference(x, False))
        y = torch.empty_like(x)
        work = scratch(variant, x.numel(), 16, x.dtype)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):  # captures on a stream of its own, which %%cuda's wrapper passes
            fn(x, y, work, work.numel(), x.numel(), False, 16)
        for _ in range(2):
            y.fill_(0)
            graph.replay()
            torch.cuda.synchronize()
            assert torch.equal(y, reference(x, False)), "the scan replayed from a CUDA graph"
    finally:
        fn.sync = True


# ----------------------------------------------------------------------------- compute-sanitizer

PROGRAM = r"""
#include <cstdio>
#include <vector>
#include "cuda/scan.cuh"
#include "gpu_ml.cuh"  // CHECK

// Both scans of n small integers (exact in float too), inclusive and exclusive, into exactly sized buffers.
template <typename T>
static int check(long long n) {
    const long long tiles = (n + 4095) / 4096;
    std::vector<T> x(n), y(n);
    for (long long i = 0; i < n; ++i) x[i] = (T)((int)((i * 2654435761ull) % 201) - 100);
    T *dx, *dy, *sums;
    long long* status;
    CHECK(cudaMalloc(&dx, n * sizeof(T)));
    CHECK(cudaMalloc(&dy, n * sizeof(T)));
    CHECK(cudaMalloc(&sums, tiles * sizeof(T)));
    CHECK(cudaMalloc(&status, scan_status_words(n, 16) * sizeof(long long)));
    CHECK(cudaMemcpy(dx, x.data(), n * sizeof(T), cudaMemcpyHostToDevice));
    int wrong = 0;
    for (int variant = 0; variant < 2; ++variant)
        for (int exclusive = 0; exclusive < 2; ++exclusive) {
            CHECK(cudaMemset(dy, 0xFF, n * sizeof(T)));
            const long long words = scan_status_words(n, 16);
            const int rc = variant == 0 ? launch_reduce_then_scan(dx, dy, sums, tiles, n, exclusive, 16, 0)
                                        : launch_scan_lookback(dx, dy, status, words, n, exclusive, 16, 0);
            if (rc != 0) return 100 + rc;
            CHECK(cudaDeviceSynchronize());
            CHECK(cudaMemcpy(y.data(), dy, n * sizeof(T), cudaMemcpyDeviceToHost));
            long long sum = 0;
            for (long long i = 0; i < n; ++i) {
                if (!exclusive) sum += (long long)x[i];
                wrong += y[i] != (T)sum;
                if (exclusive) sum += (long long)x[i];
            }
        }
    CHECK(cudaFree(dx));
    CHECK(cudaFree(dy));
    CHECK(cudaFree(sums));
    CHECK(cudaFree(status));
    return wrong;
}

int main() {
    const int wrong = check<int>(3 * 4096 + 77) + check<float>(3 * 4096 + 77);  // 4 tiles, the last one partial
    std::printf("scan: %d wrong elements\n", wrong);
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
    assert report.clean and "scan: 0 wrong elements" in report.output, report.output[-4000:]
