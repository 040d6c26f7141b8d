"""compute-sanitizer (memcheck and racecheck) on the matmul kernels of cuda/02-matrix-ops.

Each kernel is read from the file its notebook exports into gpu_ml/kernels/cuda (`gpu-ml export`;
tests/test_export.py keeps those files in sync with the notebooks). A small host program includes
that file (allocate exactly-sized buffers, fill them, launch through the `extern "C"` host function,
compare with a CPU reference), is built with `gpu_ml.cuda.build(..., library=False)` and run under
`compute-sanitizer --tool memcheck` and `--tool racecheck`. A reported error, a missing summary line,
a wrong result or a non-zero exit fails the test.

Without a GPU (CI), only the lookup and a compile of the generated programs run.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from gpu_ml import cuda, sanitize
from gpu_ml.env import arch_number
from gpu_ml.export import KERNELS as GENERATED

CUDA_KERNELS = GENERATED / "cuda"

# extern "C" function -> (generated file, M, N, K). Shapes are valid for the kernel (the fast ones need whole
# tiles; their Python wrappers pad other shapes), span several blocks in M and N, and take more K steps
# than the pipelines have stages, so that every stage is reused. sgemm_shared/1d/2d take any shape.
KERNELS = {
    "sgemm_shared": ("sgemm_naive_to_shared.cu", 127, 129, 131),
    "sgemm_1d": ("sgemm_tiled.cu", 127, 129, 131),
    "sgemm_2d": ("sgemm_tiled.cu", 127, 129, 131),
    "sgemm_vec": ("sgemm_tiled.cu", 256, 384, 24),
    "sgemm_nobank": ("sgemm_tiled.cu", 256, 384, 24),
    "sgemm_warptile": ("sgemm_tiled.cu", 256, 384, 24),
    "sgemm_pipelined": ("sgemm_tiled.cu", 256, 384, 40),
    "hgemm_wmma_f16": ("hgemm_wmma.cu", 256, 256, 96),
    "hgemm_mma_f16": ("hgemm_mma.cu", 256, 512, 160),
    "hgemm_mma_bf16": ("hgemm_mma.cu", 256, 512, 160),
    "hgemm_wgmma_f16": ("hgemm_wgmma.cu", 256, 512, 320),
}
HOPPER_ONLY = {"hgemm_wgmma_f16"}
ARCH = {"hgemm_wgmma.cu": "sm_90a"}  # the file's %%cuda cell says --arch sm_90a (wgmma, setmaxnreg)
MIN_ARCH = {"hgemm_wmma.cu": "sm_80", "hgemm_mma.cu": "sm_80"}  # their cells' --min-arch: bf16 fragments, cp.async
ELEMENT = {"float": "float", "half": "half", "__half": "half", "__nv_bfloat16": "__nv_bfloat16"}
TOLERANCE = {"float": 1e-4, "half": 1e-2, "__nv_bfloat16": 2e-2}  # relative to 1 + |reference|

HARNESS = r"""
#include "cuda/KERNEL_FILE"
#include "gpu_ml.cuh"  // CHECK
#include <vector>

static float to_f(float x) { return x; }
static float to_f(half x) { return __half2float(x); }
static float to_f(__nv_bfloat16 x) { return __bfloat162float(x); }
template <typename T> static T from_f(float x);
template <> float from_f<float>(float x) { return x; }
template <> half from_f<half>(float x) { return __float2half_rn(x); }
template <> __nv_bfloat16 from_f<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }

int main() {
    using T = ELEMENT_T;
    const int M = SHAPE_M, N = SHAPE_N, K = SHAPE_K;
    std::vector<T> a(size_t(M) * K), b(size_t(K) * N), c(size_t(M) * N);
    unsigned state = 12345u;
    auto uniform = [&] {  // a small LCG: the same numbers on every machine
        state = state * 1664525u + 1013904223u;
        return float((state >> 8) & 0xFFFF) / 32768.0f - 1.0f;
    };
    for (auto& x : a) x = from_f<T>(uniform());
    for (auto& x : b) x = from_f<T>(uniform());
    T *da, *db, *dc;  // exactly sized: memcheck flags any access past the end
    CHECK(cudaMalloc(&da, a.size() * sizeof(T)));
    CHECK(cudaMalloc(&db, b.size() * sizeof(T)));
    CHECK(cudaMalloc(&dc, c.size() * sizeof(T)));
    CHECK(cudaMemcpy(da, a.data(), a.size() * sizeof(T), cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(db, b.data(), b.size() * sizeof(T), cudaMemcpyHostToDevice));
    CHECK(cudaMemset(dc, 0xFF, c.size() * sizeof(T)));  // NaN wherever the kernel writes nothing
    const int rc = FUNCTION(da, db, dc, M, N, K EXTRA_ARGS);
    if (rc != 0) { std::printf("FUNCTION returned CUDA error %d\n", rc); return 3; }
    CHECK(cudaDeviceSynchronize());
    CHECK(cudaMemcpy(c.data(), dc, c.size() * sizeof(T), cudaMemcpyDeviceToHost));
    double worst = 0.0;
    for (int i = 0; i < M; ++i)
        for (int j = 0; j < N; ++j) {
            double ref = 0.0;
            for (int k = 0; k < K; ++k) ref += double(to_f(a[size_t(i) * K + k])) * double(to_f(b[size_t(k) * N + j]));
            const double err = std::fabs(ref - double(to_f(c[size_t(i) * N + j]))) / (1.0 + std::fabs(ref));
            if (!(err <= worst)) worst = err;  // a NaN makes worst NaN
        }
    CHECK(cudaFree(da));
    CHECK(cudaFree(db));
    CHECK(cudaFree(dc));
    std::printf("FUNCTION %dx%dx%d: max relative error %.3g\n", M, N, K, worst);
    return worst <= TOLERANCE_V ? 0 : 4;
}
"""


def kernel_file(name: str) -> Path:
    """The generated file under gpu_ml/kernels/cuda that defines the host function `name` (exactly one)."""
    hits = [path for path in sorted(CUDA_KERNELS.glob("*.cu")) if name in cuda.parse_signatures(path.read_text())]
    assert len(hits) == 1, f"{name}: {len(hits)} generated .cu files define it (expected 1): {hits}"
    return hits[0]


def program(name: str) -> tuple[str, str | None]:
    """A host program that includes the kernel's generated file, and the -arch that file needs (or None)."""
    path = kernel_file(name)
    assert path.name == KERNELS[name][0], f"{name} moved to {path.name}: update KERNELS"
    ret, params = cuda.parse_signatures(path.read_text())[name]
    element = ELEMENT[params[0].ctype]
    M, N, K = KERNELS[name][1:]
    extra = ", 0" if len(params) == 7 else ""  # the HGEMM functions' cudaStream_t: the default stream
    main = (
        HARNESS.replace("KERNEL_FILE", path.name)
        .replace("ELEMENT_T", element)
        .replace("SHAPE_M", str(M))
        .replace("SHAPE_N", str(N))
        .replace("SHAPE_K", str(K))
        .replace("FUNCTION", name)
        .replace(" EXTRA_ARGS", extra)
        .replace("TOLERANCE_V", repr(TOLERANCE[element]))
    )
    too_old = path.name in MIN_ARCH and arch_number(cuda.default_arch()) < arch_number(MIN_ARCH[path.name])
    return main, ARCH.get(path.name) or (MIN_ARCH[path.name] if too_old else None)  # as %%cuda --min-arch builds


@pytest.mark.parametrize("name", sorted(KERNELS))
def test_kernel_is_found_with_a_gemm_signature(name):
    """Runs everywhere: each named kernel is defined by exactly one generated file, as (A, B, C, M, N, K[, stream])."""
    path = kernel_file(name)
    assert path.name == KERNELS[name][0]
    ret, params = cuda.parse_signatures(path.read_text())[name]
    assert ret == "int", f"{name} must return its CUDA error code"
    assert [p.pointer for p in params[:3]] == [True] * 3 and len({p.ctype for p in params[:3]}) == 1
    assert params[0].ctype in ELEMENT
    assert [(p.name, p.ctype) for p in params[3:6]] == [("M", "int"), ("N", "int"), ("K", "int")]
    assert len(params) == 6 or (len(params) == 7 and params[6].ctype == "cudaStream_t")


def test_a_missing_kernel_is_reported():
    with pytest.raises(AssertionError, match="0 generated .cu files"):
        kernel_file("no_such_kernel")


def have_nvcc() -> bool:
    try:
        return bool(cuda.nvcc())
    except FileNotFoundError:
        return False


@pytest.mark.skipif(not have_nvcc(), reason="nvcc not found")
@pytest.mark.parametrize("name", sorted({file: name for name, (file, *_) in KERNELS.items()}.values()))
def test_harness_compiles(name, tmp_path, monkeypatch):
    """The generated programs are valid CUDA C++: one kernel of each generated file (sm_90a for wgmma)."""
    monkeypatch.setenv("GPU_ML_CACHE", str(tmp_path))
    source, arch = program(name)
    assert cuda.build(source, library=False, arch=arch).exists()


@pytest.mark.gpu
@pytest.mark.skipif(not sanitize.available(), reason="needs a CUDA GPU and compute-sanitizer")
@pytest.mark.parametrize("tool", ["memcheck", "racecheck"])
@pytest.mark.parametrize("name", sorted(KERNELS))
def test_sanitizer_reports_no_error(name, tool):
    here, file = cuda.default_arch(), KERNELS[name][0]  # this GPU's arch (the emulated one under GPU_ML_EMULATE)
    if name in HOPPER_ONLY and not here.startswith("sm_90"):
        pytest.skip(f"{name} needs a Hopper GPU (sm_90a)")
    if file in MIN_ARCH and arch_number(here) < arch_number(MIN_ARCH[file]):
        pytest.skip(f"{file} needs {MIN_ARCH[file]} or newer; this GPU is {here}")
    source, arch = program(name)
    report = sanitize.sanitize_program(cuda.build(source, library=False, arch=arch), tool=tool)
    assert f"{name} " in report.output and "max relative error" in report.output, \
        f"the program did not finish:\n{report.output[-4000:]}"
    assert report.clean, f"{tool} on {name}: exit {report.returncode}, {report.errors} errors\n{report.output[-4000:]}"
