"""The graded exercises at the end of the lessons: for each, its cases, how the learner's function is called, and
PyTorch's answer; `grade_exercise(name, fn)` grades it with `gpu_ml.grading.grade`.

In a notebook an exercise is a stub cell whose first line is `# exercise: NAME` (the learner fills it in) and a
grader cell calling `grade_exercise("NAME", fn)`; the solution is in solutions/ at the notebook's path. A CUDA
exercise is a `%%cuda` cell whose next line is `// exercise: NAME`, graded like a cudaling (`CudaExercise`). The
tests grade every solution (it must pass) and every untouched stub (it must fail; CUDA ones on a GPU).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from gpu_ml.cudalings import grade_spec
from gpu_ml.cudalings import notebook_cells as cuda_cells
from gpu_ml.exercises import (
    cuda_basics,
    cuda_bitonic,
    cuda_compaction,
    cuda_cute,
    cuda_cute_copies,
    cuda_cute_dsl,
    cuda_cute_mma,
    cuda_cute_swizzle,
    cuda_cutlass,
    cuda_debugging,
    cuda_matrix,
    cuda_models,
    cuda_nn,
    cuda_parallel,
    cuda_profiling,
    cuda_sort,
    fundamentals,
    multi_gpu,
    transformer_math,
    triton_basics,
    triton_inference,
    triton_models,
    triton_nn,
    triton_norm_loss,
    triton_parallel,
)
from gpu_ml.exercises.core import CudaExercise, Exercise
from gpu_ml.grading import Verdict, grade, marked_cells

# One module per chapter, each with its list EXERCISES; a new chapter's module is added here.
_CHAPTERS = (fundamentals, triton_basics, triton_nn, triton_norm_loss, triton_models, triton_parallel,
             triton_inference, transformer_math, cuda_basics, cuda_matrix, cuda_nn, cuda_models, cuda_parallel,
             cuda_compaction, cuda_sort, cuda_bitonic, cuda_cute, cuda_cute_copies, cuda_cute_mma, cuda_cute_swizzle,
             cuda_cutlass, cuda_cute_dsl, multi_gpu, cuda_profiling, cuda_debugging)
EXERCISES: dict[str, Exercise] = {e.name: e for chapter in _CHAPTERS for e in chapter.EXERCISES}
CUDA_EXERCISES: dict[str, CudaExercise] = {e.name: e for chapter in _CHAPTERS
                                           for e in getattr(chapter, "CUDA_EXERCISES", ())}
_NAMES = [e.name for chapter in _CHAPTERS for e in [*chapter.EXERCISES, *getattr(chapter, "CUDA_EXERCISES", ())]]
if len(_NAMES) != len(set(_NAMES)):  # a second exercise of the same name would silently replace the first
    raise ValueError(f"exercise names must be unique: {sorted({n for n in _NAMES if _NAMES.count(n) > 1})}")


def grade_exercise(name: str, fn: Callable, *, quiet: bool = False) -> Verdict:
    """Grade the learner's `fn` for exercise `name` on every case: PASS, or "not solved yet" with the first case and
    element that differ (or what it raised); printed unless `quiet`, and returned, never raised."""
    if name in CUDA_EXERCISES:  # without a GPU: "compiled; grading needs a CUDA GPU"
        return grade_spec(CUDA_EXERCISES[name].spec, fn, quiet=quiet)
    if name not in EXERCISES:
        raise KeyError(f"no exercise {name!r}; the exercises are {', '.join([*EXERCISES, *CUDA_EXERCISES])}")
    exercise = EXERCISES[name]
    return grade(name, lambda *args: exercise.call(fn, *args), exercise.reference, exercise.cases(),
                 atol=exercise.atol, rtol=exercise.rtol, quiet=quiet)


def notebook_cells(path: str | Path) -> dict[str, str]:
    """name -> source of every code cell of the notebook at `path` whose first line is `# exercise: NAME`."""
    return marked_cells(path, "# exercise:")


def notebook_cuda_cells(path: str | Path) -> dict[str, tuple[str, str]]:
    """name -> (the `%%cuda ...` line, the body) of every `%%cuda` cell of the notebook at `path` whose second line
    is `// exercise: NAME`."""
    return cuda_cells(path, "exercise")

