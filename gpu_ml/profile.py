"""Nsight Compute from Python: profile the kernel launches of a snippet of Python code, run in a child process.

`ncu(code, kernel="regex", metrics=[...])` runs `python -c code` under `ncu --csv`, profiles the first `count`
launches whose kernel name matches, and returns one `Measurement` per kernel launch and metric; `by_kernel` arranges
them as a table. Without a CUDA GPU, or without `ncu` (on PATH or beside nvcc), it raises before starting anything.
"""

from __future__ import annotations

import csv
import io
import shutil
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from gpu_ml.cuda import has_nvcc, nvcc
from gpu_ml.env import has_gpu

# What a roofline needs: time, DRAM and SM throughput, and the bytes and FLOPs behind them.
DEFAULT_METRICS = (
    "gpu__time_duration.sum",
    "dram__throughput.avg.pct_of_peak_sustained_elapsed",
    "sm__throughput.avg.pct_of_peak_sustained_elapsed",
    "dram__bytes.sum",
)


@dataclass(frozen=True)
class Measurement:
    """One metric of one profiled kernel launch, as Nsight Compute reported it."""

    launch: int  # ncu's ID: the order of the profiled launches
    kernel: str
    metric: str
    unit: str
    value: float | str  # a number where ncu printed one (thousands separators removed), else its text


def find(name: str) -> str | None:
    """Path of an NVIDIA command-line tool (ncu, compute-sanitizer): on PATH, else beside nvcc; None if neither."""
    found = shutil.which(name)
    if found or not has_nvcc():
        return found
    candidate = Path(nvcc()).parent / name
    return str(candidate) if candidate.exists() else None


def tool(name: str) -> str:
    """Path of an NVIDIA command-line tool (ncu, compute-sanitizer); a clear error if absent or without a GPU."""
    if not has_gpu():
        raise RuntimeError(f"{name} watches CUDA kernels as they run: it needs a CUDA GPU, and this machine has none")
    found = find(name)
    if found is None:
        raise FileNotFoundError(f"{name} not found on PATH nor beside nvcc: it comes with the CUDA toolkit (e.g. "
                                f"/usr/local/cuda/bin); add that folder to PATH")
    return found


def _number(text: str) -> float | str:
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return text


def parse_csv(output: str) -> list[Measurement]:
    """The measurements in `ncu --csv` output: the lines from its header ("ID", ...) on; ==PROF== lines skipped."""
    lines = output.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith('"ID"')), None)
    if start is None:
        return []
    rows = csv.DictReader(io.StringIO("\n".join(line for line in lines[start:] if not line.startswith("=="))))
    return [Measurement(int(r["ID"]), r["Kernel Name"], r["Metric Name"], r["Metric Unit"], _number(r["Metric Value"]))
            for r in rows]


def ncu(code: str, *, kernel: str | None = None, metrics: Sequence[str] = DEFAULT_METRICS, section: str | None = None,
        count: int = 1, timeout: float = 600) -> list[Measurement]:
    """Run `python -c code` under Nsight Compute and return what it measured on the first `count` kernel launches
    whose name matches the regex `kernel` (every kernel when None): the `metrics`, or a whole `section` instead
    (e.g. "MemoryWorkloadAnalysis"). Raises RuntimeError with ncu's output if the run fails or measures nothing."""
    command = [tool("ncu"), "--csv", "--print-units", "base", "-c", str(count)]
    command += ["--section", section] if section else ["--metrics", ",".join(metrics)]
    if kernel:
        command += ["-k", f"regex:{kernel}"]
    done = subprocess.run([*command, sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout)
    measured = parse_csv(done.stdout)
    if done.returncode != 0 or not measured:
        why = f"exited with {done.returncode}" if done.returncode else "measured no kernel (does `kernel` match?)"
        raise RuntimeError(f"ncu {why}:\n{(done.stdout + done.stderr)[-3000:]}")
    return measured


def by_kernel(measured: Sequence[Measurement]) -> dict[tuple[int, str], dict[str, float | str]]:
    """{(launch, kernel name): {metric: value}}: one row per profiled launch."""
    table: dict[tuple[int, str], dict[str, float | str]] = {}
    for m in measured:
        table.setdefault((m.launch, m.kernel), {})[m.metric] = m.value
    return table
