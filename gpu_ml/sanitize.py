"""compute-sanitizer from Python: run a snippet of Python code, or a compiled program, under one of its tools.

`sanitize(code, tool="memcheck")` and `sanitize_program(path, tool=...)` return a `Report`: the number of errors from
the tool's summary, the child's exit status and the output, and `findings`, what each error record says (its kind, the
kernel, the source lines: `findings(output)`, which reads the tool's older and newer ways of printing them). Without a
CUDA GPU, or without compute-sanitizer (on PATH or beside nvcc), they raise first; `available()` says whether they can
run.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from gpu_ml.bench import run_child
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

    @property
    def findings(self) -> list[Finding]:
        """The error records of the output, in order (`findings`)."""
        return findings(self.output)


@dataclass(frozen=True)
class Finding:
    """One record of a compute-sanitizer report: what it says happened, in which kernel, at which source lines."""

    kind: str  # "Invalid __global__ write of size 4 bytes", "Race reported between Write access and Read access", ...
    kernel: str | None  # the kernel's name, without its parameters or template arguments; None for an API error
    locations: tuple[tuple[str, int], ...]  # (file name, line) of each source location: a race has one per access
    text: str  # the record as printed, without the "=========" margin

    @property
    def line(self) -> int | None:
        """The first source line of the record (of a race, the first access), or None without line information."""
        return self.locations[0][1] if self.locations else None

    @property
    def lines(self) -> tuple[int, ...]:
        return tuple(line for _, line in self.locations)


_MARGIN = re.compile(r"^=+ ?")
_SEVERITY = re.compile(r"^(?:Error|ERROR|Warning|WARNING|WARN|Info|INFO):\s*")
# Lines of the margin that are not error records: the banner, the summaries, the tool's notes about the program.
_NOT_RECORDS = ("COMPUTE-SANITIZER", "CUDA-MEMCHECK", "ERROR SUMMARY", "RACECHECK SUMMARY", "LEAK SUMMARY",
                "Target application returned", "process didn't terminate", "No CUDA-capable device")
# "at saxpy(float *, int)+0x90 in /path/cell.cu:12" (compute-sanitizer since 2021; "in FILE:LINE" only with -lineinfo,
# and on a line of its own in the newest versions), and the older "at 0x00000090 in /path/cell.cu:12:saxpy(float *)"
_LOCATION = re.compile(r"\bat\s+(?P<kernel>[^\s+][^+]*?)\+0x[0-9a-f]+(?:\s+in\s+(?P<file>[^\s:]+):(?P<line>\d+))?")
_LOCATION_OLD = re.compile(r"\bat\s+0x[0-9a-f]+\s+in\s+(?P<file>[^\s:]+):(?P<line>\d+):(?P<kernel>\S.*?\))(?=\s|$)")
_ACCESS = re.compile(r"\b(Read|Write) access at\b")


def kernel_name(signature: str) -> str:
    """`saxpy` from "saxpy(int, float, const float *, float *)", `reverse` from "void reverse<(int)256>(float *)"."""
    name = re.sub(r"^void\s+", "", signature.strip())
    cut = min((i for i in (name.find("("), name.find("<")) if i >= 0), default=len(name))
    return name[:cut].strip()


def findings(output: str) -> list[Finding]:
    """The error records of compute-sanitizer's output, in order. A record starts at a line of the margin
    "=========" with no indent after it and goes on over the indented lines below, up to its host backtrace;
    summaries and the program's own output are left out. A record names its kind, its kernel and source lines in
    the older or the newer layout (both are read), for example:

        ========= Invalid __global__ write of size 4 bytes
        =========     at saxpy(int, float, const float *, float *)+0x90 in /tmp/cell.cu:7
        =========     by thread (31,0,0) in block (3,0,0)
    """
    records: list[list[str]] = []
    in_backtrace = False
    for raw in output.splitlines():
        if not raw.startswith("========="):
            continue  # the program's own output
        body = _MARGIN.sub("", raw)
        if not body.strip():
            continue
        if not body[0].isspace():  # a new record
            records.append([_SEVERITY.sub("", body.strip())])
            in_backtrace = False
        elif records and not in_backtrace:
            line = body.strip()
            if line.startswith(("Saved host backtrace", "Host Frame")):
                in_backtrace = True  # the host's call stack: nothing of the kernel's from here on
            elif not line.startswith("Device Frame"):  # (older layout: repeats the location)
                records[-1].append(line)
    return [_finding(lines) for lines in records if not lines[0].startswith(_NOT_RECORDS)]


def _finding(lines: list[str]) -> Finding:
    text = " ".join(lines)
    accesses = _ACCESS.findall(text)
    if text.startswith("Race reported between") and accesses:
        kind = "Race reported between " + " and ".join(f"{a} access" for a in dict.fromkeys(accesses))
    else:
        kind = re.split(r"\s+at\s+", text, maxsplit=1)[0].strip().rstrip(".")
    kernel, locations = None, []
    matches = list(_LOCATION_OLD.finditer(text)) or list(_LOCATION.finditer(text))
    for match in matches:
        kernel = kernel or kernel_name(match["kernel"])
        if match["file"]:
            locations.append((match["file"].rsplit("/", 1)[-1], int(match["line"])))
    return Finding(kind, kernel, tuple(locations), "\n".join(lines))


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
    # alone: stopped and resumed (run_child's pause) beside the others, a racecheck run once failed (gpu-ml test,
    # 2026-12-04: "Target application returned an error"); SIGCONT makes some waits fail with EINTR (signal(7))
    done = run_child([tool("compute-sanitizer"), "--tool", tool_name, *command], timeout=timeout, alone=True)
    output = done.stdout + done.stderr
    return Report(tool_name, errors_in(output), done.returncode, output)


def sanitize(code: str, *, tool: str = "memcheck", timeout: float = 600) -> Report:
    """Run `python -c code` under `compute-sanitizer --tool TOOL` and report what it found."""
    return _run([sys.executable, "-c", code], tool, timeout)


def sanitize_program(program: str | Path, *, tool: str = "memcheck", args: Sequence[str] = (),
                     timeout: float = 900) -> Report:
    """Run a compiled program (`gpu_ml.cuda.build(source, library=False)`, or a `%%cuda` program cell's
    `cuda_program`) with the command-line arguments `args` under compute-sanitizer --tool TOOL."""
    return _run([str(program), *map(str, args)], tool, timeout)
