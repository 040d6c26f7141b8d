import math
import sys

import pytest
import torch

from gpu_ml import bench, bench_each, bench_pair, gbps, geomean, sweep, tflops
from gpu_ml import hardware as hw

BENCH = sys.modules["gpu_ml.bench"]  # the module: `gpu_ml.bench` is also the name of the function
needs_gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


def test_units():
    assert tflops(2e12, 1000) == pytest.approx(2.0)
    assert gbps(4e9, 2) == pytest.approx(2000.0)
    assert geomean([2.0, 8.0]) == pytest.approx(4.0)
    for bad in ([1.0, 0.0], [float("nan"), 1.0], []):
        with pytest.raises(ValueError, match="positive values"):
            geomean(bad)
    for rate in (gbps, tflops):
        for ms in (0.0, -1.0, float("nan")):
            with pytest.raises(ValueError, match="a time must be positive"):
                rate(1e9, ms)


def _depth() -> int:
    return BENCH._alone["depth"]


def test_bench_pair_alternates_and_takes_medians(monkeypatch):
    monkeypatch.setattr(BENCH, "has_gpu", lambda: True)
    calls, clock = [], iter([5.0, 1.0, 7.0, 2.0, 6.0, 9.0])  # baseline, ours, baseline, ours, ...
    fake = lambda fn, cudagraph: calls.append((fn(), cudagraph, _depth())) or next(clock)  # noqa: E731
    monkeypatch.setattr(BENCH, "_timed", fake)
    first = []
    count = BENCH.measurements()[0]
    assert bench_pair(lambda: first.append(_depth()) or "base", lambda: "ours") == (6.0, 2.0)
    # each called once before, beside other notebooks; then every round with the GPU alone, in one block
    assert first[0] == 0 and calls == [("base", True, 1), ("ours", True, 1)] * 3
    assert BENCH.measurements()[0] == count + 1
    with pytest.raises(ValueError, match="rounds"):
        bench_pair(lambda: None, lambda: None, rounds=0)


def test_bench_each_calls_each_fn_first_then_times_all_in_one_gpu_alone_block(monkeypatch):
    monkeypatch.setattr(BENCH, "has_gpu", lambda: True)
    timed, first = [], []
    monkeypatch.setattr(BENCH, "_timed", lambda fn, **options: timed.append((fn(), options, _depth())) or len(timed))
    count = BENCH.measurements()[0]
    fns = {key: (lambda key=key: first.append((key, _depth())) or key) for key in ("b", "a")}
    assert bench_each(fns, cudagraph=True, rep=7) == {"b": 1, "a": 2}  # in the order given
    assert first[:2] == [("b", 0), ("a", 0)]  # before the GPU is taken
    assert timed == [("b", {"cudagraph": True, "rep": 7}, 1), ("a", {"cudagraph": True, "rep": 7}, 1)]
    assert BENCH.measurements()[0] == count + 1
    assert bench_each({}) == {} and BENCH.measurements()[0] == count + 1  # nothing timed, the GPU not taken


def test_each_function_is_called_once_before_tritons_timing_not_again_inside_it(monkeypatch):
    testing = pytest.importorskip("triton.testing")
    for name in ("do_bench", "do_bench_cudagraph"):
        monkeypatch.setattr(testing, name, lambda fn, **kwargs: 1.0)
    monkeypatch.setattr(BENCH, "has_gpu", lambda: True)
    calls = []
    assert bench_each({k: (lambda k=k: calls.append(k)) for k in "ab"}, cudagraph=True) == {"a": 1.0, "b": 1.0}
    assert bench_pair(lambda: calls.append("base"), lambda: calls.append("ours")) == (1.0, 1.0)
    assert bench(lambda: calls.append("one")) == 1.0
    assert calls == ["a", "b", "base", "ours", "one"]


def test_sweep_calls_each_fn_first_then_times_all_in_one_gpu_alone_block(monkeypatch, capsys):
    monkeypatch.setattr(BENCH, "has_gpu", lambda: True)
    timed = []
    monkeypatch.setattr(BENCH, "_timed", lambda fn, cudagraph: timed.append((fn(), _depth())) or 2.0)
    first = []

    def provider(name):
        def make(n):
            return lambda: first.append((name, n, _depth())) or (name, n)

        return make

    count = BENCH.measurements()[0]
    out = sweep([1, 2], {"a": provider("a"), "b": provider("b")}, lambda n, ms: n / ms, baseline="a", unit="x")
    assert out == {"a": [0.5, 1.0], "b": [0.5, 1.0]} and "b / a: 1.000x" in capsys.readouterr().out
    assert first[:4] == [("a", 1, 0), ("b", 1, 0), ("a", 2, 0), ("b", 2, 0)]  # before the GPU is taken
    assert timed == [(("a", 1), 1), (("b", 1), 1), (("a", 2), 1), (("b", 2), 1)]
    assert BENCH.measurements()[0] == count + 1


@pytest.mark.skipif(torch.cuda.is_available(), reason="CPU behaviour")
def test_bench_refuses_without_gpu():
    with pytest.raises(RuntimeError, match="needs a CUDA GPU"):
        bench(lambda: None)
    called = []
    for refused, name in ((lambda: bench_each({"a": lambda: called.append(1)}), "bench_each"),
                          (lambda: bench_pair(lambda: called.append(1), lambda: called.append(2)), "bench_pair")):
        with pytest.raises(RuntimeError, match=f"{name}.. needs a CUDA GPU"):
            refused()
    assert not called  # refused before any function runs
    with pytest.raises(RuntimeError, match="needs a CUDA GPU"):
        sweep([1], {"a": lambda n: lambda: None}, lambda n, ms: ms, baseline="a", unit="ms")


@needs_gpu
def test_bench_and_sweep_on_gpu(capsys):
    x = torch.randn(1 << 20, device="cuda")
    ms = bench(lambda: x * 2)
    assert 0 < ms < 100
    each = bench_each({"mul": lambda: x * 2, "add": lambda: x + x}, cudagraph=True)
    assert list(each) == ["mul", "add"] and all(0 < t < 100 for t in each.values())
    assert 0 < bench(lambda: x * 2, cudagraph=True) < 100
    providers = {"mul": lambda n: lambda: x[:n] * 2, "add": lambda n: lambda: x[:n] + x[:n]}
    out = sweep([1 << 16, 1 << 20], providers, lambda n, ms: gbps(8 * n, ms), baseline="mul", unit="GB/s")
    assert len(out["add"]) == 2 and all(v > 0 for v in out["add"])
    assert "add / mul" in capsys.readouterr().out
    with pytest.raises(ValueError, match="baseline"):
        sweep([1], providers, lambda n, ms: ms, baseline="nope", unit="ms")


def test_hardware_lookup():
    assert hw.lookup("NVIDIA H200").sms == 132
    assert hw.lookup("NVIDIA H100 PCIe").name == "NVIDIA H100 PCIe"
    assert hw.lookup("NVIDIA H100 80GB HBM3").name == "NVIDIA H100 SXM"
    assert hw.lookup("NVIDIA A100-SXM4-40GB").bandwidth_gbs == 1555
    assert hw.lookup("Tesla T4").name == "NVIDIA T4"
    assert hw.lookup("NVIDIA L40S") is None  # not mistaken for an L4
    assert hw.lookup("Some Other GPU") is None
    for name in ("H200", "H100", "A100", "L4", "T4", "RTX 4090"):
        assert hw.lookup(name) is not None
    # the 16-bit dtype a notebook quotes: a T4 (and its emulation, "Tesla T4 (emulated)") has no bf16
    assert hw.lookup("Tesla T4 (emulated)").half == "fp16" and hw.lookup("NVIDIA H200").half == "bf16"


def test_roofline():
    h200 = hw.GPUS["H200"]
    assert h200.ridge("bf16") == pytest.approx(989.5e12 / 4.8e12)
    assert hw.attainable(h200, "bf16", 1.0) == pytest.approx(4.8)
    assert hw.attainable(h200, "bf16", 1e4) == 989.5
    with pytest.raises(KeyError, match="bf16"):
        hw.GPUS["T4"].peak("bf16")
    ax = hw.plot_roofline(h200, points={"x": (10.0, 40.0)})
    assert math.isclose(ax.get_lines()[0].get_ydata()[-1], 989.5)


def test_spec_for_falls_back_to_the_reference():
    from gpu_ml.env import Env

    h200 = Env(mode="gpu", device="NVIDIA H200", capability=(9, 0), sm_count=132)
    unknown = Env(mode="gpu", device="NVIDIA Mystery 9000", capability=(9, 0), sm_count=1)
    cpu = Env(mode="cpu", device="CPU: Triton interpreter, CUDA compile-only")
    assert hw.spec_for(h200) is hw.GPUS["H200"]
    assert hw.spec_for(Env(mode="gpu", device="Tesla T4", capability=(7, 5), sm_count=40)) is hw.GPUS["T4"]
    assert hw.spec_for(unknown) is hw.GPUS["H200"] and hw.spec_for(cpu, "A100") is hw.GPUS["A100"]
    assert hw.spec_for(unknown, None) is None and hw.spec_for(cpu, None) is None
    with pytest.raises(KeyError):
        hw.spec_for(cpu, "no such GPU")


@pytest.mark.skipif(torch.cuda.is_available(), reason="CPU behaviour")
def test_measure_peaks_refuses_without_gpu():
    with pytest.raises(RuntimeError, match="needs a CUDA GPU"):
        hw.measure_peaks()
    with pytest.raises(RuntimeError, match="needs a CUDA GPU"):
        hw.copy_bandwidth()
    with pytest.raises(RuntimeError, match="needs a CUDA GPU"):
        hw.read_bandwidth()


def test_roofline_ms():
    assert hw.roofline_ms(2e12, 1e9, peak_tflops=1000, bw_gbs=1000) == pytest.approx(2.0)  # compute bound
    assert hw.roofline_ms(1e12, 4e9, peak_tflops=1000, bw_gbs=1000) == pytest.approx(4.0)  # memory bound


@needs_gpu
def test_measure_peaks_on_gpu():
    from gpu_ml.env import Env

    copy_gbs, matmul_tflops = hw.measure_peaks(n=2048, copy_bytes=2**28)
    spec = hw.spec_for(Env(mode="gpu", device=torch.cuda.get_device_name(), capability=(0, 0), sm_count=1))
    assert 0 < copy_gbs < 1.5 * spec.bandwidth_gbs  # a copy cannot beat the memory by much (L2 aside)
    assert 0 < matmul_tflops < 1.2 * spec.peak("bf16")
    assert 0 < hw.copy_bandwidth(2**28) < 1.5 * spec.bandwidth_gbs
    assert 0 < hw.read_bandwidth(2**28) < 1.5 * spec.bandwidth_gbs
