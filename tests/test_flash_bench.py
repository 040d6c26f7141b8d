import matplotlib.pyplot as plt
import pytest
import torch

from gpu_ml import flash_bench
from gpu_ml.flash_bench import BENCH_N, HIDDEN, TOKENS, bench_flops, bench_inputs, fused_backend, ratios, show_race


def test_bench_flops_is_flash_attention_count():
    for n in BENCH_N:
        b, h = TOKENS // n, HIDDEN // 128
        assert bench_flops(n, 128, False) == 4 * b * h * n * n * 128
        assert bench_flops(n, 128, True) == 2 * b * h * n * n * 128  # half, not n (n + 1) / 2


def test_bench_inputs_shapes_and_repeatable():
    q, k, v, do = bench_inputs(1024, 64, count=4, dtype=torch.float32, requires_grad=True, device="meta")
    assert q.shape == (TOKENS // 1024, HIDDEN // 64, 1024, 64) and q.requires_grad and do.dtype == torch.float32
    small = [bench_inputs(TOKENS, HIDDEN, dtype=torch.float32, device="cpu") for _ in range(2)]
    assert all(torch.equal(a, b) for a, b in zip(*small, strict=True))  # seeded: the same every call


def _rows(ours=2.0, flash=1.0):
    row = {"ours": ours, "FLASH": flash, "cuDNN": float("nan")}
    return {(n, causal): dict(row) for n in BENCH_N for causal in (False, True)}


def test_ratios_skip_backends_that_refused():
    rows = _rows()
    assert ratios(rows, "FLASH") == [2.0] * 6
    assert ratios(rows, "cuDNN") == []


def test_show_race_prints_and_plots(capsys):
    fig, axes = plt.subplots(1, 2)
    show_race(_rows(), 128, axes, "backward", ylabel="TFLOP/s (2.5 x forward FLOPs)")
    out = capsys.readouterr().out
    assert "d = 128: backward TFLOP/s" in out and out.count("2.000x") == 6
    assert axes[1].get_title() == "backward, bf16, d = 128, causal"
    assert axes[0].get_ylabel() == "TFLOP/s (2.5 x forward FLOPs)" and len(axes[0].lines) == 3
    plt.close(fig)
    with pytest.raises(KeyError):
        show_race({}, 128, axes, "forward")


def test_show_race_against_another_baseline_and_dtype(capsys):
    fig, axes = plt.subplots(1, 2)
    rows = {key: {**row, "EFFICIENT": row["ours"] / 4} for key, row in _rows().items()}
    show_race(rows, 64, axes, "forward", baseline="EFFICIENT", dtype="fp16")
    out = capsys.readouterr().out
    assert "ours / EFFICIENT per point" in out and out.count("4.000x") == 6
    assert axes[0].get_title() == "forward, fp16, d = 64, not causal"
    plt.close(fig)


def test_fused_backend_is_flash_from_8_0_and_efficient_below(monkeypatch, capsys):
    monkeypatch.setattr(flash_bench, "capability", lambda: (9, 0))
    assert fused_backend() == "FLASH" and capsys.readouterr().out == ""
    monkeypatch.setattr(flash_bench, "capability", lambda: None)  # CPU: the lesson's text names FLASH
    assert fused_backend() == "FLASH"
    monkeypatch.setattr(flash_bench, "capability", lambda: (7, 5))
    assert fused_backend() == "EFFICIENT"
    assert "needs compute capability 8.0+ (this GPU has 7.5): its EFFICIENT backend" in capsys.readouterr().out
