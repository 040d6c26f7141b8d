"""The GPU's side of a `torch.profiler` trace: when the kernels (and copies) ran, and the gaps between them.

`torch.profiler.profile(...).export_chrome_trace(path)` writes every event as Chrome's trace format: complete events
("ph": "X") with a category ("cat"), a start "ts" and a duration "dur" in microseconds. The GPU's work is in the
categories "kernel", "gpu_memcpy" and "gpu_memset"; the host's launches are "cuda_runtime" events (cudaLaunchKernel,
cudaGraphLaunch) or "cuda_driver" ones (cuLaunchKernel). `gpu_spans(trace)` reads the first kind, `launches(trace)` the
second, `busy(spans)` tells how the GPU spent the span from the first start to the last end.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

GPU_CATEGORIES = ("kernel", "gpu_memcpy", "gpu_memset")
HOST_CATEGORIES = ("cuda_runtime", "cuda_driver")


@dataclass(frozen=True)
class Span:
    """One piece of GPU work: its name, start and duration in microseconds, and the stream it ran on."""

    name: str
    start: float
    duration: float
    stream: int | None = None
    category: str = "kernel"

    @property
    def end(self) -> float:
        return self.start + self.duration


@dataclass(frozen=True)
class Busy:
    """How the GPU spent the time from the first span's start to the last one's end (microseconds)."""

    span: float  # last end - first start
    busy: float  # time during which at least one span ran (overlapping spans count once)
    gaps: tuple[float, ...]  # every interval in which nothing ran, in order

    @property
    def idle(self) -> float:
        return self.span - self.busy

    @property
    def idle_fraction(self) -> float:
        return self.idle / self.span if self.span > 0 else 0.0


def events(trace: Mapping[str, Any] | str | Path) -> list[dict]:
    """The complete events of a Chrome trace: a dict as json.load gives it, or the path of the file."""
    if isinstance(trace, (str, Path)):
        trace = json.loads(Path(trace).read_text())
    if not isinstance(trace, Mapping) or not isinstance(trace.get("traceEvents"), list):
        raise ValueError("not a Chrome trace: expected a dict with a 'traceEvents' list (export_chrome_trace's file)")
    return [e for e in trace["traceEvents"] if isinstance(e, dict) and e.get("ph") == "X" and "dur" in e]


def gpu_spans(trace: Mapping[str, Any] | str | Path, categories: Iterable[str] = GPU_CATEGORIES) -> list[Span]:
    """The GPU work of a trace (kernels, copies, memsets), sorted by start."""
    wanted = {c.lower() for c in categories}
    spans = [Span(str(e.get("name", "")), float(e["ts"]), float(e["dur"]), (e.get("args") or {}).get("stream"),
                  str(e.get("cat", "")).lower())
             for e in events(trace) if str(e.get("cat", "")).lower() in wanted]
    return sorted(spans, key=lambda s: (s.start, s.end))


def launches(trace: Mapping[str, Any] | str | Path) -> Counter:
    """How many times the host called each launch-like CUDA API in the trace (cudaLaunchKernel, cudaGraphLaunch,
    cuLaunchKernel, ...: the runtime and driver calls whose name contains "Launch")."""
    return Counter(str(e.get("name")) for e in events(trace)
                   if str(e.get("cat", "")).lower() in HOST_CATEGORIES and "Launch" in str(e.get("name", "")))


def busy(spans: Iterable[Span]) -> Busy:
    """The span from the first start to the last end, the time in it when some span ran (the union of the
    intervals: overlapping spans count once), and the gaps in which none ran."""
    ordered = sorted(spans, key=lambda s: s.start)
    if not ordered:
        return Busy(0.0, 0.0, ())
    total, gaps = 0.0, []
    first, (start, end) = ordered[0].start, (ordered[0].start, ordered[0].end)
    for s in ordered[1:]:
        if s.start > end:  # a gap: close the current run of overlapping spans
            total += end - start
            gaps.append(s.start - end)
            start, end = s.start, s.end
        else:
            end = max(end, s.end)
    total += end - start
    return Busy(end - first, total, tuple(gaps))  # runs of spans come in order: the last one ends last
