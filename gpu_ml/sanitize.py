"""compute-sanitizer from Python: run a snippet of Python code, or a compiled program, under one of its tools.

`sanitize(code, tool="memcheck")` and `sanitize_program(path, tool=...)` return a `Report`: the number of errors from
the tool's summary, the child's exit status and the output. Without a CUDA GPU, or without compute-sanitizer (on PATH
or beside nvcc), they raise first; `available()` says whether they can run.
"""

from __future__ import annotations

import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from gpu_ml.env import has_gpu
from gpu_ml.profile import find, tool

TOOLS = ("memcheck", "racecheck", "initcheck", "synccheck")
# memcheck and the others end with "ERROR SUMMARY: N errors"; racecheck may say "RACECHECK SUMMARY: H hazards displayed
# (N errors, W warnings)" instead
_SUMMARY = re.compile(r"ERROR SUMMARY: (\d+) error|RACECHECK SUMMARY: \d+ hazards? displayed \((\d+) error")


@dataclass(frozen=True)
class Report:
    """What compute-sanitizer said about one run."""

    tool: str
    errors: int
    returncode: int
    output: str

    @property
    def clean(self) -> bool:
        """No error reported and the program exited with 0."""
        return self.errors == 0 and self.returncode == 0


def errors_in(output: str) -> int:
    """The error count of compute-sanitizer's summary line (`ERROR SUMMARY: N errors`, or racecheck's `RACECHECK
    SUMMARY: ... (N errors`; the last one, if several)."""
    found = [a or b for a, b in _SUMMARY.findall(output)]
    if not found:
        raise ValueError("no 'ERROR SUMMARY' line in compute-sanitizer's output: did the tool run?\n" + output[-2000:])
    return int(found[-1])


def available() -> bool:
    """Whether compute-sanitizer can run here: a CUDA GPU, and the tool on PATH or beside nvcc."""
    return has_gpu() and find("compute-sanitizer") is not None


def _run(command: list[str], tool_name: str, timeout: float) -> Report:
    if tool_name not in TOOLS:
        raise ValueError(f"tool must be one of {', '.join(TOOLS)}, got {tool_name!r}")
    done = subprocess.run([tool("compute-sanitizer"), "--tool", tool_name, *command], capture_output=True, text=True,
                          timeout=timeout)
    output = done.stdout + done.stderr
    return Report(tool_name, errors_in(output), done.returncode, output)


def sanitize(code: str, *, tool: str = "memcheck", timeout: float = 600) -> Report:
    """Run `python -c code` under `compute-sanitizer --tool TOOL` and report what it found."""
    return _run([sys.executable, "-c", code], tool, timeout)


def sanitize_program(program: str | Path, *, tool: str = "memcheck", timeout: float = 900) -> Report:
    """Run a compiled program (`gpu_ml.cuda.build(source, library=False)`) under compute-sanitizer --tool TOOL."""
    return _run([str(program)], tool, timeout)
