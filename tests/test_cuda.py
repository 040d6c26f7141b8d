import shutil

import pytest
import torch

from gpu_ml import cuda

HAS_GPU = torch.cuda.is_available()
pytestmark = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not found: CUDA cells cannot compile")

ADD = r"""
__global__ void add_kernel(const float* x, const float* y, float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = x[i] + y[i];
}
extern "C" void vector_add(const float* __restrict__ x, const float* y, float* out, int n) {
    add_kernel<<<(n + 255) / 256, 256>>>(x, y, out, n);
}
extern "C" void bad_launch(float* out) { add_kernel<<<1, 4096>>>(out, out, out, 1); }
extern "C" int twice(int n) { return 2 * n; }
"""


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("GPU_ML_CACHE", str(tmp_path))


def test_signatures_are_parsed():
    sigs = cuda.parse_signatures(ADD)
    assert list(sigs) == ["vector_add", "bad_launch", "twice"]
    ret, params = sigs["vector_add"]
    assert ret == "void"
    assert [(p.name, p.ctype, p.pointer) for p in params] == [
        ("x", "float", True),
        ("y", "float", True),
        ("out", "float", True),
        ("n", "int", False),
    ]
    assert params[0].dtype == torch.float32
    sigs = cuda.parse_signatures('extern "C" int f(void) {}\nextern "C" void g(__nv_bfloat16* a, int64_t n) {}')
    assert sigs["f"] == ("int", []) and sigs["g"][1][0].dtype == torch.bfloat16


def test_unsupported_signatures_are_refused():
    with pytest.raises(ValueError, match="unsupported pointer parameter type 'float4'"):
        cuda.parse_signatures('extern "C" void f(float4* x) {}')
    with pytest.raises(ValueError, match="pointer-to-pointer"):
        cuda.parse_signatures('extern "C" void f(float** x) {}')


def test_compile_error_raises_with_nvccs_message():
    with pytest.raises(cuda.CudaCompileError, match='identifier "undefined_name" is undefined') as raised:
        cuda.cuda_cell("", "int main() { return undefined_name; }")
    assert "cell.cu(1)" in str(raised.value)  # the source's name, not the per-process one it was built under


def test_program_exiting_non_zero_raises():
    exe = cuda.build('#include <cstdio>\nint main() { printf("bye\\n"); return 3; }', library=False)
    with pytest.raises(cuda.CudaRunError, match="exited with code 3"):
        cuda.run_program(exe)
    assert cuda.run_program(cuda.build("int main() { return 0; }", library=False)).returncode == 0


def test_program_timeout_raises():
    exe = cuda.build("#include <unistd.h>\nint main() { sleep(10); return 0; }", library=False)
    with pytest.raises(cuda.CudaRunError, match="longer than"):
        cuda.run_program(exe, timeout=0.5)


def test_builds_are_cached(tmp_path):
    first = cuda.build("int main() { return 0; }", library=False)
    assert cuda.build("int main() { return 0; }", library=False) == first
    assert cuda.build("int main() { return 0; }", library=False, flags=["-O2"]) != first


CP_ASYNC = r"""
__global__ void copy16(const float4* src, float4* dst) {
    __shared__ float4 tile[32];
    unsigned smem = (unsigned)__cvta_generic_to_shared(&tile[threadIdx.x]);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(smem), "l"(src + threadIdx.x));
    asm volatile("cp.async.wait_all;\n" ::);
    dst[threadIdx.x] = tile[threadIdx.x];
}
extern "C" int copy(const float* src, float* dst) {
    copy16<<<1, 32>>>((const float4*)src, (float4*)dst);
    return (int)cudaGetLastError();
}
"""


def test_device_only_builds_a_cubin_per_arch_and_names_the_arch_that_fails():
    cubin = cuda.build(CP_ASYNC, library=True, device_only=True, arch="sm_80")
    assert cubin.name == "cell.cubin" and cubin.exists()
    assert cuda.build(CP_ASYNC, library=True, device_only=True, arch="sm_90a") != cubin
    with pytest.raises(cuda.CudaCompileError, match="sm_80"):  # ptxas: cp.async requires sm_80 or higher
        cuda.build(CP_ASYNC, library=True, device_only=True, arch="sm_75")


def test_arch_number():
    assert cuda.arch_number("sm_75") == 75 and cuda.arch_number("sm_90a") == 90
    with pytest.raises(ValueError, match="not an nvcc arch"):
        cuda.arch_number("compute_80")


def test_min_arch_builds_for_the_oldest_gpu_that_can_run_the_cell(monkeypatch, capsys):
    ns = {}
    monkeypatch.setattr(cuda, "default_arch", lambda: "sm_75")  # a T4, say
    monkeypatch.setattr(cuda, "has_gpu", lambda: True)
    cuda.cuda_cell("--min-arch sm_80", CP_ASYNC, ns)  # for sm_75 it would not compile
    assert "built for sm_80" in capsys.readouterr().out and "copy" in ns
    cuda.cuda_cell("--min-arch sm_80", "int main() { return 1; }")  # compiled, not run (it would fail if run)
    assert "not run: this GPU is older than sm_80" in capsys.readouterr().out
    monkeypatch.setattr(cuda, "default_arch", lambda: "sm_90a")
    cuda.cuda_cell("--min-arch sm_80", CP_ASYNC, ns)  # new enough: built for this GPU, nothing said
    assert "built for" not in capsys.readouterr().out


def test_program_cell(capsys):
    cuda.cuda_cell("", '#include <cstdio>\nint main() { printf("hello from the host\\n"); return 0; }')
    out = capsys.readouterr().out
    assert ("hello from the host" in out) if HAS_GPU else ("not run: no CUDA GPU" in out)


def test_a_host_program_runs_without_a_gpu_and_leaves_its_output(capsys, monkeypatch):
    monkeypatch.setattr(cuda, "has_gpu", lambda: False)
    ns = {"cuda_output": "an earlier program's"}
    hello = '#include <cstdio>\nint main() { printf("hello from the host\\n"); return 0; }'
    cuda.cuda_cell("--host", hello, ns)
    assert "hello from the host" in capsys.readouterr().out and ns["cuda_output"] == "hello from the host\n"
    cuda.cuda_cell("", hello, ns)  # not --host: compiled, not run, and no stale output left behind
    assert "not run: no CUDA GPU" in capsys.readouterr().out and ns["cuda_output"] is None


@pytest.mark.skipif(cuda.cutlass_include_dir() is None, reason="the nvidia-cutlass package is not installed")
def test_cute_headers_are_on_the_include_path_and_their_version_in_the_cache_key(capsys):
    assert cuda.cutlass_include_dir() in cuda.include_dirs()
    util = cuda.cutlass_include_dir().parent / "tools" / "util" / "include"  # CUTLASS's utilities, after its headers
    assert (util / "cutlass" / "util" / "packed_stride.hpp").is_file() and cuda.include_dirs()[-1] == util
    ns = {}
    cuda.cuda_cell("--host", """#include <cute/layout.hpp>
using namespace cute;
int main() {
    auto layout = make_layout(make_shape(Int<2>{}, Int<3>{}), make_stride(Int<3>{}, Int<1>{}));  // row-major 2x3
    for (int i = 0; i < size(layout); ++i) printf("%d ", int(layout(i)));
    return 0;
}""", ns)
    assert ns["cuda_output"] == "0 3 1 4 2 5 "  # column by column: (0,0) (1,0) (0,1) (1,1) (0,2) (1,2)
    digest = cuda.include_digest()
    with pytest.MonkeyPatch.context() as m:
        m.setattr(cuda.importlib.metadata, "version", lambda name: "0.0" if name == "nvidia-cutlass" else "?")
        assert cuda.include_digest() != digest  # another CUTLASS: every cell rebuilds


def test_without_cutlass_its_headers_are_not_on_the_include_path(monkeypatch):
    monkeypatch.setattr(cuda.importlib.util, "find_spec", lambda name: None)
    assert cuda.cutlass_include_dir() is None and len(cuda.include_dirs()) == 3


def test_a_header_cells_pragma_once_warns_nothing_but_real_warnings_still_show(capsys):
    cuda.build("#pragma once\n#include <cstdio>\ninline void hello() { printf(\"hi\"); }\n", library=True)
    assert "pragma once" not in capsys.readouterr().err  # compiled on its own, as a check: an artefact of that
    cuda.build("#pragma once\n__global__ void k() { int unused; }\n", library=True)
    err = capsys.readouterr().err
    assert "pragma once" not in err and "unused" in err  # nvcc's warning about the variable is kept


def test_library_function_knows_its_build():
    ns = {}
    cuda.cuda_cell("", ADD, ns)
    library = ns["vector_add"].library
    assert library.name == "libcell.so" and library.exists()
    assert "vector_add" in library.with_name("cell.cu").read_text()


def test_library_cell_refuses_bad_arguments_before_launch():
    ns = {}
    cuda.cuda_cell("", ADD, ns)
    add = ns["vector_add"]
    x = torch.ones(8)
    with pytest.raises(TypeError, match="takes 4 arguments"):
        add(x)
    with pytest.raises(TypeError, match="needs a torch.Tensor"):
        add(1, x, x, 8)
    with pytest.raises(TypeError, match="needs an int"):
        ns["twice"](8.0)
    for value in (2**31, -(2**31) - 1, 2**32 + 8):  # ctypes would wrap them into an int silently (2**32 + 8 -> 8)
        with pytest.raises(ValueError, match=r"'n' is a int: .* is outside \[-2147483648, 2147483647\]"):
            ns["twice"](value)
    with pytest.raises(ValueError, match="must be a CUDA tensor"):
        add(x, x, x, 8)
    if HAS_GPU:
        g = torch.ones(8, device="cuda")
        with pytest.raises(TypeError, match="needs dtype torch.float32"):
            add(g.half(), g, g, 8)
        with pytest.raises(ValueError, match="contiguous"):
            add(torch.ones(8, 2, device="cuda")[:, 0], g, g, 8)


@pytest.mark.skipif(HAS_GPU, reason="CPU behaviour")
def test_library_call_without_gpu_raises():
    ns = {}
    cuda.cuda_cell("", ADD, ns)
    with pytest.raises(RuntimeError, match="needs a CUDA GPU"):
        ns["twice"](8)


def test_checked_raises_unless_the_host_function_returned_0(monkeypatch):
    ns = {}
    cuda.cuda_cell("", ADD, ns)
    twice = ns["twice"]  # returns 2 * n: 0 only for n = 0
    if not HAS_GPU:  # stand in for the C call, which needs a GPU
        monkeypatch.setattr(cuda.CudaFunction, "__call__", lambda self, n: 2 * n)
    assert twice.checked(0) is None
    with pytest.raises(RuntimeError, match=r"twice\(\) refused to launch \(returned 6\)"):
        twice.checked(3)


@pytest.mark.skipif(not HAS_GPU, reason="needs a CUDA GPU")
def test_library_cell_runs_and_reports_cuda_errors():
    ns = {}
    cuda.cuda_cell("", ADD, ns)
    x, y = torch.randn(1000, device="cuda"), torch.randn(1000, device="cuda")
    out = torch.empty_like(x)
    ns["vector_add"](x, y, out, 1000)
    torch.testing.assert_close(out, x + y)
    with pytest.raises(cuda.CudaError, match="bad_launch"):
        ns["bad_launch"](out)  # 4096 threads per block is an invalid launch configuration
    assert ns["twice"](21) == 42


def test_cell_without_main_or_extern_c_is_refused():
    with pytest.raises(ValueError, match="neither main"):
        cuda.cuda_cell("", "__global__ void k() {}")


def test_magic_flags_reach_nvcc():
    with pytest.raises(cuda.CudaCompileError, match="-DBROKEN"):
        cuda.cuda_cell("-DBROKEN", "#ifdef BROKEN\n#error broken on purpose\n#endif\nint main() { return 0; }")


STREAMED = r"""
#include <cstdint>
extern "C" long long which_stream(const float* x, cudaStream_t stream) { return (long long)(intptr_t)stream; }
extern "C" long long no_tensor(int n, cudaStream_t stream) { return (long long)(intptr_t)stream + n; }
"""


def test_a_stream_parameter_is_filled_in_not_passed(monkeypatch):
    ns = {}
    cuda.cuda_cell("", STREAMED, ns)
    which = ns["which_stream"]
    with pytest.raises(TypeError, match=r"takes 1 arguments \(the cudaStream_t is filled in"):
        which(torch.ones(2), 0)
    if not HAS_GPU:  # what the call would hand to C, with the C call and the stream lookup stood in for
        monkeypatch.setattr(cuda, "has_gpu", lambda: True)
        monkeypatch.setattr(cuda, "current_stream", lambda t=None: 1234 if t is None else 5678)
        monkeypatch.setattr(torch.Tensor, "is_cuda", property(lambda self: True))
        for name in ("which_stream", "no_tensor"):
            ns[name]._fn = lambda *converted: converted
            ns[name]._lib = type("Lib", (), {"gpu_ml_last_error": staticmethod(lambda *a: 0)})()
        x = torch.ones(2)
        assert which(x) == (x.data_ptr(), 5678)  # the stream of the first tensor's device, appended
        assert ns["no_tensor"](3) == (3, 1234)  # no tensor: the current device's stream
        return
    x = torch.ones(2, device="cuda")
    assert which(x) == torch.cuda.current_stream().cuda_stream
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        assert which(x) == side.cuda_stream == cuda.current_stream(x)
        assert ns["no_tensor"](0) == side.cuda_stream


SHARED = r"""
#include "gpu_ml.cuh"

// out[0..3] = block_sum, block_max, and warp 0's warp_sum, warp_max of x; out[4], out[5] = online_merge of
// (max, sum of exp) over halves of x; y = x round-tripped through Pack<T, 4> (fp32, fp16 or bf16 in t).
template <typename T>
__global__ void helpers_kernel(const float* x, float* out, T* t, float* y, int n) {
    __shared__ float red[32];
    const int i = threadIdx.x;
    const float v = i < n ? x[i] : 0.0f, vm = i < n ? x[i] : -INFINITY;
    const float s = block_sum(v, red), m = block_max(vm, red);
    const float ws = warp_sum(v), wm = warp_max(vm);
    if (i == 0) {
        out[0] = s; out[1] = m; out[2] = ws; out[3] = wm;
        float m1 = -INFINITY, s1 = 0.0f, m2 = -INFINITY, s2 = 0.0f;
        for (int k = 0; k < n / 2; ++k) online_merge(m1, s1, x[k], 1.0f);
        for (int k = n / 2; k < n; ++k) online_merge(m2, s2, x[k], 1.0f);
        online_merge(m1, s1, m2, s2);
        out[4] = m1; out[5] = s1;
    }
    if (4 * i + 3 < n) {
        float p[4];
        for (int j = 0; j < 4; ++j) p[j] = x[4 * i + j];
        store_pack<T, 4>(t + 4 * i, p);
        load_pack<T, 4>(t + 4 * i, p);
        for (int j = 0; j < 4; ++j) y[4 * i + j] = p[j];
    }
}
extern "C" void helpers_f32(const float* x, float* out, float* t, float* y, int n) {
    helpers_kernel<float><<<1, 256>>>(x, out, t, y, n);
}
extern "C" void helpers_f16(const float* x, float* out, __half* t, float* y, int n) {
    helpers_kernel<__half><<<1, 256>>>(x, out, t, y, n);
}
extern "C" void helpers_bf16(const float* x, float* out, __nv_bfloat16* t, float* y, int n) {
    helpers_kernel<__nv_bfloat16><<<1, 256>>>(x, out, t, y, n);
    CHECK(cudaGetLastError());
}
"""


def test_the_shared_header_is_on_the_include_path_and_in_the_cache_key(tmp_path, monkeypatch):
    first = cuda.build(SHARED, library=True)
    assert cuda.build(SHARED, library=True) == first
    changed = tmp_path / "include"
    changed.mkdir()
    (changed / "gpu_ml.cuh").write_text((cuda.INCLUDE_DIR / "gpu_ml.cuh").read_text() + "\n// changed\n")
    monkeypatch.setattr(cuda, "INCLUDE_DIR", changed)
    assert cuda.build(SHARED, library=True) != first  # a changed header is a new build
    second = cuda.build(SHARED, library=True)
    (changed / "notes.cuh").write_text("// any file in the folder counts, not only gpu_ml.cuh\n")
    assert cuda.build(SHARED, library=True) != second


EXPORTED = r"""
#include "cuda/probe.cuh"
int main() { return probe_value(); }
"""


def test_exported_kernels_are_on_the_include_path_and_in_the_cache_key(tmp_path, monkeypatch):
    kernels = tmp_path / "kernels"
    (kernels / "cuda").mkdir(parents=True)
    monkeypatch.setattr(cuda, "KERNELS_DIR", kernels)
    with pytest.raises(cuda.CudaCompileError, match="probe.cuh"):  # not exported yet: nvcc cannot find it
        cuda.build(EXPORTED, library=False)
    probe = kernels / "cuda" / "probe.cuh"
    probe.write_text("#pragma once\ninline int probe_value() { return 0; }\n")
    first = cuda.build(EXPORTED, library=False)
    assert cuda.build(EXPORTED, library=False) == first
    probe.write_text("#pragma once\ninline int probe_value() { return 3; }\n")  # re-exported, changed
    second = cuda.build(EXPORTED, library=False)
    assert second != first
    (kernels / "cuda" / "other.cuh").write_text("#pragma once\n")  # a new exported file
    assert cuda.build(EXPORTED, library=False) != second
    if HAS_GPU:  # the rebuilt program runs the changed header
        with pytest.raises(cuda.CudaRunError, match="exited with code 3"):
            cuda.run_program(second)


def test_the_include_digest_covers_names_and_contents(tmp_path, monkeypatch):
    include, kernels = tmp_path / "include", tmp_path / "kernels"
    (kernels / "cuda").mkdir(parents=True)
    include.mkdir()
    monkeypatch.setattr(cuda, "INCLUDE_DIR", include)
    monkeypatch.setattr(cuda, "KERNELS_DIR", kernels)
    (include / "gpu_ml.cuh").write_text("a")
    empty = cuda.include_digest()
    (kernels / "cuda" / "x.cuh").write_text("b")
    one = cuda.include_digest()
    assert one != empty
    (kernels / "cuda" / "x.cuh").rename(kernels / "cuda" / "y.cuh")  # same bytes, another name
    assert cuda.include_digest() != one
    (kernels / "cuda" / "y.cuh").unlink()
    assert cuda.include_digest() == empty
    (kernels / "triton.py").write_text("# only kernels/cuda counts")
    assert cuda.include_digest() == empty


@pytest.mark.skipif(not HAS_GPU, reason="needs a CUDA GPU")
def test_the_shared_helpers_compute_what_they_say():
    ns = {}
    cuda.cuda_cell("", SHARED, ns)
    xs = torch.randn(200, device="cuda")
    for name, dtype in (("helpers_f32", torch.float32), ("helpers_f16", torch.float16),
                        ("helpers_bf16", torch.bfloat16)):
        out, t, y = torch.empty(6, device="cuda"), torch.empty(200, device="cuda", dtype=dtype), torch.empty_like(xs)
        ns[name](xs, out, t, y, 200)
        torch.testing.assert_close(out[0], xs.sum(), rtol=1e-5, atol=1e-4)
        torch.testing.assert_close(out[1], xs.max())
        torch.testing.assert_close(out[2], xs[:32].sum(), rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(out[3], xs[:32].max())
        torch.testing.assert_close(out[4], xs.max())
        torch.testing.assert_close(out[5], torch.exp(xs - xs.max()).sum(), rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(y, xs.to(dtype).float())  # the pack round trip rounds to T once
    x = xs.clone()
    x[:100] = float("-inf")  # online_merge over a half that is all -inf: it must add nothing, not NaN
    out = torch.empty(6, device="cuda")
    ns["helpers_f32"](x, out, torch.empty(200, device="cuda"), torch.empty_like(x), 200)
    finite = x[100:]
    torch.testing.assert_close(out[4], finite.max())
    torch.testing.assert_close(out[5], torch.exp(finite - finite.max()).sum(), rtol=1e-4, atol=1e-5)


HEADER_CELL = """//| export cuda/probe_session.cuh
#pragma once
template <typename T> __global__ void probe_kernel(T* out) { out[0] = T(VALUE); }
"""
USER_CELL = """#include "cuda/probe_session.cuh"
extern "C" void probe(float* out) { probe_kernel<float><<<1, 1>>>(out); }
"""


def test_an_exported_header_cell_compiles_and_later_cells_include_it(capsys, monkeypatch, tmp_path):
    monkeypatch.setattr(cuda, "KERNELS_DIR", tmp_path / "kernels")  # nothing exported on disk
    with pytest.raises(cuda.CudaCompileError, match="probe_session.cuh"):
        cuda.cuda_cell("", USER_CELL, {})  # no cell has defined it yet
    with pytest.raises(cuda.CudaCompileError):
        cuda.cuda_cell("", HEADER_CELL.replace("T(VALUE)", "T(VALUE"), {})  # a broken header is not kept
    assert not (cuda.exported_dir() / "cuda" / "probe_session.cuh").exists()
    ns = {}
    cuda.cuda_cell("", HEADER_CELL.replace("VALUE", "1"), ns)
    assert ns == {} and 'later cells can #include "cuda/probe_session.cuh"' in capsys.readouterr().out
    first = cuda.build(USER_CELL, library=True)
    cuda.cuda_cell("", USER_CELL, ns)
    assert "probe" in ns
    cuda.cuda_cell("", HEADER_CELL.replace("VALUE", "2"), {})  # the cell edited and run again
    assert "T(2)" in (cuda.exported_dir() / "cuda" / "probe_session.cuh").read_text()
    assert cuda.build(USER_CELL, library=True) != first  # the including cell rebuilds against the new text


def test_a_cell_with_only_kernels_and_no_export_is_refused():
    with pytest.raises(ValueError, match="export cuda/NAME.cuh"):
        cuda.cuda_cell("", HEADER_CELL.replace("//| export cuda/probe_session.cuh\n", "").replace("VALUE", "1"))
    with pytest.raises(ValueError, match="neither main"):  # an export to a .cu file is not a header
        cuda.cuda_cell("", HEADER_CELL.replace(".cuh", ".cu").replace("VALUE", "1"))


def test_build_notebook_fills_the_cache_that_running_the_notebook_uses(tmp_path, monkeypatch):
    """`gpu-ml test` builds every notebook's cells up front; the run (IPython's %%cuda) must find those builds."""
    import ast
    import json

    from IPython.core.inputtransformer2 import TransformerManager

    sources = ["%%cuda\n//| export cuda/prebuilt.cuh\n#pragma once\n__device__ int twice(int x) { return 2 * x; }",
               '%%cuda -lineinfo\n#include "cuda/prebuilt.cuh"\nextern "C" int f(int n) { return n; }',
               "%%cuda\nint main() { return 0; }",
               "%%cuda\nint neither_main_nor_extern_c;"]
    notebook = tmp_path / "n.ipynb"
    notebook.write_text(json.dumps({"cells": [{"cell_type": "markdown", "source": "%%cuda in prose"}] + [
        {"cell_type": "code", "source": s.splitlines(keepends=True)} for s in sources]}))
    built, errors = cuda.build_notebook(notebook)
    assert built == 3 and len(errors) == 1 and errors[0].startswith("cell 4: %%cuda: the cell has neither")
    cached = set((tmp_path / "cuda").iterdir())
    monkeypatch.setattr(cuda, "_SESSION", "the-notebook's-own-process")  # which has exported nothing yet
    for source in sources[:3]:  # what IPython hands the magic: its line and its body
        call = ast.parse(TransformerManager().transform_cell(source)).body[0].value
        line, body = (ast.literal_eval(arg) for arg in call.args[1:])
        cuda.cuda_cell(line, body, {})
    assert set((tmp_path / "cuda").iterdir()) == cached  # nothing built twice


def test_has_nvcc_says_whether_nvcc_is_found(monkeypatch):
    assert cuda.has_nvcc()  # this module runs only where nvcc is found

    def missing():
        raise FileNotFoundError("nvcc not found")

    monkeypatch.setattr(cuda, "nvcc", missing)
    assert not cuda.has_nvcc()
