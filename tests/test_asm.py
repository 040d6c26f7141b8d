"""gpu_ml.asm (PTX and SASS of a cell or a Triton kernel) and what it needs of gpu_ml.cuda (fat binaries, the
`cuda_program` a program cell leaves): parsing on recorded listings everywhere, the tools on this machine's nvcc and
cuobjdump/nvdisasm (beside nvcc or in Triton's wheel), and the refusals."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import SimpleNamespace

import pytest

from gpu_ml import asm, cuda

pytestmark = pytest.mark.cpu_only  # compiles for GPUs, runs none

needs_tools = pytest.mark.skipif(not cuda.has_nvcc() or asm.find("cuobjdump") is None or asm.find("nvdisasm") is None,
                                 reason="needs nvcc, cuobjdump and nvdisasm")

SAXPY = r"""
__global__ void saxpy_kernel(int n, float a, const float* __restrict__ x, float* __restrict__ y) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i];
}
__global__ void copy4(const float4* __restrict__ x, float4* __restrict__ y, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i];
}
extern "C" int saxpy(int n, float a, const float* x, float* y) {
    saxpy_kernel<<<(n + 255) / 256, 256>>>(n, a, x, y);
    return (int)cudaGetLastError();
}
"""

CUOBJDUMP = """
\t\tFunction : _Z5scalePfif
\t.headerflags\t@"EF_CUDA_ACCELERATORS EF_CUDA_SM90 EF_CUDA_VIRTUAL_SM(EF_CUDA_SM90)"
        /*0000*/                   LDC R1, c[0x0][0x28] ;                 /* 0x00000a00ff017b82 */
                                                                          /* 0x000fe20000000800 */
        /*0070*/               @P0 EXIT ;                                 /* 0x000000000000094d */
        /*00d0*/                   LDG.E.128.CONSTANT R4, desc[UR4][R2.64] ;
        /*00e0*/              @!P1 STG.E.U16 desc[UR4][R4.64+0x2], R7 ;
        /*0130*/                   BRA 0x130;
\t\tFunction : copy_bytes
        /*0000*/                   STL [R1+0x78], R16 ;
"""

NVDISASM = """
.text._Z5scalePfif:
\t//## File "cell.cu", line 3
        /*0000*/                   LDC R1, c[0x0][0x28] ;
\t//## File "cuda_fp16.hpp", line 2526
        /*0010*/                   HMUL2 R0, R0.H0_H0, UR6.H0_H0 ;
\t//## File "cell.cu", line 4
        /*0020*/                   FFMA R7, R2, UR6, R7 ;
.L_x_0:
        /*0030*/                   BRA `(.L_x_0);
"""

TRITON = """Function:act_fwd_kernel
--:-:-:-:1\tLDC R1, c[0x0][0x28];
--:-:2:-:4\t@!P1 LDG.E.128 R4, desc[UR4][R2.64];
LBB0:
--:-:-:-:6\t@P0 EXIT;
"""

PTXAS = """ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function '_Z10sums_tightPKfPfi' for 'sm_90a'
ptxas info    : Function properties for _Z10sums_tightPKfPfi
    160 bytes stack frame, 412 bytes spill stores, 308 bytes spill loads
ptxas info    : Used 32 registers, used 0 barriers, 160 bytes cumulative stack size
ptxas info    : Compiling entry function 'roomy' for 'sm_90a'
ptxas info    : Function properties for roomy
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 64 registers, used 1 barriers, 4096 bytes smem
"""


def test_symbol_names_are_read_from_mangled_symbols():
    assert asm.symbol_name("_Z5saxpyifPKfPf") == "saxpy"
    assert asm.symbol_name("_ZN2ns5scaleEPf") == "ns::scale"
    assert asm.symbol_name("_Z16hgemm_mma_kernelI6__halfEvPKT_S3_PS1_iii") == "hgemm_mma_kernel"
    assert asm.symbol_name("copy_bytes") == "copy_bytes"  # extern "C": not mangled
    assert asm.matches("_Z5saxpyifPKfPf", "saxpy") and not asm.matches("_Z6saxpy2ifPKfPf", "saxpy")
    assert not asm.matches("_Z11saxpy_otherv", "saxpy")


def test_listings_are_split_by_function_and_read_as_instructions():
    parts = asm.functions(CUOBJDUMP)
    assert list(parts) == ["_Z5scalePfif", "copy_bytes"]
    ins = asm.instructions(parts["_Z5scalePfif"])
    assert [i.opcode for i in ins] == ["LDC", "EXIT", "LDG.E.128.CONSTANT", "STG.E.U16", "BRA"]
    assert ins[1].predicate == "P0" and ins[3].predicate == "!P1" and ins[0].predicate is None
    assert ins[2].mnemonic == "LDG" and ins[2].modifiers == ("E", "128", "CONSTANT")
    assert ins[2].operands == "R4, desc[UR4][R2.64]" and ins[2].address == 0xD0
    assert str(ins[3]) == "@!P1 STG.E.U16 desc[UR4][R4.64+0x2], R7 ;"
    assert asm.count(CUOBJDUMP, "STL") == 1 and asm.count(ins, "LDG.E.128") == 1


def test_nvdisasm_line_info_and_tritons_layout_are_read():
    ins = asm.instructions(NVDISASM)
    assert [(i.opcode, i.file, i.line) for i in ins] == [
        ("LDC", "cell.cu", 3), ("HMUL2", "cuda_fp16.hpp", 2526), ("FFMA", "cell.cu", 4), ("BRA", "cell.cu", 4)]
    assert list(asm.functions(NVDISASM)) == ["_Z5scalePfif"]
    triton = asm.instructions(TRITON)
    assert [(i.predicate, i.opcode) for i in triton] == [(None, "LDC"), ("!P1", "LDG.E.128"), ("P0", "EXIT")]
    assert list(asm.functions(TRITON)) == ["act_fwd_kernel"]


def test_ptxas_report_is_parsed():
    report = asm.parse_ptxas(PTXAS)
    assert report["_Z10sums_tightPKfPfi"] == asm.Resources(32, 160, 412, 308, 0)
    assert report["roomy"] == asm.Resources(64, 0, 0, 0, 4096)
    assert asm.parse_ptxas("nothing here") == {}


def test_source_of_a_cell_function_and_refusals(tmp_path):
    (tmp_path / "cell.cu").write_text("__global__ void k() {}\n" + cuda._ERROR_HOOK)
    fn = SimpleNamespace(library=tmp_path / "libcell.so")
    assert asm.source_of(fn) == "__global__ void k() {}\n" and asm.source_of("int x;") == "int x;"
    with pytest.raises(TypeError, match="CUDA source"):
        asm.source_of(42)
    with pytest.raises(KeyError, match="0 kernels named 'nope'; there are: _Z5scalePfif, copy_bytes"):
        asm._one(asm.functions(CUOBJDUMP), "nope", "kernels")


def test_tools_are_found_on_path_beside_nvcc_or_in_tritons_wheel(tmp_path, monkeypatch):
    with pytest.raises(ValueError, match="one of cuobjdump, nvdisasm"):
        asm.find("ptxas")
    monkeypatch.setattr(asm, "find_beside_nvcc", lambda name: None)
    bundled = tmp_path / "triton" / "backends" / "nvidia" / "bin"
    bundled.mkdir(parents=True)
    (bundled / "cuobjdump").write_text("")
    spec = SimpleNamespace(origin=str(tmp_path / "triton" / "__init__.py"))
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: spec)
    assert asm.find("cuobjdump") == str(bundled / "cuobjdump")
    assert asm.find("nvdisasm") is None
    with pytest.raises(FileNotFoundError, match="nvdisasm not found on PATH, beside nvcc, nor in Triton's wheel"):
        asm.tool("nvdisasm")
    monkeypatch.setattr(asm, "find_beside_nvcc", lambda name: f"/opt/cuda/bin/{name}")
    assert asm.tool("nvdisasm") == "/opt/cuda/bin/nvdisasm"


@pytest.fixture
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("GPU_ML_CACHE", str(tmp_path))


@needs_tools
def test_ptx_sass_lines_and_resources_of_a_cell(_cache):
    ptx = asm.ptx(SAXPY, arch="sm_90a", kernel="saxpy_kernel")
    assert ptx.startswith(".visible .entry _Z12saxpy_kernelifPKfPf(") and "fma.rn.f32" in ptx
    assert "ld.global.nc.f32" in ptx and "copy4" not in ptx
    assert ".target sm_90a" in asm.ptx(SAXPY, arch="sm_90a")  # the whole module, for the arch asked for
    ops = [i.opcode for i in asm.instructions(asm.sass(SAXPY, arch="sm_90a", kernel="saxpy_kernel"))]
    assert "FFMA" in ops and "STG.E" in ops and "LDG.E.CONSTANT" in ops
    wide = [i.opcode for i in asm.instructions(asm.sass(SAXPY, arch="sm_80", kernel="copy4")) if i.mnemonic == "LDG"]
    assert wide == ["LDG.E.128.CONSTANT"]
    lines = {i.line for i in asm.instructions(asm.disassemble(SAXPY, kernel="saxpy_kernel")) if i.opcode == "FFMA"}
    assert lines == {4} and 'File "cell.cu"' in asm.disassemble(SAXPY, kernel="saxpy_kernel")
    usage = {asm.symbol_name(k): r for k, r in asm.resources(SAXPY, arch="sm_90a").items()}
    assert set(usage) == {"saxpy_kernel", "copy4"} and usage["saxpy_kernel"].spill_store_bytes == 0
    assert 0 < usage["saxpy_kernel"].registers <= 32
    with pytest.raises(KeyError, match="0 kernels named 'axpy'"):
        asm.sass(SAXPY, kernel="axpy")
    with pytest.raises(cuda.CudaCompileError):
        asm.resources("__global__ void broken( {}")


@needs_tools
def test_fatbin_builds_hold_ptx_and_sass_and_exclude_cubins(_cache):
    path = cuda.build(SAXPY, library=True, fatbin=True, arch="sm_80")
    assert path.name == "cell.fatbin" and path.exists()
    assert cuda.build(SAXPY, library=True, fatbin=True, arch="sm_80") == path  # cached
    assert cuda.build(SAXPY, library=True, device_only=True, arch="sm_80").name == "cell.cubin"
    with pytest.raises(ValueError, match="exclude each other"):
        cuda.build(SAXPY, library=True, device_only=True, fatbin=True)


@needs_tools
def test_a_program_cell_leaves_its_build_in_cuda_program(_cache, monkeypatch, capsys):
    monkeypatch.setattr(cuda, "has_gpu", lambda: False)
    ns = {}
    cuda.cuda_cell("", "int main() { return 0; }", ns)
    assert Path(ns["cuda_program"]).exists() and ns["cuda_output"] is None
    assert (Path(ns["cuda_program"]).parent / "cell.cu").read_text() == "int main() { return 0; }"
    cuda.cuda_cell("--host", '#include <cstdio>\nint main() { std::printf("hi\\n"); return 0; }', ns)
    assert ns["cuda_output"] == "hi\n" and Path(ns["cuda_program"]).exists()
    with pytest.raises(cuda.CudaRunError):  # a run that fails still leaves the program to look at
        cuda.cuda_cell("--host", "int main() { return 3; }", ns)
    assert (Path(ns["cuda_program"]).parent / "cell.cu").read_text() == "int main() { return 3; }"


@needs_tools
def test_a_triton_kernel_compiles_ahead_of_time_with_and_without_alignment():
    kernel = "gpu_ml.kernels.triton.activations:act_fwd_kernel"
    signature = {"x_ptr": "*fp32", "y_ptr": "*fp32", "n": "i32"}
    constexprs = {"ACTIVATION": "relu", "BLOCK_SIZE": 1024}
    aligned = asm.triton_asm(kernel, signature, constexprs, aligned=("x_ptr", "y_ptr", "n"))
    assert {"ttir", "ttgir", "llir", "ptx", "sass", "cuobjdump"} <= set(aligned)
    assert asm.count(aligned["cuobjdump"], "LDG.E.128") == asm.count(aligned["sass"], "LDG.E.128") == 2
    plain = asm.triton_asm(kernel, signature, constexprs)
    assert asm.count(plain["cuobjdump"], "LDG.E.128") == 0 and asm.count(plain["cuobjdump"], "LDG.E") == 8
    with pytest.raises(RuntimeError, match="compiling gpu_ml.kernels.triton.activations:nope for sm_90a failed"):
        asm.triton_asm("gpu_ml.kernels.triton.activations:nope", signature, constexprs)
    with pytest.raises(ValueError, match="'package.module:kernel_name'"):
        asm.triton_asm("act_fwd_kernel", signature)
