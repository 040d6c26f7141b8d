"""The lessons' graded exercises (gpu_ml.exercises): every solution passes its grader, every untouched stub in its
notebook runs and fails, and the notebooks hold exactly the registered exercises. CPU: Triton's interpreter.
The CUDA exercises: tests/test_exercises_cuda.py."""

from __future__ import annotations

import importlib.util
import linecache
from pathlib import Path

import pytest
import torch
import triton.language as tl

import triton
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


def test_in_place_add_must_return_x_and_reverse_must_not_write_before_y():
    solution = _solutions(EXERCISES["add_in_place"].notebook).add_

    def add_returning_none(x, y):
        solution(x, y)

    verdict = grade_exercise("add_in_place", add_returning_none, quiet=True)
    assert not verdict and "add_(x, y) must return x itself" in verdict.message

    @triton.jit
    def reverse_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):  # scatters without a mask: lanes past n land before y
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(y_ptr + (n - 1 - offs), tl.load(x_ptr + offs, mask=offs < n), mask=offs >= 0)

    verdict = grade_exercise("reverse", reverse_kernel, quiet=True)
    assert not verdict and "before its start" in verdict.message, verdict.message


def test_two_exercises_of_one_name_are_refused(monkeypatch):
    import importlib

    import gpu_ml.exercises
    from gpu_ml.exercises import triton_basics

    monkeypatch.setattr(triton_basics, "EXERCISES", [*triton_basics.EXERCISES, triton_basics.EXERCISES[0]])
    with pytest.raises(ValueError, match="exercise names must be unique: \\['axpy'\\]"):
        importlib.reload(gpu_ml.exercises)
    monkeypatch.undo()
    importlib.reload(gpu_ml.exercises)
