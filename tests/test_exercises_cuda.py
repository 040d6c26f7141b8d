"""The lessons' CUDA exercises (gpu_ml.exercises.CUDA_EXERCISES): stub and solution compile (nvcc, also on CPU); on a
GPU the solution passes and the stub fails; on CPU the grader's own code passes the solution's Python stand-in
(solutions/.../NAME.py, what the kernel computes, written into the same outputs) and fails a host function that
launches nothing. Every stub and solution is compiled up front, all at once (nvcc runs in child processes)."""

from __future__ import annotations

import importlib.util
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from gpu_ml import cuda
from gpu_ml.cudalings import run_cases
from gpu_ml.env import capability, has_gpu
from gpu_ml.exercises import CUDA_EXERCISES, grade_exercise, notebook_cuda_cells

ROOT = Path(__file__).resolve().parents[1]


def _cuda_solution(name: str, suffix: str) -> Path:
    return ROOT / "solutions" / Path(CUDA_EXERCISES[name].notebook).with_suffix("") / f"{name}{suffix}"


def _cuda_source(kind: str, name: str) -> tuple[str, str]:
    """(the %%cuda line, the source) of the stub in its notebook or of the solution."""
    line, body = notebook_cuda_cells(ROOT / CUDA_EXERCISES[name].notebook)[name]
    return (line, body) if kind == "stub" else (line, _cuda_solution(name, ".cu").read_text())


def _cuda_function(kind: str, name: str) -> cuda.CudaFunction:
    line, source = _cuda_source(kind, name)
    arch = CUDA_EXERCISES[name].spec.arch
    assert line.split() == ["%%cuda"] + (["--arch", arch] if arch else []), f"{name}: the cell's line is {line!r}"
    return cuda.load_library(cuda.build(source, library=True, arch=arch), source)[name]


CUDA_NAMES = sorted(CUDA_EXERCISES)
needs_nvcc = pytest.mark.skipif(not cuda.has_nvcc(), reason="nvcc not found: CUDA cells cannot compile")
needs_gpu = pytest.mark.skipif(not has_gpu(), reason="needs a CUDA GPU")


@pytest.fixture(scope="module", autouse=True)
def _built_at_once():
    """Every stub and solution built in parallel before the tests, which then find them in the build cache."""
    if not cuda.has_nvcc():
        return

    def build(job: tuple[str, str]) -> None:
        kind, name = job
        try:
            cuda.build(_cuda_source(kind, name)[1], library=True, arch=CUDA_EXERCISES[name].spec.arch)
        except cuda.CudaCompileError:
            pass  # its test reports it

    with ThreadPoolExecutor(os.cpu_count() or 1) as pool:
        list(pool.map(build, [(kind, name) for name in CUDA_NAMES for kind in ("stub", "solution")]))



@needs_nvcc
@pytest.mark.parametrize("kind", ["stub", "solution"])
@pytest.mark.parametrize("name", CUDA_NAMES)
def test_cuda_exercise_compiles_with_the_specs_signature(name, kind):
    fn = _cuda_function(kind, name)
    assert tuple(p.ctype + ("*" if p.pointer else "") for p in fn.params if p.ctype != "cudaStream_t") == \
        CUDA_EXERCISES[name].spec.params


@needs_gpu
@pytest.mark.parametrize("name", CUDA_NAMES)
def test_cuda_solution_passes_and_stub_fails_on_the_gpu(name):
    need = CUDA_EXERCISES[name].spec.capability
    if capability() < need:  # the grader says so instead of grading (tests/test_cudalings.py)
        pytest.skip(f"{name} needs compute capability {need}; this GPU has {capability()}")
    assert grade_exercise(name, _cuda_function("solution", name), quiet=True)
    verdict = grade_exercise(name, _cuda_function("stub", name), quiet=True)
    assert not verdict and "not solved yet" in verdict.message, verdict.message


@pytest.mark.parametrize("name", CUDA_NAMES)
def test_cuda_grader_passes_the_standin_and_fails_a_launch_of_nothing(name):
    spec = CUDA_EXERCISES[name].spec
    path = _cuda_solution(name, ".py")
    module_spec = importlib.util.spec_from_file_location(f"standin_{name}", path)
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    assert run_cases(spec, getattr(module, name), device="cpu", quiet=True)
    assert not run_cases(spec, lambda *args: 0, device="cpu", quiet=True)
