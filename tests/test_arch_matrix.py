"""The architecture matrix: every `%%cuda` cell of every notebook, and every Triton kernel of gpu_ml.kernels,
compiles for each GPU generation a learner may have (T4 sm_75, A100 sm_80, L4/RTX 4090 sm_89, H100/H200 sm_90a),
or declares the oldest one it needs (a `--host` program, which has no device code, is built once).

A cell declares it on its magic line: `--arch sm_90a` (Hopper-only code: built for that arch alone) or
`--min-arch sm_80` (built for sm_80 and newer; on an older GPU the notebook skips the cells that call it). Only
device code is compiled (`nvcc -cubin`): what differs between architectures. On CPU too: nvcc needs no GPU.
The Triton kernels defined in notebook cells are compiled for the same targets when a CPU session ends
(conftest.py: each launch the notebooks made in the interpreter, rebuilt from its cell's source).
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from triton_specializations import TARGETS, module_text

from gpu_ml import cuda
from gpu_ml.suite import TESTPATHS

pytestmark = pytest.mark.cpu_only  # compiles for GPUs, runs none: gpu-ml test runs it beside the notebooks

ROOT = Path(__file__).resolve().parents[1]


def cuda_cells() -> list[tuple[str, int, str, str]]:
    """(notebook, cell index, magic line, body) of every `%%cuda` cell of the notebooks under TESTPATHS."""
    found = []
    for folder in TESTPATHS:
        for path in sorted((ROOT / folder).rglob("*.ipynb")):
            if ".ipynb_checkpoints" in path.parts:
                continue
            for index, cell in enumerate(json.loads(path.read_text())["cells"]):
                source = "".join(cell["source"])
                if cell["cell_type"] == "code" and source.startswith("%%cuda"):
                    line, _, body = source.partition("\n")
                    found.append((str(path.relative_to(ROOT)), index, line, body))
    return found


def targets(line: str) -> tuple[tuple[str, ...], list[str]]:
    """The archs a cell with this magic line must compile for, and its extra nvcc flags."""
    options, flags = cuda._magic_parser().parse_known_args(shlex.split(line.removeprefix("%%cuda")))
    if options.host:  # a program with no device code: nothing differs between archs, one build checks it
        return (TARGETS[0],), flags
    if options.arch:
        return (options.arch,), flags
    oldest = cuda.arch_number(options.min_arch or TARGETS[0])
    return tuple(t for t in TARGETS if cuda.arch_number(t) >= oldest), flags


CELLS = cuda_cells()
CASES = [(nb, i, body, arch, flags) for nb, i, line, body in CELLS for arch in targets(line)[0]
         for flags in [targets(line)[1]]]


def test_the_matrix_covers_every_cuda_cell():
    assert len(CELLS) > 50  # the CUDA track's cells, the cudalings' stubs
    assert targets("%%cuda") == (TARGETS, [])
    assert targets("%%cuda --min-arch sm_80 -lineinfo") == (("sm_80", "sm_89", "sm_90a"), ["-lineinfo"])
    assert targets('%%cuda --arch sm_90a --timeout 9 --args "1 2"') == (("sm_90a",), [])
    assert targets("%%cuda --host") == (("sm_75",), [])


@pytest.mark.skipif(not cuda.has_nvcc(), reason="nvcc not found: CUDA cells cannot compile")
@pytest.mark.parametrize(("notebook", "index", "body", "arch", "flags"), CASES,
                         ids=[f"{nb} cell {i} {arch}" for nb, i, _, arch, _ in CASES])
def test_cell_compiles_for_the_arch(notebook, index, body, arch, flags):
    try:
        cuda.build(body, library=True, device_only=True, arch=arch, flags=flags)
        return
    except cuda.CudaCompileError as exc:
        error = next((ln for ln in str(exc).splitlines() if "error" in ln.lower()), str(exc).splitlines()[0])
    pytest.fail(f"{notebook}, cell {index}: does not compile for {arch}: {error.strip()}\n(declare the oldest arch "
                f"it needs with `%%cuda --min-arch ...`, and mark the cells that run it `#| gpu sm_XX`)", pytrace=False)


# ----------------------------------------------------------------------------- Triton kernels

# Kernels no CPU test launches, and why they need no place in the matrix.
GATED = {"matmul_tma_kernel": "TMA tensor descriptors: launched only where matmul.tma_ok() (sm_90+)",
         "matmul_persistent_kernel": "TMA tensor descriptors: launched only where matmul.tma_ok() (sm_90+)",
         "matmul_streamk_kernel": "TMA tensor descriptors: launched only where matmul.tma_ok() (sm_90+)",
         "streamk_fixup_kernel": "the second kernel of matmul_streamk, launched only where matmul.tma_ok() (sm_90+)"}
HELPER = Path(__file__).with_name("triton_specializations.py")


def triton_kernels() -> set[str]:
    """Every `@triton.jit def NAME_kernel` of gpu_ml/kernels/triton (the others are device functions they call)."""
    return {name for path in (ROOT / "gpu_ml" / "kernels" / "triton").glob("*.py")
            for name in re.findall(r"@triton\.jit[^\n]*\ndef (\w+_kernel)\(", path.read_text())}


def _side_by_side(*commands: list[str]) -> list[subprocess.CompletedProcess]:
    """Run the HELPER commands at once (each is minutes of one core) and wait for all of them."""
    procs = [subprocess.Popen([sys.executable, str(HELPER), *c], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, cwd=ROOT) for c in commands]
    outputs = [p.communicate(timeout=1800) for p in procs]
    return [subprocess.CompletedProcess(p.args, p.returncode, *out) for p, out in zip(procs, outputs, strict=True)]


def test_every_triton_kernel_compiles_for_every_arch(tmp_path):
    """The launches of tests/test_kernels*.py in the interpreter, compiled ahead of time for each target."""
    files = sorted((ROOT / "tests").glob("test_kernels*.py"))
    parts = [tmp_path / f"launches_{f.stem}.json" for f in files]
    for recorded in _side_by_side(*(["record", str(out), str(f)] for out, f in zip(parts, files, strict=True))):
        assert recorded.returncode == 0, recorded.stdout[-3000:] + recorded.stderr[-3000:]
    launches = tmp_path / "launches.json"
    launches.write_text(json.dumps([entry for part in parts for entry in json.loads(part.read_text())]))
    seen = {entry["name"] for entry in json.loads(launches.read_text())}
    assert triton_kernels() - seen == set(GATED), "kernels neither launched on CPU nor gated: " + ", ".join(
        sorted(triton_kernels() - seen - set(GATED)))
    failures = []
    for compiled in _side_by_side(*(["compile", str(launches), arch] for arch in TARGETS)):
        assert compiled.returncode == 0, compiled.stderr[-3000:]
        failures += json.loads(compiled.stdout.strip().splitlines()[-1])
    assert not failures, "\n".join(f"{f['kernel']} for {f['arch']} ({f['constexprs']}): {f['error']}" for f in failures)


def test_a_specialization_that_does_not_compile_is_reported(tmp_path):
    launches = tmp_path / "launches.json"
    launches.write_text(json.dumps([{"module": "gpu_ml.kernels.triton.softmax", "name": "softmax_fused_kernel",
                                     "signature": {"nope": "i32"}, "constexprs": {}, "options": {}}]))
    compiled = subprocess.run([sys.executable, str(HELPER), "compile", str(launches), "sm_80"], capture_output=True,
                              text=True, timeout=600, cwd=ROOT)
    (failure,) = json.loads(compiled.stdout.strip().splitlines()[-1])
    assert failure["kernel"] == "gpu_ml.kernels.triton.softmax.softmax_fused_kernel" and failure["arch"] == "sm_80"


NOTEBOOK_CELLS = '''
import triton
import triton.language as tl

SCALE = tl.constexpr(3)  # a plain 3 runs in the interpreter, and compiles nowhere


@triton.jit
def twice(x):
    return 2 * x


@triton.jit
def scale_kernel(x_ptr, n, BLOCK: tl.constexpr):  # reads SCALE and twice, both defined in the notebook
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n)
    tl.store(x_ptr + offs, twice(x) * SCALE, mask=offs < n)
'''


def test_a_notebook_kernel_is_rebuilt_and_compiled_for_each_arch(tmp_path, monkeypatch):
    """What conftest.py does with the notebooks' own kernels: the module notebook_recorder writes for a kernel
    defined in a cell holds what it reads, and compile-notebooks compiles it and reports what does not compile."""
    (tmp_path / "cells.py").write_text(NOTEBOOK_CELLS)
    monkeypatch.syspath_prepend(str(tmp_path))
    import cells

    for jit in (cells.twice, cells.scale_kernel):
        monkeypatch.setattr(jit.fn, "__module__", "__main__")  # as if defined in a notebook cell
    text = module_text(cells.scale_kernel.fn)
    assert "SCALE = triton.language.constexpr(3)" in text and "import triton.language as tl" in text
    assert text.index("def twice(") < text.index("def scale_kernel(")
    good = {"name": "scale_kernel", "cwd": str(tmp_path), "source": text, "constexprs": {"BLOCK": 64}, "options": {},
            "signature": {"x_ptr": "*fp32", "n": "i32", "BLOCK": "constexpr"}}
    bad = {**good, "signature": {"x_ptr": "*fp32", "BLOCK": "constexpr"}}  # n missing: no such specialization
    folder = tmp_path / "launches"
    folder.mkdir()
    (folder / "launches_1.jsonl").write_text(json.dumps(good) + "\n" + json.dumps(bad) + "\n")
    compiled = subprocess.run([sys.executable, str(HELPER), "compile-notebooks", str(folder), "sm_75"],
                              capture_output=True, text=True, timeout=600, cwd=ROOT)
    failures = json.loads(compiled.stdout.strip().splitlines()[-1])
    (failure,) = failures
    assert failure["name"] == "scale_kernel" and failure["arch"] == "sm_75" and "n" not in failure["signature"]
