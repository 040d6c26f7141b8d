"""Headline figures recorded by GPU runs of the notebooks, and the README table built from them."""

from __future__ import annotations

import datetime
import json
import re
from pathlib import Path

try:
    import fcntl  # POSIX: a lock around the read-modify-write of a results file
except ImportError:  # Windows
    fcntl = None

from gpu_ml.env import emulated, has_gpu, versions

START, END = "<!-- results:start -->", "<!-- results:end -->"
REFERENCE_GPUS = ("H100", "H200")  # the GPU class the performance bars are calibrated on
REFERENCE_RESULTS = "nvidia-h200.json"  # the reference run's recorded figures, under results/


def project_root(start: Path | None = None) -> Path:
    """The folder holding pyproject.toml, searched upward from `start` (default: cwd)."""
    here = (start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        if (folder / "pyproject.toml").exists():
            return folder
    raise FileNotFoundError(f"no pyproject.toml above {here}: run from inside the project")


def slug(name: str) -> str:
    """A GPU name as a file name: "NVIDIA H200" -> "nvidia-h200"."""
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")


def record(
    notebook: str,
    metric: str,
    value: float,
    unit: str,
    *,
    baseline: str = "",
    ratio: float | None = None,
    sizes: str = "",
    root: Path | None = None,
) -> None:
    """Store one headline figure of a GPU run in results/<gpu>.json (replacing the same metric) and say so.

    On a CPU-only run nothing is stored (the figures would mean nothing), nor under GPU_ML_EMULATE (figures of
    the host GPU running a smaller one's code paths, which belong to neither).
    """
    if not has_gpu():
        print(f"not recorded (CPU run): {metric}")
        return
    if emulated() is not None:
        print(f"not recorded (GPU_ML_EMULATE run): {metric}")
        return
    import torch

    gpu = torch.cuda.get_device_name()
    entry = {
        "notebook": notebook,
        "metric": metric,
        "value": value,
        "unit": unit,
        "baseline": baseline,
        "ratio": ratio,
        "sizes": sizes,
        "gpu": gpu,
        "versions": versions(),
        "date": datetime.date.today().isoformat(),
    }
    path = project_root(root) / "results" / f"{slug(gpu)}.json"
    path.parent.mkdir(exist_ok=True)
    with open(path.with_suffix(".lock"), "w") as lock:  # notebooks on several GPUs (gpu-ml test) record at once
        if fcntl is not None:
            fcntl.flock(lock, fcntl.LOCK_EX)
        entries = json.loads(path.read_text()) if path.exists() else []
        entries = [e for e in entries if (e["notebook"], e["metric"]) != (notebook, metric)] + [entry]
        entries.sort(key=lambda e: (e["notebook"], e["metric"]))
        path.write_text(json.dumps(entries, indent=1) + "\n")
    shown = f" ({ratio:.2f}x {baseline})" if ratio is not None else ""
    print(f"recorded: {metric} = {value:.4g} {unit}{shown} on {gpu}")


def on_reference_gpu() -> bool:
    """True on an H100 or H200: the GPU class on which the curriculum's performance bars are asserted (not under
    GPU_ML_EMULATE, where an H200 takes a smaller GPU's code paths)."""
    if not has_gpu() or emulated() is not None:
        return False
    import torch

    name = torch.cuda.get_device_name()
    return any(re.search(rf"\b{gpu}\b", name) for gpu in REFERENCE_GPUS)


def reference_ratio(notebook: str, metric: str, root: Path | None = None) -> float | None:
    """The ratio the reference run recorded for (notebook, metric) in results/, or None."""
    path = project_root(root) / "results" / REFERENCE_RESULTS
    entries = json.loads(path.read_text()) if path.exists() else []
    return next((e["ratio"] for e in entries if (e["notebook"], e["metric"]) == (notebook, metric)), None)


def bar(what: str, ratio: float, *, at_least: float | None = None, at_most: float | None = None,
        reference: tuple[str, str] | None = None, root: Path | None = None) -> bool:
    """A performance bar: `ratio` must be >= at_least (and/or <= at_most). Returns whether it is met.

    Asserted only on the reference GPU class (H100/H200, where the bars were calibrated): a miss there
    raises AssertionError ("bar missed: ..."). On any other GPU the ratio is printed beside the one the
    reference run recorded for `reference` = (notebook, metric), and a slower GPU fails nothing.
    """
    if at_least is None and at_most is None:
        raise ValueError("bar() needs at_least or at_most")
    if at_least is not None and at_most is not None and at_least > at_most:
        raise ValueError(f"bar(): at_least {at_least} is above at_most {at_most}: no ratio could meet it")
    if ratio != ratio:  # NaN meets no bar, and would print as nan: say what went wrong
        raise ValueError(f"bar(): the ratio of {what} is NaN")
    need = " and ".join(f"{op} {v}x" for op, v in ((">=", at_least), ("<=", at_most)) if v is not None)
    met = (at_least is None or ratio >= at_least) and (at_most is None or ratio <= at_most)
    if on_reference_gpu():
        if not met:
            raise AssertionError(f"bar missed: {what} at {ratio:.3f}x (bar: {need})")
        print(f"bar met: {what} at {ratio:.3f}x (bar: {need})")
        return True
    import torch

    where = torch.cuda.get_device_name() if has_gpu() else "this machine (no GPU)"
    theirs = reference_ratio(*reference, root=root) if reference is not None else None
    shown = f"; the reference run on an H200 measured {theirs:.3f}x" if theirs is not None else ""
    print(f"{what}: {ratio:.3f}x on {where}{shown}. The bar ({need}) is asserted on an H100/H200 only"
          + ("." if met else "; this GPU misses it, which is not an error here."))
    return met


def table(root: Path | None = None) -> str:
    """A Markdown table of every recorded figure, one row per notebook and metric."""
    rows = [
        "| GPU | notebook | metric | value | vs baseline | sizes | versions, date |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for path in sorted((project_root(root) / "results").glob("*.json")):
        for e in json.loads(path.read_text()):
            ratio = f"{e['ratio']:.3f}x {e['baseline']}" if e.get("ratio") is not None else e.get("baseline", "")
            v = e["versions"]
            stamp = f"torch {v.get('torch', '?')}, triton {v.get('triton', '-')}, {e['date']}"
            rows.append(
                f"| {e['gpu']} | {e['notebook']} | {e['metric']} | {e['value']:.4g} {e['unit']} "
                f"| {ratio} | {e['sizes']} | {stamp} |"
            )
    return "\n".join(rows)


def update_readme(root: Path | None = None) -> Path:
    """Replace the README's results table (between the results markers) with `table()`."""
    readme = project_root(root) / "README.md"
    text = readme.read_text()
    if START not in text or END not in text:
        raise ValueError(f"{readme} lacks the markers {START} and {END}")
    head, rest = text.split(START, 1)
    _, tail = rest.split(END, 1)
    readme.write_text(f"{head}{START}\n{table(root)}\n{END}{tail}")
    return readme
