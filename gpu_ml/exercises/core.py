"""What an exercise is: its notebook, its cases, how the learner's function is called, and PyTorch's answer."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from gpu_ml.cudalings import Cudaling
from gpu_ml.grading import Tolerance

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
    atol: Tolerance = None  # None: check's default for the output's dtype; or per dtype, {torch.float32: 1e-4}
    rtol: Tolerance = None


def must_raise(fn: Callable, args: tuple, error: type[Exception], what: str) -> None:
    """Raise AssertionError unless fn(*args) raises `error` (a grader's check that a wrapper refuses bad input)."""
    try:
        fn(*args)
    except error:
        return
    except Exception as exc:
        raise AssertionError(f"{what}: raised {type(exc).__name__}, expected {error.__name__}") from exc
    raise AssertionError(f"{what}: did not raise {error.__name__}")


@dataclass(frozen=True)
class CudaExercise:
    """A CUDA exercise of a lesson: a `%%cuda` stub cell whose second line is `// exercise: NAME` and whose
    `extern "C"` host function NAME is graded like a cudaling (gpu_ml.cudalings: `spec` says how); the solution is
    solutions/<the notebook's path without .ipynb>/NAME.cu."""

    notebook: str  # relative to the project root
    spec: Cudaling

    @property
    def name(self) -> str:
        return self.spec.name

