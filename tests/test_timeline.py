"""gpu_ml.timeline: the GPU side of a torch.profiler Chrome trace, read from recorded-format events (and, on a GPU, from
a real trace)."""

from __future__ import annotations

import json

import pytest
import torch

from gpu_ml import timeline


def _trace(*events):
    return {"traceEvents": [{"ph": "X", **e} for e in events] + [{"ph": "M", "name": "process_name"}]}


TRACE = _trace(
    {"cat": "cpu_op", "name": "aten::addmm", "ts": 0.0, "dur": 40.0},
    {"cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": 1.0, "dur": 5.0},
    {"cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": 8.0, "dur": 5.0},
    {"cat": "cuda_runtime", "name": "cudaMemcpyAsync", "ts": 14.0, "dur": 3.0},
    {"cat": "cuda_driver", "name": "cuLaunchKernel", "ts": 20.0, "dur": 4.0},
    {"cat": "kernel", "name": "gemm", "ts": 10.0, "dur": 6.0, "args": {"stream": 7}},
    {"cat": "Kernel", "name": "relu", "ts": 20.0, "dur": 2.0, "args": {"stream": 7}},
    {"cat": "gpu_memcpy", "name": "Memcpy DtoD", "ts": 21.0, "dur": 4.0, "args": {"stream": 9}},
    {"cat": "gpu_memset", "name": "Memset", "ts": 25.0, "dur": 1.0},
    {"cat": "kernel", "name": "sgd", "ts": 30.5, "dur": 1.5},
)


def test_gpu_spans_and_launches_are_read_from_a_trace(tmp_path):
    spans = timeline.gpu_spans(TRACE)
    assert [(s.name, s.start, s.end, s.stream, s.category) for s in spans] == [
        ("gemm", 10.0, 16.0, 7, "kernel"), ("relu", 20.0, 22.0, 7, "kernel"),
        ("Memcpy DtoD", 21.0, 25.0, 9, "gpu_memcpy"), ("Memset", 25.0, 26.0, None, "gpu_memset"),
        ("sgd", 30.5, 32.0, None, "kernel")]
    assert [s.name for s in timeline.gpu_spans(TRACE, categories=("kernel",))] == ["gemm", "relu", "sgd"]
    assert timeline.launches(TRACE) == {"cudaLaunchKernel": 2, "cuLaunchKernel": 1}
    path = tmp_path / "trace.json"
    path.write_text(json.dumps(TRACE))
    assert timeline.gpu_spans(path) == spans and timeline.gpu_spans(str(path)) == spans


def test_busy_merges_overlaps_and_measures_the_gaps():
    b = timeline.busy(timeline.gpu_spans(TRACE))
    assert b.span == 22.0 and b.busy == 6.0 + 6.0 + 1.5  # 20..26 once, although relu and the copy overlap
    assert b.gaps == (4.0, 4.5) and b.idle == 8.5 and b.idle_fraction == pytest.approx(8.5 / 22.0)
    touching = [timeline.Span("a", 0.0, 2.0), timeline.Span("b", 2.0, 1.0)]
    assert timeline.busy(touching) == timeline.Busy(3.0, 3.0, ())
    nested = [timeline.Span("outer", 5.0, 20.0), timeline.Span("inner", 7.0, 2.0), timeline.Span("late", 30.0, 5.0)]
    assert timeline.busy(reversed(nested)) == timeline.Busy(30.0, 25.0, (5.0,))
    empty = timeline.busy([])
    assert empty == timeline.Busy(0.0, 0.0, ()) and empty.idle_fraction == 0.0


def test_what_is_not_a_chrome_trace_is_refused():
    with pytest.raises(ValueError, match="not a Chrome trace"):
        timeline.gpu_spans({"events": []})
    with pytest.raises(ValueError, match="not a Chrome trace"):
        timeline.events([1, 2])


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_a_real_profile_has_kernels_and_launches(tmp_path):
    x = torch.randn(1 << 20, device="cuda")
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU,
                                            torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(3):
            x = torch.relu(x * 2.0)
        torch.cuda.synchronize()
    prof.export_chrome_trace(str(tmp_path / "trace.json"))
    spans = timeline.gpu_spans(tmp_path / "trace.json")
    assert len([s for s in spans if s.category == "kernel"]) >= 6
    assert sum(timeline.launches(tmp_path / "trace.json").values()) >= 6
    b = timeline.busy(spans)
    assert 0 < b.busy <= b.span
