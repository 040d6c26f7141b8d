"""Nsight Compute from Python: profile the kernel launches of a snippet of Python code, run in a child process.

`ncu(code, kernel="regex", metrics=[...])` runs `python -c code` under `ncu --csv`, profiles the first `count`
launches whose kernel name matches, and returns one `Measurement` per kernel launch and metric; `by_kernel` arranges
them as a table. Without a CUDA GPU, or without `ncu` (on PATH or beside nvcc), it raises before starting anything.

Around it, what a lesson that reads counters needs: `require_metrics` checks metric names against the installed
ncu (`--query-metrics`) before a long run; `cuda_functions_code` lets the child call `%%cuda` functions the notebook
built; `group_launches` gathers the profiled launches of each kernel (or each step of several kernels);
`text_table` prints rows without pandas; `Claim` and `judge` set a lesson's claim beside the counter that tests it.
Where the driver keeps the counters from this user (ERR_NVGPUCTRPERM, as on Colab), `ncu` and `query_metrics` raise
`CountersNotPermitted`, which says what can be done about it.
"""

from __future__ import annotations

import csv
import io
import re
import shutil
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from gpu_ml.bench import gpu_alone, run_child, sharing_gpu
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


NOT_PERMITTED = "ERR_NVGPUCTRPERM"  # what ncu prints when the driver keeps the performance counters from this user


class CountersNotPermitted(RuntimeError):
    """ncu may not read this GPU's performance counters (ERR_NVGPUCTRPERM), as on Colab and many rented GPUs."""


def _refuse_if_not_permitted(output: str) -> None:
    """Raise CountersNotPermitted, with what to do about it, if ncu's `output` says ERR_NVGPUCTRPERM."""
    if NOT_PERMITTED not in output:
        return
    said = next((line.strip() for line in output.splitlines() if NOT_PERMITTED in line), NOT_PERMITTED)
    raise CountersNotPermitted(
        "ncu may not read this GPU's performance counters (ERR_NVGPUCTRPERM): the NVIDIA driver lets only "
        "administrators use them. On Colab and on many rented or shared GPUs you cannot change that. On your own "
        "machine, run as an administrator (e.g. sudo) or set the driver option "
        "NVreg_RestrictProfilingToAdminUsers=0 and reboot: NVIDIA's page \"ERR_NVGPUCTRPERM\" "
        f"(https://developer.nvidia.com/ERR_NVGPUCTRPERM) says how.\nncu said: {said}")


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
    missing = {"ID", "Kernel Name", "Metric Name", "Metric Unit", "Metric Value"} - set(rows.fieldnames or ())
    if missing:
        raise ValueError(f"ncu's CSV lacks the columns {sorted(missing)}; its header: {rows.fieldnames}")
    found = []
    for r in rows:
        if None in r.values():  # a row cut short
            raise ValueError(f"ncu's CSV has a row with fewer fields than its header: {r}")
        found.append(Measurement(int(r["ID"]), r["Kernel Name"], r["Metric Name"], r["Metric Unit"],
                                 _number(r["Metric Value"])))
    return found


CLOCK_CONTROLS = ("base", "none")  # ncu --clock-control: lock to base clocks (ncu's default), or leave them alone


def ncu(code: str, *, kernel: str | None = None, metrics: Sequence[str] = DEFAULT_METRICS, section: str | None = None,
        count: int = 1, timeout: float = 600, from_start: bool = True,
        clock_control: str | None = None) -> list[Measurement]:
    """Run `python -c code` under Nsight Compute and return what it measured on the first `count` kernel launches
    whose name matches the regex `kernel` (every kernel when None): the `metrics`, or a whole `section` instead
    (e.g. "MemoryWorkloadAnalysis"). Raises RuntimeError with ncu's output if the run fails or measures nothing,
    CountersNotPermitted (a RuntimeError) if it failed because the counters may not be read here.

    from_start=False profiles only the launches between `torch.cuda.profiler.start()` and `stop()` in `code`
    (`--profile-from-start off`): warm-up, compilation and set-up launches before it are not profiled.
    clock_control="none" lets the GPU run at its usual clocks instead of ncu's locked base clocks, so that the
    measured durations compare with a benchmark's. Where `gpu-ml test` shares the GPU, `code` first runs once without
    ncu, beside the other notebooks, and then under ncu with the GPU alone."""
    if clock_control is not None and clock_control not in CLOCK_CONTROLS:
        raise ValueError(f"clock_control must be one of {CLOCK_CONTROLS} (or None: ncu's default), got "
                         f"{clock_control!r}")
    command = [tool("ncu"), "--csv", "--print-units", "base", "-c", str(count)]
    command += ["--section", section] if section else ["--metrics", ",".join(metrics)]
    if kernel:
        command += ["-k", f"regex:{kernel}"]
    if not from_start:
        command += ["--profile-from-start", "off"]
    if clock_control is not None:
        command += ["--clock-control", clock_control]
    if sharing_gpu():  # gpu-ml test: a first run beside the other notebooks (paused with this one) fills the caches,
        # so that the GPU is held alone for the profile, not for compiling (CUDA 5.2's profile held it 83 s with cold
        # caches, 17 s warm, on an H200). Its result is not looked at: the profiled run reports.
        run_child([sys.executable, "-c", code], timeout=timeout, alone=False)
    with gpu_alone():  # under `gpu-ml test`, no other notebook's kernels beside the profiled ones
        done = subprocess.run([*command, sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout)
    measured = parse_csv(done.stdout)
    if done.returncode != 0 or not measured:
        _refuse_if_not_permitted(done.stdout + done.stderr)
        why = f"exited with {done.returncode}" if done.returncode else "measured no kernel (does `kernel` match?)"
        raise RuntimeError(f"ncu {why}:\n{(done.stdout + done.stderr)[-3000:]}")
    return measured


def by_kernel(measured: Sequence[Measurement]) -> dict[tuple[int, str], dict[str, float | str]]:
    """{(launch, kernel name): {metric: value}}: one row per profiled launch."""
    table: dict[tuple[int, str], dict[str, float | str]] = {}
    for m in measured:
        table.setdefault((m.launch, m.kernel), {})[m.metric] = m.value
    return table


# ----------------------------------------------------------------------------- metric names, checked first

# Launch statistics (registers, block size, occupancy limits) and device attributes are not hardware counters:
# `ncu --query-metrics` does not list them, and ncu itself refuses a misspelt one when it profiles.
NOT_QUERIED = ("launch__", "device__")
_METRIC_NAME = re.compile(r"[a-z][a-z0-9]*__[A-Za-z0-9_]+(?:\.[A-Za-z0-9_]+)*")


def parse_metric_list(output: str) -> set[str]:
    """The metric names in `ncu --query-metrics` output: the first column of its table (the device line, the
    header and the rules skipped; CSV quoting tolerated). Raises ValueError if there are none."""
    names = set()
    for line in output.splitlines():
        words = line.strip().split(",")[0].split()
        first = words[0].strip('"') if words else ""
        if _METRIC_NAME.fullmatch(first):
            names.add(first)
    if not names:
        raise ValueError(f"no metric names in ncu's --query-metrics output:\n{output[-2000:]}")
    return names


def query_metrics(timeout: float = 300) -> set[str]:
    """The metric names (base names, e.g. `dram__bytes`) the installed ncu knows for this machine's GPU.
    Raises CountersNotPermitted where ncu says the counters may not be read here (ERR_NVGPUCTRPERM)."""
    done = subprocess.run([tool("ncu"), "--query-metrics"], capture_output=True, text=True, timeout=timeout)
    _refuse_if_not_permitted(done.stdout + done.stderr)  # its list of names never contains the code
    if done.returncode != 0:
        raise RuntimeError(f"ncu --query-metrics exited with {done.returncode}:\n{(done.stdout + done.stderr)[-3000:]}")
    return parse_metric_list(done.stdout)


def unknown_metrics(names: Sequence[str], known: set[str]) -> list[str]:
    """The names in `names` that neither appear in `known` nor have their base name there (the part before the
    first dot: `dram__bytes` of `dram__bytes.sum`). Launch statistics (NOT_QUERIED) are not checked."""
    return [n for n in names if not n.startswith(NOT_QUERIED) and n not in known and n.split(".")[0] not in known]


def require_metrics(names: Sequence[str], known: set[str] | None = None) -> int:
    """Raise ValueError naming every metric of `names` the installed ncu does not know (`known`: the names
    `query_metrics()` returns, asked for when None), so that a misspelt name is found before a long profile.
    Returns how many names were checked (launch statistics are left to ncu itself)."""
    known = query_metrics() if known is None else known
    missing = unknown_metrics(names, known)
    if missing:
        raise ValueError(f"the installed ncu does not know {len(missing)} of these metrics: {', '.join(missing)} "
                         f"(`ncu --query-metrics` lists the names it knows; fix them in the notebook's metric dict)")
    return sum(not n.startswith(NOT_QUERIED) for n in names)


# ----------------------------------------------------------------------------- the child process


def cuda_functions_code(*functions) -> str:
    """Python source that defines, in a child process, each `%%cuda` function (a `gpu_ml.cuda.CudaFunction`) under
    its own name, loaded from the library the notebook built (its path is `fn.library`, the cell's source beside
    it): profile the very build the notebook checked, without compiling again."""
    lines = ["from pathlib import Path as _Path", "from gpu_ml.cuda import load_library as _load_library"]
    for fn in functions:
        library = Path(fn.library)
        if not fn.name.isidentifier():
            raise ValueError(f"{fn.name!r} is not a Python name")
        lines.append(f"{fn.name} = _load_library(_Path({str(library)!r}), "
                     f"_Path({str(library.with_name('cell.cu'))!r}).read_text())[{fn.name!r}]")
    return "\n".join(lines) + "\n"


def group_launches(table: Mapping[tuple[int, str], Mapping[str, float | str]],
                   patterns: Mapping[str, str]) -> dict[str, list[Mapping[str, float | str]]]:
    """{name: the rows of `table` (`by_kernel`'s) whose kernel name the regex patterns[name] finds, in launch
    order}. Every launch must match exactly one pattern and every pattern at least one launch: anything else
    raises ValueError naming the kernels, so that a renamed or unexpected kernel cannot be counted wrongly."""
    compiled = {name: re.compile(p) for name, p in patterns.items()}
    groups: dict[str, list[Mapping[str, float | str]]] = {name: [] for name in patterns}
    for (launch, kernel), row in sorted(table.items()):
        hits = [name for name, p in compiled.items() if p.search(kernel)]
        if len(hits) != 1:
            raise ValueError(f"launch {launch} ({kernel}) matches {len(hits)} of the patterns "
                             f"({', '.join(hits) or 'none'}): each launch must match exactly one")
        groups[hits[0]].append(row)
    empty = [name for name, rows in groups.items() if not rows]
    if empty:
        raise ValueError(f"no profiled launch matched {', '.join(empty)}: kernels profiled were "
                         f"{sorted({k for _, k in table})}")
    return groups


def total(rows: Sequence[Mapping[str, float | str]], metric: str) -> float:
    """The sum of `metric` over `rows` (one entry's launches); ValueError if a row lacks it or has no number."""
    values = [row.get(metric) for row in rows]
    if not all(isinstance(v, (int, float)) for v in values):
        raise ValueError(f"{metric}: not a number in every launch: {values}")
    return float(sum(values))


# ----------------------------------------------------------------------------- reading the results


def text_table(header: Sequence[str], rows: Sequence[Sequence[object]], *, left: int = 1) -> str:
    """Rows as aligned text: the first `left` columns (names, words) left-aligned, the others (numbers)
    right-aligned, each as wide as its widest cell. Cells are printed with str(); format numbers before."""
    if any(len(r) != len(header) for r in rows):
        raise ValueError(f"every row needs {len(header)} cells, got {sorted({len(r) for r in rows})}")
    cells = [[str(c) for c in header]] + [[str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]

    def line(row: list[str]) -> str:
        padded = (c.ljust(w) if i < left else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths, strict=True)))
        return " ".join(padded).rstrip()

    return "\n".join(line(r) for r in cells)


@dataclass(frozen=True)
class Claim:
    """A lesson's claim and the counter that tests it: `holds(measured)` says whether the measured value agrees
    with `expected` (in words, e.g. "about 16.5" or "below 30%")."""

    says: str
    counter: str
    expected: str
    holds: Callable[[float], bool]


def judge(claim: Claim, measured: float | None, fmt: str = ".3g") -> str:
    """The verdict on `claim` for a `measured` value: "agrees", "does not agree: the counters show ..." (the value
    and what was expected), or "not measured" (None: no GPU or no ncu). Computed, never written by hand, so that
    the verdict follows the numbers of each run."""
    if measured is None:
        return "not measured"
    if claim.holds(measured):
        return "agrees"
    return f"does not agree: the counters show {format(measured, fmt)} ({claim.counter}), expected {claim.expected}"


def within(expected: float, rel: float) -> Callable[[float], bool]:
    """A `Claim.holds` for "about `expected`": true within a relative tolerance `rel` (0.1: +-10%)."""
    if expected == 0:
        return lambda value: abs(value) <= rel
    return lambda value: abs(value - expected) <= rel * abs(expected)
