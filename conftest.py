"""Test harness: every notebook runs through nbval; without a GPU, cells tagged `gpu` skip themselves
in the kernel (their first line is `#| gpu`) and are reported as skipped, and Triton kernels run in
its interpreter."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import nbval.kernel
import pytest

from gpu_ml import cuda
from gpu_ml.bench import claim_gpu_lock, hold_gpu, lock_seconds, seconds_alone
from gpu_ml.cli import kernel_manager
from gpu_ml.env import has_gpu
from gpu_ml.notebook import patch_interpreter
from gpu_ml.suite import RUN_FILE, TEST_HOLDS_LOCK
from tests.triton_specializations import TARGETS

# nbval's kernels talk over Unix sockets, as gpu-ml execute's do: TCP ports picked for kernels started at once
# (xdist, gpu-ml test) can collide
nbval.kernel.KernelManager = kernel_manager
HAS_GPU = has_gpu()
if not HAS_GPU:
    # The notebook kernels inherit this, so kernels defined before setup() still interpret.
    os.environ["TRITON_INTERPRET"] = "1"
    patch_interpreter()  # as setup() does


@pytest.fixture(autouse=True)
def _seeded() -> None:
    """Every test starts from the same random state, whatever ran before it: a draw that fails, fails
    every time (an unseeded suite once failed on a 1-in-200 LayerNorm input and then passed again)."""
    import torch

    torch.manual_seed(0)


ROOT = Path(__file__).resolve().parent
LAUNCHES = "GPU_ML_TRITON_LAUNCHES"
# Kernels a lesson writes not to compile: the error is what it teaches (triton/01-basics/03_debugging).
NOT_TO_COMPILE = {"scale_debug_kernel": "a Python print(), which only the interpreter runs",
                  "scale_checked_kernel": "a tl.static_assert that fails on purpose (BLOCK=8)",
                  "arange_runtime_kernel": "tl.arange with a run-time bound",
                  "shape_mismatch_kernel": "two shapes no broadcasting rule fits"}


def pytest_configure(config: pytest.Config) -> None:
    if not HAS_GPU and LAUNCHES not in os.environ:  # the controller (xdist's workers inherit what it sets)
        _record_notebook_kernels()
    # gpu-ml test runs this test file beside notebooks that share the GPU: the whole run holds the lock shared, as a
    # notebook's cell does, and their measurements pause it
    if os.environ.pop(TEST_HOLDS_LOCK, None) and claim_gpu_lock():
        hold_gpu("shared")
        cuda.PROGRAMS_TIME_THEMSELVES = False  # no test times a program: they pause with it instead of pausing all
    config.addinivalue_line("markers", "gpu: needs a CUDA GPU (skipped without one)")
    config.addinivalue_line("markers", "cpu_only: a test file that never touches a GPU (gpu-ml test runs it beside "
                            "the notebooks)")


def pytest_unconfigure(config: pytest.Config) -> None:
    hold_gpu(None)
    run_file = os.environ.get(RUN_FILE)  # gpu-ml test: the most GPU memory this run's allocator reserved, and the
    if run_file:  # seconds it had the GPU alone, waited for it and was paused, for the suite's record
        torch = sys.modules.get("torch")
        used = torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized()
        waited, paused = lock_seconds()
        Path(run_file).write_text(json.dumps({
            "peak_gpu_memory_gib": round(torch.cuda.max_memory_reserved() / 2**30, 2) if used else 0.0,
            "gpu_alone_s": round(seconds_alone(), 1), "lock_wait_s": round(waited, 1), "paused_s": round(paused, 1)}))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if HAS_GPU:
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        cell = getattr(item, "cell", None)  # nbval's notebook-cell items carry the cell
        if cell is not None and "gpu" in cell.metadata.get("tags", []):
            _run_then_skip(item)
        elif item.get_closest_marker("gpu"):
            item.add_marker(skip)


def _run_then_skip(item: pytest.Item) -> None:
    """A `gpu` cell is still sent to the kernel, as "Run All" in Jupyter would send it: its first line,
    `#| gpu`, makes it skip itself there (gpu_ml.notebook.gpu_cell), which an error would disprove;
    then it is reported as skipped."""
    run = item.runtest

    def runtest() -> None:
        run()
        pytest.skip("needs a CUDA GPU (sent to the kernel as in Jupyter's Run All: it skipped itself)")

    item.runtest = runtest


# ----------------------------------------------------------------------------- notebook kernels, for every GPU

def _record_notebook_kernels() -> None:
    """Give the notebooks' kernels an IPython startup file that records each launch of a notebook-defined Triton
    kernel in the interpreter (tests/triton_specializations.py notebook_recorder), for pytest_sessionfinish."""
    folder = Path(tempfile.mkdtemp(prefix="gpu_ml_nb_launches_"))
    startup = folder / "ipython" / "profile_default" / "startup"
    startup.mkdir(parents=True)
    (startup / "00-record-triton-launches.py").write_text(
        f"import sys\nsys.path.insert(0, {str(ROOT / 'tests')!r})\n"
        f"import triton_specializations\ntriton_specializations.notebook_recorder({str(folder)!r})\n")
    os.environ[LAUNCHES] = str(folder)
    os.environ[LAUNCHES + "_OWNER"] = str(os.getpid())  # a pytest this one starts (a test may) leaves it alone
    os.environ["IPYTHONDIR"] = str(folder / "ipython")


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """The architecture matrix of the notebooks' own Triton kernels: every launch the notebooks made in the
    interpreter, compiled ahead of time for each GPU generation (tests/test_arch_matrix.py does it for
    gpu_ml.kernels). A failure fails the session, naming the notebook, the cell and the target."""
    folder = os.environ.get(LAUNCHES)
    if HAS_GPU or not folder or os.environ.get(LAUNCHES + "_OWNER") != str(os.getpid()):
        return  # no GPU-less run, or not the process that made the folder (an xdist worker, a nested pytest)
    try:
        _compile_notebook_kernels(session, folder)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _compile_notebook_kernels(session: pytest.Session, folder: str) -> None:
    if not any(Path(folder).glob("launches_*")):
        return
    helper = ROOT / "tests" / "triton_specializations.py"
    procs = [subprocess.Popen([sys.executable, str(helper), "compile-notebooks", folder, arch], cwd=ROOT,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for arch in TARGETS]
    failures, kernels, compiled_failing = [], set(), set()
    for proc in procs:
        out, err = proc.communicate(timeout=1800)
        if proc.returncode != 0:
            failures.append(f"compiling the notebooks' kernels crashed: {err[-2000:]}")
            continue
        for f in json.loads(out.strip().splitlines()[-1]):
            compiled_failing.add(f["name"])
            if f["name"] in NOT_TO_COMPILE:
                continue
            failures.append(f"{_where(f['name'], f.get('cwd'))}: {f['name']} does not compile for {f['arch']} "
                            f"({f['constexprs']}): {f['error']}")
    for path in Path(folder).glob("launches_*"):
        kernels |= {json.loads(line)["name"] for line in path.read_text().splitlines()}
    failures += [f"{name} ({why}) compiled for every target: it is listed in conftest.NOT_TO_COMPILE, so its lesson "
                 "no longer shows that error" for name, why in NOT_TO_COMPILE.items() if name in kernels
                 and name not in compiled_failing]
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_line(f"notebook Triton kernels compiled ahead of time for {', '.join(TARGETS)}: "
                            f"{len(kernels)} kernels, {len(failures)} failures")
        for line in failures:
            reporter.write_line(line, red=True)
    if failures:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def _where(name: str, cwd: str | None) -> str:
    """'notebook, cell N' of the code cell that defines `name` (searched in the notebook's folder)."""
    for path in sorted(Path(cwd or ROOT).glob("*.ipynb")):
        for index, cell in enumerate(json.loads(path.read_text())["cells"]):
            if cell["cell_type"] == "code" and f"def {name}(" in "".join(cell["source"]):
                return f"{path.relative_to(ROOT)}, cell {index}"
    return f"a notebook under {cwd}"
