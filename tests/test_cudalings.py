"""Cudalings (cuda/00-cudalings, gpu_ml.cudalings): every stub and every solution compiles; on a GPU every solution
passes its grader and every untouched stub fails; the notebook's exercises are the specs'; the graders' own code
(cases, calls, guards, references) works on CPU stand-ins for the host functions; without a GPU the grader says so.

Compiles go through gpu_ml.cuda.build and its cache: the stubs are built from the notebook's cells exactly as the
`%%cuda` magic receives them, so running the notebook and this file builds each stub once.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from gpu_ml import cuda
from gpu_ml.cudalings import CUDALINGS, GUARD, SPECS, grade_cudaling, notebook_cells, run_cases
from gpu_ml.env import capability, has_gpu

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK = ROOT / "cuda" / "00-cudalings" / "01_cudalings.ipynb"
SOLUTIONS = ROOT / "solutions" / "cuda" / "00-cudalings"
NAMES = [c.name for c in CUDALINGS]


needs_nvcc = pytest.mark.skipif(not cuda.has_nvcc(), reason="nvcc not found: CUDA cells cannot compile")
needs_gpu = pytest.mark.skipif(not has_gpu(), reason="needs a CUDA GPU")


STUBS = notebook_cells(NOTEBOOK)


def _source(kind: str, name: str) -> str:
    return STUBS[name][1] if kind == "stub" else (SOLUTIONS / f"{name}.cu").read_text()


def _load(kind: str, name: str) -> cuda.CudaFunction:
    source = _source(kind, name)
    path = cuda.build(source, library=True, arch=SPECS[name].arch)
    return cuda.load_library(path, source)[name]


def _types(params: list[cuda.Param]) -> tuple[str, ...]:
    return tuple(p.ctype + ("*" if p.pointer else "") for p in params)


# ----------------------------------------------------------------------------- the notebook and the specs


def test_the_notebook_holds_the_specs_exercises_in_order():
    assert list(STUBS) == NAMES
    assert len(NAMES) >= 20
    sources = ["".join(c["source"]) for c in json.loads(NOTEBOOK.read_text())["cells"]]
    for name in NAMES:
        assert f'grade_cudaling("{name}", {name});' in sources, f"no grader cell for {name}"
        assert any(f"({'../../solutions/cuda/00-cudalings'}/{name}.cu)" in s and "<details>" in s for s in sources), \
            f"no hint linking the solution of {name}"
    assert sorted(p.stem for p in SOLUTIONS.glob("*.cu")) == sorted(NAMES)


@pytest.mark.parametrize("name", NAMES)
def test_cells_and_solutions_declare_the_specs_signature_and_arch(name):
    line, _ = STUBS[name]
    options, flags = cuda._magic_parser().parse_known_args(shlex.split(line.removeprefix("%%cuda")))
    assert options.arch == SPECS[name].arch and not flags
    for kind in ("stub", "solution"):
        source = _source(kind, name)
        assert source.startswith(f"// cudaling: {name}\n")
        ret, params = cuda.parse_signatures(source)[name]
        assert ret == "int" and _types(params) == SPECS[name].params, (kind, _types(params))
    assert "TODO" in STUBS[name][1] and "TODO" not in _source("solution", name)


@needs_nvcc
@pytest.mark.parametrize("kind", ["stub", "solution"])
@pytest.mark.parametrize("name", NAMES)
def test_compiles(name, kind):
    source = _source(kind, name)
    cuda.build(source, library=True, arch=SPECS[name].arch)


# ----------------------------------------------------------------------------- the graders on the GPU


@pytest.mark.gpu
@needs_gpu
@needs_nvcc
@pytest.mark.parametrize("name", NAMES)
def test_the_solution_passes_on_the_gpu(name):
    spec = SPECS[name]
    if capability() < spec.capability:
        pytest.skip(f"needs compute capability {spec.capability}")
    verdict = grade_cudaling(name, _load("solution", name), quiet=True)
    assert verdict, verdict.message


@pytest.mark.gpu
@needs_gpu
@needs_nvcc
@pytest.mark.parametrize("name", NAMES)
def test_the_untouched_stub_fails_on_the_gpu(name):
    spec = SPECS[name]
    if capability() < spec.capability:
        pytest.skip(f"needs compute capability {spec.capability}")
    verdict = grade_cudaling(name, _load("stub", name), quiet=True)
    assert not verdict and f"{name}: not solved yet" in verdict.message, verdict.message


# ----------------------------------------------------------------------------- without a GPU


@needs_nvcc
def test_without_a_gpu_the_grader_says_so_and_does_not_raise(monkeypatch, capsys):
    monkeypatch.setenv("GPU_ML_FORCE_CPU", "1")
    verdict = grade_cudaling("whoami", _load("stub", "whoami"))
    assert not verdict and "whoami: compiled; grading needs a CUDA GPU" in capsys.readouterr().out
    # a host function whose parameters changed is told even without a GPU
    wrong = grade_cudaling("whoami", _load("stub", "add_guarded"), quiet=True)
    assert not wrong and "keep the stub's parameters" in wrong.message


def test_an_older_gpu_is_told_which_capability_is_needed(monkeypatch):
    import gpu_ml.cudalings as cudalings

    monkeypatch.setattr(cudalings, "has_gpu", lambda: True)
    monkeypatch.setattr(cudalings, "capability", lambda: (7, 5))
    verdict = grade_cudaling("reverse_cp_async", lambda *args: 0, quiet=True)
    assert not verdict and "needs compute capability 8.0 or newer (this GPU has 7.5)" in verdict.message
    with pytest.raises(ValueError, match="no cudaling named 'nope'"):
        grade_cudaling("nope", lambda *args: 0)


def test_a_python_function_is_not_graded_as_a_host_function(monkeypatch):
    """One that fills the output with PyTorch would pass every case without a kernel."""
    import gpu_ml.cudalings as cudalings

    monkeypatch.setattr(cudalings, "has_gpu", lambda: True)
    monkeypatch.setattr(cudalings, "capability", lambda: (9, 0))
    verdict = grade_cudaling("add_guarded", lambda x, y, out, n: out[:n].copy_(x + y) and 0, quiet=True)
    assert not verdict and "grade the host function a %%cuda cell built, not a function" in verdict.message


# ----------------------------------------------------------------------------- the graders' code, on CPU stand-ins
# Each stand-in does in PyTorch, on CPU tensors, what the solution's host function does on the GPU: it writes the
# right values into the buffers it is given and returns the same code. The grader must pass it; it must fail one that
# writes nothing (an untouched stub), one that writes past the end of an output and one that returns an error code.


def _whoami(block_of, thread_of, blocks, threads):
    i = torch.arange(blocks * threads, dtype=torch.int32)
    block_of[: i.numel()], thread_of[: i.numel()] = i // threads, i % threads
    return 0


def _fill(out, value, n, threads):
    if threads > 1024:
        return 9  # cudaErrorInvalidConfiguration
    out[:n] = value
    return 0


def _gather(x, idx, out, n, m):
    ok = (idx >= 0) & (idx < m)
    out[:n] = torch.where(ok, x[idx.long().clamp(0, m - 1)], 0.0)
    return 0 if ok.all() else -1


def _tiles(x, out, tiles, smem_bytes):
    out[: x.numel()] = x.transpose(1, 2).flatten()
    smem_bytes[0] = 32 * 33 * 4
    return 0


def _histogram(x, hist, n, bins):
    hist[:bins] = torch.bincount(x.long(), minlength=bins)
    return 0


def _compact(x, out, count, n):
    kept = x[x > 0].flip(0)  # any order
    out[: kept.numel()], count[0] = kept, kept.numel()
    return 0


def _grid_sum(x, partial, out, n):
    blocks = min(-(-n // 256), 1024)
    partial[:blocks] = 0.0
    out[0] = x.sum()
    return 0


def _write(out, value: torch.Tensor) -> int:
    out[: value.numel()] = value.flatten()
    return 0


STANDINS = {
    "whoami": _whoami,
    "add_guarded": lambda x, y, out, n: _write(out, x + y),
    "saxpy_grid_stride": lambda x, y, out, a, n, blocks, threads: _write(out, a * x + y),
    "affine_2d": lambda x, s, t, out, rows, cols: _write(out, x * s[:, None] + t[None, :]),
    "fill_checked": _fill,
    "gather_status": _gather,
    "reverse_block": lambda x, n: _write(x, x[:n].view(-1, 256).flip(1)),
    "transpose_tiles": _tiles,
    "warp_sums": lambda x, out, n: _write(out, x.view(-1, 32).sum(1)),
    "warp_broadcast_max": lambda x, out, n: _write(
        out, F.pad(x, (0, -n % 32), value=-torch.inf).view(-1, 32).amax(1).repeat_interleave(32)[:n]),
    "histogram": _histogram,
    "histogram_shared": _histogram,
    "compact_positive": _compact,
    "block_sums": lambda x, out, n: _write(out, F.pad(x, (0, -n % 256)).view(-1, 256).sum(1)),
    "grid_sum": _grid_sum,
    "transpose": lambda x, out, rows, cols: _write(out, x.t()),
    "matmul_tiled": lambda a, b, c, m, n, k: _write(c, a @ b),
    "scale_float4": lambda x, out, a, n: _write(out, a * x),
    "softmax_rows": lambda x, out, rows, cols: _write(out, torch.softmax(x, dim=1)),
    "reverse_cp_async": lambda x, out, n: _write(out, x.view(-1, 1024).flip(1)),
    "wmma_matmul": lambda a, b, c, m, n, k: _write(c, a.float() @ b.float()),
}
_C_TYPES = {"float*": torch.float32, "int*": torch.int32, "half*": torch.float16}


def _as_called(name: str, standin):
    """The stand-in, behind the checks `%%cuda` makes on a call: one argument per C parameter, of its type."""
    def call(*args):
        params = SPECS[name].params
        assert len(args) == len(params), f"{name}: {len(args)} arguments for {len(params)} parameters"
        for arg, ctype in zip(args, params, strict=True):
            if ctype.endswith("*"):
                assert isinstance(arg, torch.Tensor) and arg.dtype == _C_TYPES[ctype] and arg.is_contiguous()
            elif ctype == "float":
                assert isinstance(arg, (int, float)) and not isinstance(arg, bool)
            else:
                assert isinstance(arg, int) and not isinstance(arg, bool), (ctype, arg)
        return standin(*args)

    return call


def test_every_exercise_has_a_standin():
    assert set(STANDINS) == set(NAMES)


@pytest.mark.parametrize("name", NAMES)
def test_the_grader_passes_a_right_answer_and_fails_a_stub_on_cpu(name):
    spec = SPECS[name]
    verdict = run_cases(spec, _as_called(name, STANDINS[name]), "cpu", quiet=True)
    assert verdict and verdict.message.startswith(f"{name}: PASS"), verdict.message
    nothing = run_cases(spec, _as_called(name, lambda *args: 0), "cpu", quiet=True)
    assert not nothing and f"{name}: not solved yet" in nothing.message, nothing.message
    # told by a comparison or by the grader's own checks, not by an error in the grader's code
    assert "raised" not in nothing.message or "raised AssertionError" in nothing.message, nothing.message


@pytest.mark.parametrize("name", NAMES)
def test_the_grader_catches_a_store_past_the_end_and_an_error_code(name):
    spec = SPECS[name]
    right = _as_called(name, STANDINS[name])
    last_pointer = max(i for i, p in enumerate(spec.params) if p.endswith("*"))  # an output, in every exercise

    for stray in (7, "the old guard value"):  # NaN, or -1 for integers: what an overrun may store (the inputs' band)
        def past_the_end(*args, stray=stray):
            rc = right(*args)
            out = args[last_pointer]
            out[-GUARD // 2] = (float("nan") if out.is_floating_point() else -1) if isinstance(stray, str) else stray
            return rc

        verdict = run_cases(spec, past_the_end, "cpu", quiet=True)
        assert not verdict and "was written, but" in verdict.message, verdict.message
    failed = run_cases(spec, _as_called(name, lambda *args: 9), "cpu", quiet=True)
    assert not failed and "returned 9" in failed.message, failed.message


@needs_nvcc
def test_gpu_ml_exercises_builds_a_learners_cudalings(tmp_path, capsys):
    """A learner's saved notebook: a cell that does not compile is reported with nvcc's error; without a GPU the
    cells that compile wait for one (with a GPU they are graded)."""
    from gpu_ml import cli

    nb = json.loads(NOTEBOOK.read_text())
    for cell in nb["cells"]:
        if "".join(cell["source"]).startswith(f"{STUBS['whoami'][0]}\n// cudaling: whoami"):
            cell["source"] = f"{STUBS['whoami'][0]}\n// cudaling: whoami\nthis is not C++;\n"
    path = tmp_path / "mine.ipynb"
    path.write_text(json.dumps(nb))
    assert cli.main(["exercises", str(path)]) == 1
    out = capsys.readouterr().out
    assert f"] 0 of {len(NAMES)} solved" in out and "next: whoami (" in out and "whoami: does not compile: " in out
    if not has_gpu():
        assert out.count("needs a GPU to grade") == len(NAMES) - 1
