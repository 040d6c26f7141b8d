"""The lessons' graded exercises (gpu_ml.exercises): every solution passes its grader, every untouched stub in its
notebook runs and fails, and the notebooks hold exactly the registered exercises. CPU: Triton's interpreter.

CUDA exercises: stub and solution compile (nvcc, also on CPU); on a GPU the solution passes and the stub fails; on
CPU the grader's own code passes the solution's Python stand-in (solutions/.../NAME.py, what the kernel computes,
written into the same outputs) and fails a host function that launches nothing."""

from __future__ import annotations

import importlib.util
import linecache
from pathlib import Path

import pytest
import torch
import triton.language as tl

import triton
from gpu_ml import cuda
from gpu_ml.cudalings import run_cases
from gpu_ml.env import has_gpu
from gpu_ml.exercises import CUDA_EXERCISES, EXERCISES, grade_exercise, notebook_cells, notebook_cuda_cells
from gpu_ml.validate import kernel_device

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted({e.notebook for e in [*EXERCISES.values(), *CUDA_EXERCISES.values()]})


def _solutions(notebook: str):
    path = ROOT / "solutions" / Path(notebook).with_suffix(".py")
    spec = importlib.util.spec_from_file_location(f"solutions_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _stub(name: str):
    """The untouched stub of exercise `name`, run from its notebook cell; returns the function the grader calls."""
    source = notebook_cells(ROOT / EXERCISES[name].notebook)[name]
    filename = f"<exercise {name}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)  # @triton.jit reads it
    namespace = {"torch": torch, "triton": triton, "tl": tl, "device": kernel_device()}
    exec(compile(source, filename, "exec"), namespace)
    return namespace[EXERCISES[name].function]


@pytest.mark.parametrize("notebook", NOTEBOOKS)
def test_the_notebook_holds_its_exercises(notebook):
    in_notebook = set(notebook_cells(ROOT / notebook))
    assert in_notebook == {n for n, e in EXERCISES.items() if e.notebook == notebook}
    cuda_in_notebook = set(notebook_cuda_cells(ROOT / notebook))
    assert cuda_in_notebook == {n for n, e in CUDA_EXERCISES.items() if e.notebook == notebook}
    text = (ROOT / notebook).read_text()
    for name in in_notebook:
        assert f'grade_exercise(\\"{name}\\", {EXERCISES[name].function})' in text, f"no grader cell for {name}"
    for name in cuda_in_notebook:
        assert f'grade_exercise(\\"{name}\\", {name})' in text, f"no grader cell for {name}"


@pytest.mark.parametrize("name", EXERCISES)
def test_the_solution_passes_and_the_stub_fails(name):
    solution = getattr(_solutions(EXERCISES[name].notebook), EXERCISES[name].function)
    assert grade_exercise(name, solution, quiet=True)
    verdict = grade_exercise(name, _stub(name), quiet=True)
    assert not verdict and "not solved yet" in verdict.message, verdict.message


def test_a_wrong_answer_names_the_case(capsys):
    verdict = grade_exercise("axpy", lambda a, x, y: a * x - y)
    assert not verdict and "not solved yet: case 'n=1'" in capsys.readouterr().out
    with pytest.raises(KeyError, match="no exercise 'nope'"):
        grade_exercise("nope", None)


# ----------------------------------------------------------------------------- CUDA exercises

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


def _have_nvcc() -> bool:
    try:
        cuda.nvcc()
    except FileNotFoundError:
        return False
    return True


CUDA_NAMES = sorted(CUDA_EXERCISES)
needs_nvcc = pytest.mark.skipif(not _have_nvcc(), reason="nvcc not found: CUDA cells cannot compile")
needs_gpu = pytest.mark.skipif(not has_gpu(), reason="needs a CUDA GPU")


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



def test_two_exercises_of_one_name_are_refused(monkeypatch):
    import importlib

    import gpu_ml.exercises
    from gpu_ml.exercises import triton_basics

    monkeypatch.setattr(triton_basics, "EXERCISES", [*triton_basics.EXERCISES, triton_basics.EXERCISES[0]])
    with pytest.raises(ValueError, match="exercise names must be unique: \\['axpy'\\]"):
        importlib.reload(gpu_ml.exercises)
    monkeypatch.undo()
    importlib.reload(gpu_ml.exercises)
