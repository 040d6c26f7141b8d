"""The graded exercises at the end of the lessons: for each, its cases, how the learner's function is called, and
PyTorch's answer; `grade_exercise(name, fn)` grades it with `gpu_ml.grading.grade`.

In a notebook an exercise is a stub cell whose first line is `# exercise: NAME` (the learner fills it in) and a
grader cell calling `grade_exercise("NAME", fn)`; the solution is in solutions/ at the notebook's path. The
tests grade every solution (it must pass) and every untouched stub (it must fail).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from gpu_ml.grading import Verdict, grade
from gpu_ml.validate import kernel_device

Cases = dict[str, tuple]


@dataclass(frozen=True)
class Exercise:
    """One exercise: the notebook it belongs to, its cases, how the attempt is called, and the reference."""

    name: str
    notebook: str  # relative to the project root
    function: str  # what the stub cell defines and the grader cell passes (the solution's name for it too)
    cases: Callable[[], Cases]  # case name -> arguments, on kernel_device()
    reference: Callable[..., torch.Tensor]
    call: Callable[..., torch.Tensor]  # call(attempt, *arguments) -> what is compared with the reference


def _vectors() -> Cases:
    g = torch.Generator().manual_seed(0)
    return {f"n={n}": (torch.randn(n, generator=g).to(kernel_device()), torch.randn(n, generator=g).to(kernel_device()))
            for n in (1, 1000, 5000)}


def _in_place(fn: Callable, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Call fn(x, y) on a copy of x and return that copy: what an in-place add left in it."""
    mine = x.clone()
    fn(mine, y)
    return mine


_ALL = [
    Exercise("axpy", "triton/01-basics/01_vector_add.ipynb", "axpy",
             lambda: {name: (2.5, x, y) for name, (x, y) in _vectors().items()},
             reference=lambda a, x, y: a * x + y, call=lambda fn, *args: fn(*args)),
    Exercise("add_in_place", "triton/01-basics/01_vector_add.ipynb", "add_", _vectors,
             reference=lambda x, y: x + y, call=_in_place),
]
EXERCISES: dict[str, Exercise] = {e.name: e for e in _ALL}


def grade_exercise(name: str, fn: Callable, *, quiet: bool = False) -> Verdict:
    """Grade the learner's `fn` for exercise `name` on every case: PASS, or "not solved yet" with the first case and
    element that differ (or what it raised); printed unless `quiet`, and returned, never raised."""
    if name not in EXERCISES:
        raise KeyError(f"no exercise {name!r}; the exercises are {', '.join(EXERCISES)}")
    exercise = EXERCISES[name]
    return grade(name, lambda *args: exercise.call(fn, *args), exercise.reference, exercise.cases(), quiet=quiet)


def notebook_cells(path: str | Path) -> dict[str, str]:
    """name -> source of every code cell of the notebook at `path` whose first line is `# exercise: NAME`."""
    cells = {}
    for cell in json.loads(Path(path).read_text())["cells"]:
        source = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
        first = source.split("\n", 1)[0].strip()
        if cell["cell_type"] == "code" and first.startswith("# exercise:"):
            cells[first.removeprefix("# exercise:").strip()] = source
    return cells
