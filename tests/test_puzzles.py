"""The Triton puzzles (`gpu_ml.puzzles`, triton/00-puzzles): every solution passes its grader, every untouched stub
of the notebook runs and fails it, and a solution with one planted bug (a missing mask, an off-by-one, the wrong
`other=`, an unguarded -inf) fails it too.

On a CPU the kernels run in Triton's interpreter: the fixtures define them only once TRITON_INTERPRET=1 is set.
"""

from __future__ import annotations

import importlib.util
import inspect
import json
from pathlib import Path

import pytest
import torch

from gpu_ml import cli
from gpu_ml.env import has_gpu
from gpu_ml.puzzles import PUZZLES, Memory, grade_puzzle, kernel_from_cell, notebook_cells, progress, show_puzzle

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK = ROOT / "triton/00-puzzles/01_triton_puzzles.ipynb"
SOLUTIONS = ROOT / "solutions/triton/00-puzzles/01_triton_puzzles.py"


@pytest.fixture(scope="module")
def interpreter():
    """TRITON_INTERPRET=1 on a CPU while this module's kernels are defined and run (Triton reads it at definition)."""
    with pytest.MonkeyPatch.context() as mp:
        if not has_gpu():
            mp.setenv("TRITON_INTERPRET", "1")
        yield


@pytest.fixture(scope="module")
def solutions(interpreter):
    spec = importlib.util.spec_from_file_location("triton_puzzle_solutions", SOLUTIONS)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def stubs(interpreter):
    return {name: kernel_from_cell(name, source) for name, source in notebook_cells(NOTEBOOK).items()}


def _parameters(kernel) -> list[str]:
    return list(inspect.signature(kernel.fn).parameters)


def test_the_notebook_has_every_puzzle_in_order():
    assert list(notebook_cells(NOTEBOOK)) == list(PUZZLES)
    assert len(PUZZLES) >= 20


@pytest.mark.parametrize("name", PUZZLES)
def test_the_solution_passes(solutions, name):
    verdict = grade_puzzle(name, getattr(solutions, PUZZLES[name].kernel_name), quiet=True)
    assert verdict, verdict.message


@pytest.mark.parametrize("name", PUZZLES)
def test_the_untouched_stub_runs_and_fails(stubs, solutions, name):
    stub = stubs[name]
    assert _parameters(stub) == _parameters(getattr(solutions, PUZZLES[name].kernel_name)), "signatures differ"
    verdict = grade_puzzle(name, stub, quiet=True)
    assert not verdict
    assert "not solved yet: case" in verdict.message and "raised" not in verdict.message, verdict.message


# puzzle -> (text of the solution, what replaces it, a fragment of the expected verdict)
BUGS = {
    "add_vectors": ("tl.store(z_ptr + offs, x + y, mask=mask)", "tl.store(z_ptr + offs, x + y)",
                    "OutOfBounds: the kernel wrote outside z"),
    "add_constant": ("tl.store(z_ptr + offs, x + 10.0, mask=mask)", "tl.store(x_ptr + offs, x + 10.0, mask=mask)",
                     "into its input x"),
    # no mask at all: the lanes past the end load the inputs' NaN band and store NaN past z's end, into z's own band
    "outer_add": ("x = tl.load(x_ptr + i, mask=i < M)\n    y = tl.load(y_ptr + j, mask=j < N)\n    mask = "
                  "(i[:, None] < M) & (j[None, :] < N)", "x = tl.load(x_ptr + i)\n    y = tl.load(y_ptr + j)\n    "
                  "mask = None", "OutOfBounds: the kernel wrote outside z"),
    "add_matrices": ("mask = (i[:, None] < M) & (j[None, :] < N)\n    x = tl.load(x_ptr",
                     "mask = j[None, :] < N\n    x = tl.load(x_ptr", "OutOfBounds: the kernel wrote outside z"),
    "outer_add_blocks": ("mask = (i[:, None] < M) & (j[None, :] < N)", "mask = i[:, None] < M", "not solved yet"),
    "mul_relu_backward": ("x * y[None, :] > 0", "x * y[None, :] >= 0", "not solved yet: case"),
    "row_max": ('mask=offs < N, other=float("-inf")', "mask=offs < N, other=0.0", "all negative"),
    "cumsum": ("carry + tl.cumsum(x, axis=0)", "carry + tl.cumsum(x, axis=0) - x", "not solved yet: case"),
    "softmax": ("tl.exp(x - tl.max(x, axis=0))", "tl.exp(x)", "values near +-1e4"),
    "layernorm": ("xc = tl.where(mask, x - mean, 0.0)", "xc = x - mean", "mean 3"),
    "logsumexp": ('tl.where(m_new == float("-inf"), 0.0, m_new)', "m_new", "first 20 are -inf"),
    "matmul": ("for start in range(0, K, BK):", "for start in range(0, K - BK + 1, BK):", "K=1'"),
    "flash_attention": ("j[None, :] <= i[:, None]", "j[None, :] < i[:, None]", "causal"),
}


@pytest.mark.parametrize("name", BUGS)
def test_a_planted_bug_fails(solutions, name):
    old, new, expected = BUGS[name]
    source = inspect.getsource(getattr(solutions, PUZZLES[name].kernel_name).fn)
    assert source.count(old) == 1, f"the solution of {name} changed: update BUGS"
    verdict = grade_puzzle(name, kernel_from_cell(name, source.replace(old, new)), quiet=True)
    assert not verdict and expected in verdict.message, verdict.message


def test_inputs_sit_between_bands_of_inf_minus_inf_and_nan():
    """Past either end of an input, and past the end of each row of a pitched one, a load finds +inf first, then -inf,
    then NaN: a tl.maximum that reads one element too many sees +inf (NaN alone would vanish in it)."""
    x = torch.arange(6.0).view(2, 3)
    view = Memory().input("x", x, pitch=5)
    base, at = torch.as_strided(view, (view.untyped_storage().nbytes() // 4,), (1,), 0), view.storage_offset()
    inf, row = float("inf"), [float("inf"), float("-inf")]  # what a row's gap of 2 holds
    assert base[at : at + 10].tolist() == [0.0, 1.0, 2.0, *row, 3.0, 4.0, 5.0, *row]
    assert base[at + 10 : at + 12].tolist() == [inf, -inf] and base[at + 12].isnan()  # past the end
    assert base[at - 2 : at].tolist() == [-inf, inf] and base[at - 3].isnan()  # before the start


def test_a_host_function_is_not_a_kernel(solutions):
    """An object that launches like a kernel (kernel[grid](...)) but computes on the host is refused."""
    class HostAdd:
        def __getitem__(self, grid):
            return lambda x_ptr, z_ptr, N, B: z_ptr.copy_(x_ptr + 10.0)

    verdict = grade_puzzle("add_constant", HostAdd(), quiet=True)
    assert not verdict and "the attempt is a HostAdd, not a @triton.jit kernel" in verdict.message


def test_progress_and_unknown_names(capsys, stubs):
    verdicts = progress({PUZZLES["add_constant"].kernel_name: stubs["add_constant"]})
    assert len(verdicts) == 1 and not verdicts[0]
    out = capsys.readouterr().out
    assert " 1. to do  add_constant" in out and f"0 of {len(PUZZLES)} puzzles solved" in out
    with pytest.raises(KeyError, match="no puzzle 'nope'"):
        grade_puzzle("nope", None)


def test_show_puzzle_pictures_the_accesses(solutions, monkeypatch):
    """Every solution's picture has no out-of-bounds access; a store without its mask is flagged."""
    import matplotlib

    matplotlib.use("Agg")
    monkeypatch.setattr("matplotlib.pyplot.show", lambda: matplotlib.pyplot.close("all"))
    for name, puzzle in PUZZLES.items():
        traces = show_puzzle(name, getattr(solutions, puzzle.kernel_name))
        assert traces and not any(t.out_of_bounds for t in traces), name
    old, new, _ = BUGS["add_vectors"]
    source = inspect.getsource(solutions.add_vectors_kernel.fn).replace(old, new)
    (trace,) = show_puzzle("add_vectors", kernel_from_cell("add_vectors", source), "N=100")
    assert trace.out_of_bounds and "writes 28 address(es)" in trace.out_of_bounds[0]
    with pytest.raises(KeyError, match="no puzzle 'nope'"):
        show_puzzle("nope", None)


def _copy_with(tmp_path, replace: dict[str, str]) -> Path:
    """The puzzles notebook with some puzzle cells' sources replaced (name -> new source after the first line)."""
    nb = json.loads(NOTEBOOK.read_text())
    for cell in nb["cells"]:
        source = "".join(cell["source"])
        name = source.split("\n", 1)[0].removeprefix("# puzzle:").strip() if source.startswith("# puzzle:") else None
        if name in replace:
            cell["source"] = f"# puzzle: {name}\n{replace[name]}"
    path = tmp_path / "mine.ipynb"
    path.write_text(json.dumps(nb))
    return path


def test_a_kernel_run_from_its_cells_source_is_graded_like_the_imported_one(solutions):
    """What `gpu-ml exercises` does with a saved cell: exec its source (compiled by Triton on a GPU)."""
    source = "# puzzle: add_constant\n" + inspect.getsource(solutions.add_constant_kernel.fn)
    verdict = grade_puzzle("add_constant", kernel_from_cell("add_constant", source), quiet=True)
    assert verdict, verdict.message


def test_gpu_ml_exercises_grades_a_learners_notebook(tmp_path, solutions, capsys):
    solved = {name: inspect.getsource(getattr(solutions, f"{name}_kernel").fn)  # with its @triton.jit
              for name in ("add_constant", "outer_add")}
    path = _copy_with(tmp_path, {**solved, "add_vectors": "def add_vectors_kernel(:\n"})  # a syntax error
    assert cli.main(["exercises", str(path)]) == 1
    out = capsys.readouterr().out
    assert f"] 2 of {len(PUZZLES)} solved" in out and "  1. solved" in out and "add_constant  (" in out, out
    assert f"next: {PUZZLES['add_vectors'].title} (" in out and "the cell raised SyntaxError" in out
    everything = {name: inspect.getsource(getattr(solutions, p.kernel_name).fn)
                  for name, p in PUZZLES.items()}
    assert cli.main(["exercises", str(_copy_with(tmp_path, everything))]) == 0
    assert cli.main(["exercises", str(tmp_path / "missing.ipynb")]) == 2
