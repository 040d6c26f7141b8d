"""The kernels cuda/06-parallel-algorithms/04_bitonic_sort_and_morton_order exports (gpu_ml/kernels/cuda/
sort_keys.cuh, bitonic.cuh, bitonic_warp.cuh, morton.cuh, neighbourhood.cuh): the bitonic sort of rows (values, or
values and indices) by a block per row and by a warp per row, Morton encoding and decoding, and the neighbourhood
sum with threads in row-major order or Z-order.

One library includes the headers and adds an `extern "C"` shim per launcher (the notebook's cells do the same;
`%%cuda`'s wrapper fills in the stream). On a CPU it is only compiled, with the host program that compute-sanitizer
runs; on a GPU the sorts run against torch.sort on the CPU (NaN last) for every padded length, special values, ties
and unaligned rows, the Morton codes against a Python loop and over all 2^32 codes, the neighbourhood sums against
PyTorch's, the launchers' refusals, and memcheck and racecheck.
"""

from __future__ import annotations

import pytest
import torch

from gpu_ml import cuda, sanitize
from gpu_ml.env import has_gpu

SOURCE = """
#include "cuda/bitonic.cuh"
#include "cuda/bitonic_warp.cuh"
#include "cuda/neighbourhood.cuh"

extern "C" int sort_rows_f32(const float* x, float* y, long long rows, int length, cudaStream_t stream) {
    return launch_sort_rows(x, y, nullptr, rows, length, stream);
}
extern "C" int argsort_rows_f32(const float* x, float* y, long long* indices, long long rows, int length,
                                cudaStream_t stream) {
    return launch_sort_rows(x, y, indices, rows, length, stream);
}
extern "C" int sort_rows_warp_f32(const float* x, float* y, long long rows, int length, cudaStream_t stream) {
    return launch_sort_rows_warp(x, y, nullptr, rows, length, stream);
}
extern "C" int argsort_rows_warp_f32(const float* x, float* y, long long* indices, long long rows, int length,
                                     cudaStream_t stream) {
    return launch_sort_rows_warp(x, y, indices, rows, length, stream);
}
extern "C" int morton_encode_i32(const int* x, const int* y, int* code, long long n, cudaStream_t stream) {
    return launch_morton_encode(x, y, code, n, stream);
}
extern "C" int morton_decode_i32(const int* code, int* x, int* y, long long n, cudaStream_t stream) {
    return launch_morton_decode(code, x, y, n, stream);
}
extern "C" void morton_roundtrip(long long* wrong, cudaStream_t stream) {
    morton_roundtrip_kernel<<<4096, 256, 0, stream>>>(reinterpret_cast<unsigned long long*>(wrong));
}
extern "C" int neighbourhood_sum_f32(const float* in, float* out, int log, int radius, int order, bool column_major,
                                     cudaStream_t stream) {
    return launch_neighbourhood_sum(in, out, log, radius, order, column_major, stream);
}
"""
NAMES = {"sort_rows_f32", "argsort_rows_f32", "sort_rows_warp_f32", "argsort_rows_warp_f32", "morton_encode_i32",
         "morton_decode_i32", "morton_roundtrip", "neighbourhood_sum_f32"}
# Both sides of every padded length the launcher picks (32 to 4096) and the smallest rows.
LENGTHS = [1, 2, 3, 31, 32, 33, 63, 64, 65, 127, 128, 129, 255, 256, 257, 511, 512, 513, 1000, 1024, 1025, 2047, 2048,
           2049, 3000, 4095, 4096]
NAN, INF = float("nan"), float("inf")
NEG_NAN = torch.tensor([-1], dtype=torch.int32).view(torch.float32).item()  # 0xffffffff: a NaN, sign bit set

needs_nvcc = pytest.mark.skipif(not cuda.has_nvcc(), reason="nvcc not found: CUDA cells cannot compile")
needs_gpu = pytest.mark.skipif(not has_gpu(), reason="the kernels need a CUDA GPU")


@pytest.fixture(scope="module")
def lib():
    """{name: CudaFunction} of the shims, built once (cached by gpu_ml.cuda like a %%cuda cell)."""
    if not cuda.has_nvcc():
        pytest.skip("nvcc not found")
    return cuda.load_library(cuda.build(SOURCE, library=True), SOURCE)


def sort(lib, x: torch.Tensor, pairs: bool, y: torch.Tensor | None = None, warp: bool = False):
    """Sorted by the block kernel, or with warp=True by the warp kernel (rows of at most 1024)."""
    rows, length = x.shape
    y = torch.empty_like(x) if y is None else y
    kind = "_warp" if warp else ""
    if pairs:
        indices = torch.full(x.shape, -7, dtype=torch.int64, device=x.device)
        rc = lib[f"argsort_rows{kind}_f32"](x, y, indices, rows, length)
    else:
        indices = None
        rc = lib[f"sort_rows{kind}_f32"](x, y, rows, length)
    assert rc == 0, f"a valid sort was refused ({rc})"
    return y, indices


def same_values(got: torch.Tensor, expected: torch.Tensor) -> bool:
    return torch.equal(got.isnan(), expected.isnan()) and torch.equal(got.nan_to_num(7.0), expected.nan_to_num(7.0))


def assert_sorted(lib, x: torch.Tensor, label: str, warp: bool = False) -> None:
    expected = torch.sort(x.cpu(), dim=-1, stable=True)  # the CPU's order: every NaN last
    values, _ = sort(lib, x, pairs=False, warp=warp)
    assert same_values(values.cpu(), expected.values), f"{label}: values differ from torch.sort"
    values, indices = sort(lib, x, pairs=True, warp=warp)
    values, indices = values.cpu(), indices.cpu()
    assert same_values(values, expected.values), f"{label}: argsort values differ from torch.sort"
    picked, number = x.cpu().gather(1, indices), ~values.isnan()  # NaN comes back as the one positive quiet NaN
    assert same_values(picked, values), f"{label}: indices and values disagree"
    assert torch.equal(picked[number].view(torch.int32), values[number].view(torch.int32)), f"{label}: not bit for bit"
    if not ((x.cpu() == 0) & x.cpu().signbit()).any():  # no -0.0: the stable order is unique
        assert torch.equal(indices, expected.indices), f"{label}: indices differ from the stable sort's"


@needs_nvcc
def test_the_shims_compile(lib):
    assert set(lib) == NAMES
    params = [p.ctype for p in lib["argsort_rows_f32"].params]
    assert params == ["float", "float", "long long", "long long", "int", "cudaStream_t"]


@needs_gpu
@pytest.mark.parametrize("warp", [False, True], ids=["block", "warp"])
@pytest.mark.parametrize("length", LENGTHS)
def test_sorts_match_torch(lib, length, warp):
    if warp and length > 1024:
        pytest.skip("a warp sorts rows of at most 1024")
    g = torch.Generator(device="cuda").manual_seed(length)
    x = torch.randint(-20, 20, (41, length), device="cuda", generator=g).float()  # ties everywhere
    x[1] = torch.arange(length, device="cuda")
    x[2] = torch.arange(length, 0, -1, device="cuda")  # reversed (and no -0.0, which would skip the index check)
    x[3] = -1.25
    x[4] = torch.randn(length, device="cuda", generator=g) * 1e30
    x[5, ::3] = NAN
    x[6, 1::4] = NEG_NAN
    x[7, ::2] = INF
    x[8, 1::2] = -INF
    assert_sorted(lib, x, f"length {length}", warp)


@needs_gpu
@pytest.mark.parametrize("warp", [False, True], ids=["block", "warp"])
def test_special_values_and_signed_zeros(lib, warp):
    special = torch.tensor([NAN, -INF, 1.0, -0.0, 0.0, NEG_NAN, INF, -1.0, 1e-45, -1e-45, 0.0, -0.0, NAN, 3.4e38,
                            -3.4e38], device="cuda")
    assert_sorted(lib, special.repeat(3, 1), "special values", warp)
    values, _ = sort(lib, torch.tensor([[0.0, -0.0, 0.0, -0.0]], device="cuda"), pairs=False, warp=warp)
    assert values.signbit().tolist() == [[True, True, False, False]], "-0.0 sorts before +0.0"


@needs_gpu
@pytest.mark.parametrize("warp", [False, True], ids=["block", "warp"])
@pytest.mark.parametrize("pairs", [False, True])
def test_unaligned_rows_and_nothing_written_outside(lib, pairs, warp):
    rows, length = 300, 777
    x = torch.randn(rows * length + 1, device="cuda")[1:].view(rows, length)  # 4 bytes past alignment
    buf = torch.full((rows * length + 1 + 4096,), 12345.0, device="cuda")
    y = buf[1:1 + rows * length].view(rows, length)
    values, _ = sort(lib, x, pairs, y=y, warp=warp)
    assert torch.equal(values.cpu(), torch.sort(x.cpu(), dim=-1).values)
    assert buf[0].item() == 12345.0 and (buf[1 + rows * length:] == 12345.0).all(), "a store outside y"


@needs_gpu
@pytest.mark.parametrize("warp", [False, True], ids=["block", "warp"])
def test_many_rows(lib, warp):
    x = torch.randn(70_001, 1024, device="cuda")  # for the warp kernel, a last block of one row
    values, indices = sort(lib, x, pairs=True, warp=warp)
    assert torch.equal(values, torch.sort(x, dim=-1).values)  # no NaN: CUDA's torch.sort agrees
    assert torch.equal(x.gather(1, indices), values)


@needs_gpu
def test_sort_refusals_and_empty(lib):
    x = torch.ones(4, 5000, device="cuda")
    y = torch.full_like(x, 7.0)
    idx = torch.zeros(x.shape, dtype=torch.int64, device="cuda")
    assert lib["sort_rows_f32"](x, y, 4, 4097) == -1  # rows longer than 4096
    assert lib["argsort_rows_f32"](x, y, idx, 4, 4097) == -1
    assert lib["sort_rows_f32"](x, y, -1, 100) == -1
    assert lib["sort_rows_f32"](x, y, 2**31, 100) == -1  # more rows than a grid has blocks
    assert lib["sort_rows_f32"](x, y, 4, -3) == -1
    assert lib["sort_rows_f32"](x, y, 0, 100) == 0 and lib["sort_rows_f32"](x, y, 4, 0) == 0  # nothing to do
    assert lib["sort_rows_warp_f32"](x, y, 4, 1025) == -1  # a warp sorts rows of at most 1024
    assert lib["argsort_rows_warp_f32"](x, y, idx, 4, 1025) == -1
    assert lib["sort_rows_warp_f32"](x, y, -1, 100) == -1 and lib["sort_rows_warp_f32"](x, y, 2**31, 100) == -1
    assert lib["sort_rows_warp_f32"](x, y, 0, 100) == 0 and lib["sort_rows_warp_f32"](x, y, 4, 0) == 0
    assert (y == 7.0).all(), "a refused or empty launch wrote the output"


@needs_gpu
def test_a_side_stream_and_a_cuda_graph(lib):
    x = torch.randn(1000, 1000, device="cuda")
    fn = lib["argsort_rows_f32"]
    fn.sync = False  # as for a benchmark: no device-wide synchronization, which a capture would refuse
    try:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            values, indices = sort(lib, x, pairs=True)
        torch.cuda.current_stream().wait_stream(side)
        assert torch.equal(values, torch.sort(x, dim=-1).values)
        y, idx = torch.empty_like(x), torch.empty(x.shape, dtype=torch.int64, device="cuda")
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            fn(x, y, idx, 1000, 1000)
        y.zero_()
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(y, values) and torch.equal(idx, indices), "the sort replayed from a CUDA graph"
    finally:
        fn.sync = True


def morton_loop(x: int, y: int) -> int:
    return sum(((x >> b) & 1) << (2 * b) | ((y >> b) & 1) << (2 * b + 1) for b in range(16))


@needs_gpu
def test_morton_codes_match_the_loop_and_round_trip(lib):
    g = torch.Generator().manual_seed(0)
    points = torch.randint(0, 2**16, (2, 20_003), generator=g, dtype=torch.int32)
    points[:, :4] = torch.tensor([[0, 65535, 0, 65535], [0, 0, 65535, 65535]])
    x, y = points[0].cuda(), points[1].cuda()
    code = torch.empty_like(x)
    assert lib["morton_encode_i32"](x, y, code, x.numel()) == 0
    loop = [morton_loop(int(a), int(b)) for a, b in zip(points[0], points[1], strict=True)]
    assert code.cpu().tolist() == [c - 2**32 if c >= 2**31 else c for c in loop]
    dx, dy = torch.empty_like(code), torch.empty_like(code)
    assert lib["morton_decode_i32"](code, dx, dy, code.numel()) == 0
    assert torch.equal(dx, x) and torch.equal(dy, y)
    high = torch.tensor([0x12345 | 0x70000, 0xFFFFFFFF - 2**32], dtype=torch.int32, device="cuda")  # bits above 16
    code = torch.empty_like(high)
    assert lib["morton_encode_i32"](high, high, code, 2) == 0
    low = high & 0xFFFF
    expected = [morton_loop(v, v) for v in low.tolist()]
    assert code.cpu().tolist() == [c - 2**32 if c >= 2**31 else c for c in expected], "only the low 16 bits count"
    wrong = torch.zeros(1, dtype=torch.int64, device="cuda")
    lib["morton_roundtrip"](wrong)
    assert wrong.item() == 0, f"{wrong.item()} of the 2^32 codes do not round-trip"
    assert lib["morton_encode_i32"](x, y, code, -1) == -1 and lib["morton_decode_i32"](code, dx, dy, 0) == 0


def box_sum(grid: torch.Tensor, radius: int) -> torch.Tensor:
    """The zero-padded grid shifted (2 radius + 1)^2 ways and added up (no conv2d: it may round through TF32)."""
    padded, side, width = torch.nn.functional.pad(grid, (radius,) * 4), grid.shape[0], 2 * radius + 1
    return sum(padded[r:r + side, c:c + side] for r in range(width) for c in range(width))


@needs_gpu
@pytest.mark.parametrize("column_major", [False, True])
@pytest.mark.parametrize("order", [0, 1], ids=["row-major threads", "z-order threads"])
@pytest.mark.parametrize("radius", [1, 2])
@pytest.mark.parametrize("log", [4, 5, 9, 12])
def test_neighbourhood_sums_match_torch(lib, log, radius, order, column_major):
    side = 2**log
    grid = torch.randint(-8, 9, (side, side), device="cuda").float()  # small integers: every sum exact
    stored = grid.T.contiguous() if column_major else grid
    buf = torch.full((side * side + 1024,), NAN, device="cuda")
    out = buf[: side * side].view(side, side)
    assert lib["neighbourhood_sum_f32"](stored, out, log, radius, order, column_major) == 0
    assert torch.equal(out, box_sum(grid, radius))
    assert buf[side * side:].isnan().all(), "a store past the output"


@needs_gpu
def test_neighbourhood_refusals(lib):
    grid = torch.zeros(64, 64, device="cuda")
    out = torch.full_like(grid, 3.0)
    fn = lib["neighbourhood_sum_f32"]
    for log, radius, order in [(3, 1, 0), (16, 1, 0), (6, 0, 0), (6, 3, 1), (6, 1, 2), (6, 1, -1)]:
        assert fn(grid, out, log, radius, order, False) == -1, (log, radius, order)
    assert (out == 3.0).all(), "a refused launch wrote the output"


# ----------------------------------------------------------------------------- compute-sanitizer

PROGRAM = r"""
#include <algorithm>
#include <cstdio>
#include <vector>
#include "cuda/bitonic.cuh"
#include "cuda/bitonic_warp.cuh"
#include "cuda/neighbourhood.cuh"
#include "gpu_ml.cuh"  // CHECK

// Rows of small integers (many ties) sorted as values and as pairs, every padded length that uses shared memory
// and the smallest ones (warp: the warp kernel, for the lengths up to 1024); compared with std::sort, the pairs'
// indices checked against the values they point at.
static int check_sort(int rows, int length, bool warp) {
    const long long n = (long long)rows * length;
    std::vector<float> x(n), y(n), expected(n);
    std::vector<long long> idx(n);
    for (long long i = 0; i < n; ++i) x[i] = (float)((int)((i * 2654435761ull) % 201) - 100);
    float *dx, *dy;
    long long* didx;
    CHECK(cudaMalloc(&dx, n * sizeof(float)));
    CHECK(cudaMalloc(&dy, n * sizeof(float)));
    CHECK(cudaMalloc(&didx, n * sizeof(long long)));
    CHECK(cudaMemcpy(dx, x.data(), n * sizeof(float), cudaMemcpyHostToDevice));
    expected = x;
    for (int r = 0; r < rows; ++r)
        std::sort(expected.begin() + (long long)r * length, expected.begin() + (r + 1LL) * length);
    int wrong = 0;
    for (int pairs = 0; pairs < 2; ++pairs) {
        CHECK(cudaMemset(dy, 0xFF, n * sizeof(float)));
        const auto launch = warp ? launch_sort_rows_warp : launch_sort_rows;
        if (launch(dx, dy, pairs ? didx : nullptr, rows, length, 0) != 0) return 1000;
        CHECK(cudaDeviceSynchronize());
        CHECK(cudaMemcpy(y.data(), dy, n * sizeof(float), cudaMemcpyDeviceToHost));
        CHECK(cudaMemcpy(idx.data(), didx, n * sizeof(long long), cudaMemcpyDeviceToHost));
        for (long long i = 0; i < n; ++i) {
            wrong += y[i] != expected[i];
            if (pairs) wrong += idx[i] < 0 || idx[i] >= length || x[i - i % length + idx[i]] != y[i];
        }
    }
    CHECK(cudaFree(dx));
    CHECK(cudaFree(dy));
    CHECK(cudaFree(didx));
    return wrong;
}

// A 32 x 32 grid, both orders and both layouts, radius 1 and 2, against the sums on the host.
static int check_neighbourhood() {
    const int log = 5, side = 32, n = side * side;
    std::vector<float> grid(n), stored(n), out(n);
    for (int i = 0; i < n; ++i) grid[i] = (float)((i * 7919) % 17 - 8);
    float *din, *dout;
    CHECK(cudaMalloc(&din, n * sizeof(float)));
    CHECK(cudaMalloc(&dout, n * sizeof(float)));
    int wrong = 0;
    for (int column_major = 0; column_major < 2; ++column_major) {
        for (int r = 0; r < side; ++r)
            for (int c = 0; c < side; ++c) stored[column_major ? c * side + r : r * side + c] = grid[r * side + c];
        CHECK(cudaMemcpy(din, stored.data(), n * sizeof(float), cudaMemcpyHostToDevice));
        for (int radius = 1; radius <= 2; ++radius)
            for (int order = 0; order < 2; ++order) {
                if (launch_neighbourhood_sum(din, dout, log, radius, order, column_major, 0) != 0) return 1000;
                CHECK(cudaDeviceSynchronize());
                CHECK(cudaMemcpy(out.data(), dout, n * sizeof(float), cudaMemcpyDeviceToHost));
                for (int r = 0; r < side; ++r)
                    for (int c = 0; c < side; ++c) {
                        float sum = 0.0f;
                        for (int rr = r - radius; rr <= r + radius; ++rr)
                            for (int cc = c - radius; cc <= c + radius; ++cc)
                                if (rr >= 0 && rr < side && cc >= 0 && cc < side) sum += grid[rr * side + cc];
                        wrong += out[r * side + c] != sum;
                    }
            }
    }
    CHECK(cudaFree(din));
    CHECK(cudaFree(dout));
    return wrong;
}

int main() {
    int wrong = 0;
    const int lengths[] = {1, 33, 200, 300, 1000, 2049, 4096};
    for (int length : lengths) wrong += check_sort(3, length, false);
    for (int length : lengths)
        if (length <= 1024) wrong += check_sort(5, length, true);  // a block of 4 rows and one of 1
    wrong += check_neighbourhood();
    std::printf("bitonic and neighbourhood: %d wrong elements\n", wrong);
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
    assert report.clean and "bitonic and neighbourhood: 0 wrong elements" in report.output, report.output[-4000:]
