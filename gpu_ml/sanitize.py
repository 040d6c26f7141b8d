"""compute-sanitizer from Python: run a snippet of Python code in a child process under one of its tools.

`sanitize(code, tool="memcheck")` returns a `Report`: the number of errors from the tool's ERROR SUMMARY, the
child's exit status and the output. Without a CUDA GPU, or without compute-sanitizer on PATH, it raises first.
"""

from __future__ import annotations

import re
import subprocess
import sys
from dataclasses import dataclass

from gpu_ml.profile import tool as _tool

TOOLS = ("memcheck", "racecheck", "initcheck", "synccheck")
_SUMMARY = re.compile(r"ERROR SUMMARY: (\d+) error")


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
    """The error count of compute-sanitizer's `ERROR SUMMARY: N errors` line (the last one, if several)."""
    found = _SUMMARY.findall(output)
    if not found:
        raise ValueError("no 'ERROR SUMMARY' line in compute-sanitizer's output: did the tool run?\n" + output[-2000:])
    return int(found[-1])


def sanitize(code: str, *, tool: str = "memcheck", timeout: float = 600) -> Report:
    """Run `python -c code` under `compute-sanitizer --tool TOOL` and report what it found."""
    if tool not in TOOLS:
        raise ValueError(f"tool must be one of {', '.join(TOOLS)}, got {tool!r}")
    command = [_tool("compute-sanitizer"), "--tool", tool, sys.executable, "-c", code]
    done = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    output = done.stdout + done.stderr
    return Report(tool, errors_in(output), done.returncode, output)
