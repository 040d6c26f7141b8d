"""`gpu-ml` command: execute notebooks in place with provenance, and render the results table.

gpu-ml execute NOTEBOOK...   run each notebook top to bottom (nbclient) and save its outputs,
                             stamping GPU, versions and date into its metadata
gpu-ml results               rewrite the README's results table from results/*.json
gpu-ml export [--check]      write gpu_ml/kernels/ from the notebooks' `#| export` cells
                             (--check: only list what differs, exit 1 if anything does)
gpu-ml test [--shard I/N] [--workers K] [--save] [ITEM...]
                             every notebook and test file, one worker per GPU, each item's time and
                             result printed and kept in results/suite/<gpu>.json (--save: notebooks
                             run through `execute`, keeping their outputs)
gpu-ml exercises [NOTEBOOK...]
                             grade the Triton puzzles and the cudalings in your notebooks (as saved) and
                             list them, the next unsolved one first, with a progress bar
"""

from __future__ import annotations

import argparse
import datetime
import os
import sys
import tempfile
from pathlib import Path

from gpu_ml.bench import SHARED_GPU_LOCK
from gpu_ml.env import has_gpu, versions


def provenance() -> dict:
    """Where a run happened: GPU (or CPU), versions and date."""
    import torch

    return {
        "gpu": torch.cuda.get_device_name() if has_gpu() else "none (CPU run)",
        "versions": versions(),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }


# Run before a notebook's first cell, in its kernel, then removed: a notebook that resets PyTorch's peak statistics
# (to measure one step) would otherwise hide the peaks before the reset from the probe below.
_PEAK_KEEPER = """import torch as _torch
_gpu_ml_peak = [0]
def _gpu_ml_reset(device=None, _reset=_torch.cuda.reset_peak_memory_stats):
    if _torch.cuda.is_initialized():
        _gpu_ml_peak[0] = max(_gpu_ml_peak[0], _torch.cuda.max_memory_reserved(device))
    _reset(device)
_torch.cuda.reset_peak_memory_stats = _torch.cuda.memory.reset_peak_memory_stats = _gpu_ml_reset"""
# Run after a notebook's last cell, in its kernel, then removed: the most GPU memory PyTorch's allocator held; the
# seconds spent in gpu_ml.bench.gpu_alone blocks, waiting for the shared-GPU lock and paused by other notebooks; how
# many gpu_alone blocks ran and how long they waited for the lock.
_PEAK_CELL = """import sys as _sys
_b = _sys.modules.get("gpu_ml.bench")
print(max(_gpu_ml_peak[0], _torch.cuda.max_memory_reserved()) if _torch.cuda.is_initialized() else -1,
      *((_b.seconds_alone(), *_b.lock_seconds(), *_b.measurements()) if _b else (0.0, 0.0, 0.0, 0, 0.0)))"""


def kernel_manager(**kwargs):
    """A jupyter_client KernelManager (made with `kwargs`) whose kernel talks over Unix sockets in a folder of its
    own, removed with the manager, not over TCP ports: a free port that jupyter_client picks may be taken by another
    kernel before this one binds it ("Address already in use" when gpu-ml test or pytest-xdist start several at
    once). Windows has no ZeroMQ ipc transport: TCP there. conftest.py gives nbval's kernels the same."""
    import shutil
    import weakref

    from jupyter_client.manager import KernelManager

    if os.name != "posix" or "transport" in kwargs:
        return KernelManager(**kwargs)
    sockets = tempfile.mkdtemp(prefix="gpu_ml_kernel_")
    km = KernelManager(transport="ipc", ip=os.path.join(sockets, "kernel"), **kwargs)
    weakref.finalize(km, shutil.rmtree, sockets, True)
    return km


def execute(path: Path, *, timeout: int = 1800, kernel: str = "python3") -> None:
    """Execute the notebook at `path` in its own folder and save it with outputs and provenance.

    The provenance (`metadata.gpu_ml`) includes `peak_gpu_memory_gib`: the most GPU memory PyTorch's allocator
    reserved in the notebook's kernel (None when it never used CUDA), what a smaller GPU must hold, including
    the peaks before any `torch.cuda.reset_peak_memory_stats()` the notebook calls; `gpu_alone_s`: the seconds its
    measurements, profiles and CUDA programs took (gpu_ml.bench.seconds_alone); and `side_by_side`: whether
    other notebooks shared the GPU (`gpu-ml test` with more workers than GPUs), whose CPU work can slow the
    host-bound timings even while a measurement has the GPU alone. Side by side, also `lock_wait_s` and
    `paused_s`: the seconds the notebook waited for the lock and was paused by the others' measurements
    (gpu_ml.bench.lock_seconds); `measurements` and `measurement_wait_s`: how many gpu_alone blocks it ran and the
    part of `lock_wait_s` they waited (gpu_ml.bench.measurements)."""
    import importlib
    import threading

    import nbclient
    import nbformat

    # provenance() needs torch: imported here while the kernel runs, not before it starts (seconds per notebook)
    threading.Thread(target=importlib.import_module, args=("torch",), daemon=True).start()

    nb = nbformat.read(path, as_version=4)
    nb.cells.insert(0, nbformat.v4.new_code_cell(_PEAK_KEEPER))
    nb.cells.append(nbformat.v4.new_code_cell(_PEAK_CELL))
    client = nbclient.NotebookClient(nb, km=kernel_manager(kernel_name=kernel), timeout=timeout, kernel_name=kernel,
                                     resources={"metadata": {"path": str(path.parent)}})
    client.execute()  # raises CellExecutionError on the first failing cell; the file is left untouched
    peak, alone, waited, paused, count, count_waited = nb.cells.pop().outputs[0]["text"].split()
    del nb.cells[0]
    for cell in nb.cells:  # counted from 1 again, as if the keeper had not run
        if cell.cell_type == "code" and cell.execution_count:
            cell.execution_count -= 1
    nb.metadata["gpu_ml"] = provenance() | {
        "peak_gpu_memory_gib": round(int(peak) / 2**30, 2) if int(peak) >= 0 else None,
        "gpu_alone_s": round(float(alone), 1), "side_by_side": SHARED_GPU_LOCK in os.environ}
    if nb.metadata["gpu_ml"]["side_by_side"]:
        nb.metadata["gpu_ml"] |= {"lock_wait_s": round(float(waited), 1), "paused_s": round(float(paused), 1),
                                  "measurements": int(count), "measurement_wait_s": round(float(count_waited), 1)}
    nbformat.write(nb, path)


EXERCISES = (Path("triton/00-puzzles/01_triton_puzzles.ipynb"), Path("cuda/00-cudalings/01_cudalings.ipynb"))


def exercises(notebooks: list[Path], width: int = 40) -> int:
    """Grade the puzzles and cudalings of `notebooks` (as saved) and list them, the next unsolved one first.

    Returns 0 when every one passes, 1 otherwise, 2 when a notebook is missing or holds no exercises.
    """
    from gpu_ml.notebook import setup

    setup(quiet=True)  # on a CPU: Triton's interpreter, before any kernel is defined
    from gpu_ml import cudalings, puzzles

    rows = []  # (notebook, name, title, verdict)
    for notebook in notebooks:
        if not notebook.exists():
            print(f"{notebook}: no such notebook (run from the project root, or give the path to your copy)")
            return 2
        if puzzles.notebook_cells(notebook):
            rows += [(notebook, p.name, p.title, v) for p, v in puzzles.grade_notebook(notebook)]
        elif cudalings.notebook_cells(notebook):
            rows += [(notebook, c.name, c.name, v) for c, v in cudalings.grade_notebook(notebook)]
        else:
            print(f"{notebook}: no '# puzzle:' or '// cudaling:' cells")
            return 2
    solved = sum(bool(v) for *_, v in rows)
    filled = round(width * solved / len(rows))
    print(f"[{'#' * filled}{'.' * (width - filled)}] {solved} of {len(rows)} solved")
    todo = [row for row in rows if not row[3] and "grading needs" not in row[3].message]
    if todo:
        notebook, _, title, verdict = todo[0]
        print(f"next: {title} ({notebook})\n  {verdict.message}")
    for i, (notebook, name, _, verdict) in enumerate(rows, 1):
        status = "solved" if verdict else "needs a GPU to grade" if "grading needs" in verdict.message else "to do"
        print(f"{i:3d}. {status:20}  {name}  ({notebook.parent.name})")
    return 0 if solved == len(rows) else 1


def main(argv: list[str] | None = None) -> int:
    """Entry point of the `gpu-ml` command."""
    parser = argparse.ArgumentParser(
        prog="gpu-ml", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("execute", help="execute notebooks in place and stamp provenance")
    run.add_argument("notebooks", nargs="+", type=Path)
    run.add_argument("--timeout", type=int, default=1800, help="per-cell timeout in seconds")
    sub.add_parser("results", help="rewrite the README results table from results/*.json")
    tst = sub.add_parser("test", help="the whole suite over this machine's GPUs, timed")
    tst.add_argument("items", nargs="*", help="only these notebooks and test files (default: all)")
    tst.add_argument("--shard", help="run part I of N, e.g. 2/4")
    tst.add_argument("--workers", type=int, help="notebooks run at once (default: one per GPU; more than the GPUs: "
                     "they share them, and `#| gpu` cells and measurements take their GPU alone)")
    tst.add_argument("--test-workers", type=int, help="test files run at once (default: 8, at most one per core)")
    tst.add_argument("--save", action="store_true", help="execute notebooks in place, keeping their outputs")
    tst.add_argument("--tests-beside", action="store_true", help="with notebooks sharing a GPU, run the GPU test "
                     "files beside them from the start instead of first (paused by their measurements)")
    tst.add_argument("--timeout", type=float, default=1800, help="per-item time limit in seconds")
    exe = sub.add_parser("exercises", help="grade the puzzles and cudalings and show your progress")
    exe.add_argument("notebooks", nargs="*", type=Path, default=list(EXERCISES),
                     help="your copies of the puzzles and cudalings notebooks (default: both, in this project)")
    exp = sub.add_parser("export", help="generate gpu_ml/kernels from the notebooks' exported cells")
    exp.add_argument("--check", action="store_true", help="only report differences; exit 1 if any")
    args = parser.parse_args(argv)
    if args.command == "execute":
        for path in args.notebooks:
            print(f"executing {path}", flush=True)
            execute(path, timeout=args.timeout)
    elif args.command == "test":
        from gpu_ml import suite

        return suite.main(args.items or None, shard_spec=args.shard, workers=args.workers,
                          test_workers=args.test_workers, save=args.save, timeout=args.timeout,
                          tests_beside=args.tests_beside)
    elif args.command == "exercises":
        return exercises(args.notebooks)
    elif args.command == "export":
        from gpu_ml import export

        if args.check:
            problems = export.out_of_date()
            print("\n".join(problems) or "gpu_ml/kernels is in sync with the notebooks")
            return 1 if problems else 0
        written = export.export()
        print("\n".join(f"wrote {p.relative_to(export.ROOT)}" for p in written) or "gpu_ml/kernels was in sync")
    else:
        from gpu_ml.results import update_readme

        print(f"updated {update_readme()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
