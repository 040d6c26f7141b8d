"""The exported kernels (`gpu_ml.kernels`), called directly on awkward inputs, as quack and
flash-attention test theirs: sizes off the block, one row, one column, empty, views, extreme values.
This file: activations, cross-entropy, softmax, LayerNorm/RMSNorm and the CUDA track's kernels;
tests/test_kernels_matmul_attention.py: matmul, the linear layer and FlashAttention.

On a CPU they run in Triton's interpreter at small sizes (conftest sets TRITON_INTERPRET=1 before
anything imports Triton); on a GPU every dtype runs, bf16 included. The accuracy criterion
(tests/kernel_checks.py) is flash-attention's: our error against a float64 reference at most twice
PyTorch's own error in the same dtype, plus a small floor.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from kernel_checks import DEVICE, FLOATS, GPU, assert_as_accurate_as_torch

from gpu_ml import cuda as cu
from gpu_ml.kernels.triton import activations as act
from gpu_ml.kernels.triton import cross_entropy as ce
from gpu_ml.kernels.triton import layernorm as ln
from gpu_ml.kernels.triton import softmax as sm

# --- activations (triton/03-nn-components/01_activations) -------------------------------------

ACT_REFERENCE = {
    "relu": F.relu,
    "gelu": F.gelu,
    "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"),
    "silu": F.silu,
}


def _torch_act(name, x, dy):
    xr = x.detach().clone().requires_grad_()
    y = ACT_REFERENCE[name](xr)
    (dx,) = torch.autograd.grad(y, xr, dy)
    return y.detach(), dx


@pytest.mark.parametrize("name", act.ACTIVATIONS)
@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("shape", [(0,), (1,), (1023,), (1025,), (2049,), (3, 5, 129), (1, 700), (700, 1)])
def test_activation_forward_backward(name, dtype, shape):
    x = (3 * torch.randn(shape, device=DEVICE)).to(dtype)
    dy = torch.randn(shape, device=DEVICE).to(dtype)
    y64, dx64 = _torch_act(name, x.double(), dy.double())
    y_t, dx_t = _torch_act(name, x, dy)
    assert_as_accurate_as_torch(act.act_forward(x, name), y_t, y64, name=f"{name} forward")
    assert_as_accurate_as_torch(act.act_backward(x, dy, name), dx_t, dx64, name=f"{name} backward")


@pytest.mark.parametrize("name", act.ACTIVATIONS)
def test_activation_extreme_inputs_match_float64(name):
    big = [0.0, 1e-4, 1.0, 20.0, 100.0, 1e4, 1e20, 3e38]
    x = torch.tensor([-v for v in big] + big + [float("inf"), float("-inf"), float("nan")], device=DEVICE)
    ones = torch.ones_like(x)
    with np.errstate(all="ignore"):  # the interpreter's NumPy warns on inf * 0, as torch computes it too
        y, dx = act.act_forward(x, name), act.act_backward(x, ones, name)
    y64, dx64 = _torch_act(name, x.double(), ones.double())
    assert y[x.isfinite()].isfinite().all() and dx[x.isfinite()].isfinite().all()
    torch.testing.assert_close(y.double().cpu(), y64.cpu(), rtol=1e-5, atol=1e-6, equal_nan=True)
    torch.testing.assert_close(dx.double().cpu(), dx64.cpu(), rtol=1e-5, atol=1e-6, equal_nan=True)


def test_activation_autograd_through_views():
    x = torch.randn(65, 33, device=DEVICE).T.requires_grad_()  # a transposed view: copied, gradient flows back
    act.activation(x, "gelu").sum().backward()
    xr = x.detach().clone().requires_grad_()
    F.gelu(xr).sum().backward()
    torch.testing.assert_close(x.grad, xr.grad, rtol=1e-5, atol=1e-6)


def test_activation_refusals():
    x = torch.randn(4, 6, device=DEVICE)
    with pytest.raises(ValueError, match="unknown activation"):
        act.act_forward(x, "tanh")
    with pytest.raises(ValueError, match="must be contiguous"):
        act.act_forward(x.T, "gelu")
    with pytest.raises(TypeError, match="dtype torch.float64"):
        act.act_forward(x.double(), "gelu")
    with pytest.raises(ValueError, match="shapes differ"):
        act.act_backward(x, x[:3], "silu")
    with pytest.raises(ValueError, match="power of two"):
        act.act_forward(x, "relu", block_size=1000)


@pytest.mark.parametrize("name", act.ACTIVATIONS)
@pytest.mark.parametrize("block", [16, 128, 4096])
def test_activation_block_sizes(name, block):
    """The block size changes the grid, never the result (01_activations checks one such block per activation)."""
    x, dy = 3 * torch.randn(301, device=DEVICE), torch.randn(301, device=DEVICE)
    y64, dx64 = _torch_act(name, x.double(), dy.double())
    y_t, dx_t = _torch_act(name, x, dy)
    assert_as_accurate_as_torch(act.act_forward(x, name, block_size=block), y_t, y64, name=f"{name} {block} forward")
    assert_as_accurate_as_torch(act.act_backward(x, dy, name, block_size=block), dx_t, dx64,
                                name=f"{name} {block} backward")


# --- cross-entropy (triton/03-nn-components/05_cross_entropy) ---------------------------------



def _ce_reference(x, t, dtype=torch.float64):
    xr = x.detach().to(dtype).requires_grad_()
    loss = F.cross_entropy(xr, t)
    loss.backward()
    return loss.detach(), xr.grad


def _ce_ours(x, t, **kwargs):
    xo = x.detach().clone().requires_grad_()
    loss = ce.cross_entropy(xo, t, **kwargs)
    loss.backward()
    return loss.detach(), xo.grad


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize(("rows", "V", "block_v"), [(1, 1, None), (3, 2, None), (5, 17, 16), (4, 1000, 256),
                                                    (2, 5003, 1024), (0, 10, None)])
def test_cross_entropy_matches_torch(dtype, rows, V, block_v):
    x = (3 * torch.randn(rows, V, device=DEVICE)).to(dtype)
    t = torch.randint(0, V, (rows,), device=DEVICE)
    if rows > 2:
        t[1] = -100
    loss, grad = _ce_ours(x, t, block_v=block_v)
    loss64, grad64 = _ce_reference(x, t)
    loss_t, grad_t = _ce_reference(x, t, dtype)
    assert_as_accurate_as_torch(loss, loss_t, loss64, name="loss")
    assert_as_accurate_as_torch(grad, grad_t, grad64, name="grad")


@pytest.mark.parametrize(("V", "block_v"), [(300, 64), (5003, 1024)])
def test_cross_entropy_masked_vocabulary(V, block_v):
    """-inf logits (constrained decoding): a whole first block, the last block only, every other class."""
    x = 3 * torch.randn(4, V, device=DEVICE)
    x[0, :block_v] = float("-inf")
    x[1, V - 7 :] = float("-inf")
    x[2, ::2] = float("-inf")
    t = torch.tensor([V - 1, 0, 1, 5], device=DEVICE)
    loss, grad = _ce_ours(x, t, block_v=block_v)
    loss64, grad64 = _ce_reference(x, t)
    assert torch.isfinite(loss) and torch.isfinite(grad).all()
    torch.testing.assert_close(loss.double(), loss64, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(grad.double(), grad64, rtol=1e-4, atol=1e-7)


def test_cross_entropy_all_inf_row_is_nan_like_torch():
    x = torch.randn(3, 100, device=DEVICE)
    x[1] = float("-inf")
    t = torch.tensor([1, 2, 3], device=DEVICE)
    loss, grad = _ce_ours(x, t, block_v=32)
    loss64, grad64 = _ce_reference(x, t)
    assert torch.isnan(loss) and torch.isnan(loss64)
    torch.testing.assert_close(grad.double(), grad64, rtol=1e-4, atol=1e-7, equal_nan=True)


def test_cross_entropy_views_and_refusals():
    wide = torch.randn(16, 107, device=DEVICE)
    x, t = wide[:, :100], torch.randint(0, 100, (32,), device=DEVICE)[::2]  # strided rows and targets
    loss, grad = _ce_ours(x, t)
    loss64, grad64 = _ce_reference(x, t)
    torch.testing.assert_close(loss.double(), loss64, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(grad.double(), grad64, rtol=1e-4, atol=1e-7)
    with pytest.raises(ValueError, match="2-D"):
        ce.cross_entropy(x[0], t[:1])
    with pytest.raises(TypeError, match="supported: torch.int64"):
        ce.cross_entropy(x, t.int())
    with pytest.raises(ValueError, match="V = 0"):
        ce.cross_entropy(torch.empty(4, 0, device=DEVICE), t[:4])
    with pytest.raises(ValueError, match="contiguous"):
        ce.cross_entropy(wide.T[:16], t)


# --- softmax (triton/03-nn-components/02_softmax) ---------------------------------------------


SOFTMAX = {
    "fused": sm.softmax_fused,
    "online": lambda x: sm.softmax_online(x, block=64),  # rows of more than 64 columns take several blocks
    "dispatch": sm.softmax,
}


def _softmax_check(fn, x, name):
    assert_as_accurate_as_torch(fn(x), torch.softmax(x, dim=-1), torch.softmax(x.double(), dim=-1), name=name)


@pytest.mark.parametrize("kind", SOFTMAX)
@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("shape", [(1, 1), (7, 3), (1, 1000), (5, 1025), (300, 1), (0, 10), (3, 0), (2, 4099)])
def test_softmax_matches_torch(kind, dtype, shape):
    x = (3 * torch.randn(shape, device=DEVICE)).to(dtype)
    _softmax_check(SOFTMAX[kind], x, f"{kind} {shape}")


@pytest.mark.parametrize("kind", SOFTMAX)
def test_softmax_masked_and_extreme_rows(kind):
    """-inf in a whole first block, in the last block only, in every third column; one finite entry; +-1e4;
    a row of all -inf gives NaN, as torch's does."""
    x = 3 * torch.randn(6, 300, device=DEVICE)
    x[0, :64] = float("-inf")
    x[1, 290:] = float("-inf")
    x[2, ::3] = float("-inf")
    x[3] = float("-inf")
    x[3, 299] = 2.0  # a single finite entry: its output is exactly 1
    x[4] = torch.linspace(-1e4, 1e4, 300)
    x[5] = float("-inf")
    with np.errstate(invalid="ignore", divide="ignore"):  # the interpreter computes the all -inf row in NumPy
        y = SOFTMAX[kind](x)
    assert y[3, 299].item() == 1.0 and torch.isnan(y[5]).all()
    assert_as_accurate_as_torch(y[:5], torch.softmax(x[:5], dim=-1), torch.softmax(x[:5].double(), dim=-1),
                                name=kind)


@pytest.mark.parametrize("kind", SOFTMAX)
def test_softmax_views(kind):
    base = torch.randn(40, 1200, device=DEVICE)
    for x in (base[:, 100:1100], base[::2], base[:1, :777].expand(9, 777), base[:1].t()[:5, :1]):
        _softmax_check(SOFTMAX[kind], x, f"{kind} view {tuple(x.shape)} strides {x.stride()}")


def test_softmax_persistent_grid_and_backward():
    x = torch.randn(37, 100, device=DEVICE)
    for programs in (1, 2, 64):
        _softmax_check(lambda t, p=programs: sm.softmax_fused(t, programs=p), x, f"fused on {programs} programs")
    for shape, block in (((5, 1), None), ((33, 1000), None), ((33, 1000), 64), ((0, 7), None)):
        x = torch.randn(shape, device=DEVICE, dtype=torch.float64).requires_grad_()
        w = torch.randn(shape, device=DEVICE, dtype=torch.float64)
        (torch.softmax(x, dim=-1) * w).sum().backward()
        y = torch.softmax(x.detach(), dim=-1).float()
        dx = sm.softmax_backward(y, w.float(), block=block)
        torch.testing.assert_close(dx.double(), x.grad, rtol=1e-4, atol=1e-6)
    xs = torch.randn(9, 333, device=DEVICE, requires_grad=True)
    sm.triton_softmax(xs).sum().backward()  # dy = ones broadcast (strides 0): dx is 0 up to rounding
    assert xs.grad.abs().max() < 1e-6


def test_softmax_refusals():
    x = torch.randn(5, 7, device=DEVICE)
    with pytest.raises(ValueError, match="column stride"):
        sm.softmax(x.t())
    with pytest.raises(TypeError, match="dtype torch.float64"):
        sm.softmax_fused(x.double())
    with pytest.raises(ValueError, match="2-D"):
        sm.softmax_online(x[0])
    with pytest.raises(TypeError, match="torch.Tensor"):
        sm.softmax(x.tolist())
    with pytest.raises(ValueError, match="is on"):
        sm.softmax(x.to("meta" if DEVICE == "cpu" else "cpu"))
    with pytest.raises(ValueError, match="too wide"):
        sm.softmax_fused(torch.empty(1, 40000, device=DEVICE))
    with pytest.raises(ValueError, match="power of two"):
        sm.softmax_online(x, block=100)
    with pytest.raises(ValueError, match="differ"):
        sm.softmax_backward(x, x[:, :5])
    for block in (100, 0, -4, 8.0):
        with pytest.raises(ValueError, match=r"softmax_backward\(\): block must be a power of two >= 1"):
            sm.softmax_backward(x, x, block=block)


@pytest.mark.skipif(not GPU, reason="rows this wide take minutes in Triton's interpreter")
@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("shape", [(300, 5000), (300, 8192), (7, 16384), (5, 32768), (3, 100_003)])
def test_softmax_wide_rows(dtype, shape):
    """The widths 02_softmax leaves to this file, in every dtype: 5000 (a 16-warp fused block), 8192 (300 rows: more
    than the programs of the fused kernel an H200 holds at once, so the persistent loop turns), 16384 (the widest row
    `softmax` sends to the fused kernel), 32768 with several rows and 100 003 (online only); the online kernel with
    its default block and with blocks of 256; the backward in one block (up to 8192) and in two walks."""
    x = (3 * torch.randn(shape, device=DEVICE)).to(dtype)
    kinds = {"online": sm.softmax_online, "online block=256": lambda t: sm.softmax_online(t, block=256),
             "dispatch": sm.softmax}
    if shape[1] <= sm.FUSED_MAX_BLOCK:
        kinds["fused"] = sm.softmax_fused
    for kind, fn in kinds.items():
        _softmax_check(fn, x, f"{kind} {shape}")
    y, dy = torch.softmax(x, dim=-1), torch.randn(shape, device=DEVICE).to(dtype)
    y64, dy64 = y.double(), dy.double()
    exact = y64 * (dy64 - (dy64 * y64).sum(-1, keepdim=True))
    theirs = torch.ops.aten._softmax_backward_data(dy, y, 1, dtype)
    assert_as_accurate_as_torch(sm.softmax_backward(y, dy), theirs, exact, name=f"backward {shape}")


# --- LayerNorm and RMSNorm (triton/03-nn-components/04_layernorm) -----------------------------



def _norm_grads(kind, x, w, b, dy, dtype):
    leaves = [t.detach().to(dtype).requires_grad_() for t in ((x, w, b) if kind == "layer" else (x, w))]
    if kind == "layer":
        y = F.layer_norm(leaves[0], (x.shape[1],), leaves[1], leaves[2], 1e-5)
    else:
        y = F.rms_norm(leaves[0], (x.shape[1],), leaves[1], 1e-6)
    y.backward(dy.to(dtype))
    return [y.detach()] + [t.grad for t in leaves]


@pytest.mark.parametrize("kind", ["layer", "rms"])
@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize(("M", "N"), [(1, 1), (7, 1), (1, 3), (7, 1000), (300, 3), (5, 1025), (3, 4099)])
def test_norms_match_torch(kind, dtype, M, N):
    x = (torch.randn(M, N, device=DEVICE) * 2 + 0.5).to(dtype)
    w, b = (1 + 0.1 * torch.randn(N, device=DEVICE)).to(dtype), (0.1 * torch.randn(N, device=DEVICE)).to(dtype)
    dy = torch.randn(M, N, device=DEVICE).to(dtype)
    leaves = [t.detach().requires_grad_() for t in ((x, w, b) if kind == "layer" else (x, w))]
    y = ln.layer_norm(*leaves) if kind == "layer" else ln.rms_norm(*leaves)
    y.backward(dy)
    ours = [y.detach()] + [t.grad for t in leaves]
    exact, theirs = _norm_grads(kind, x, w, b, dy, torch.float64), _norm_grads(kind, x, w, b, dy, dtype)
    for name, mine, t, e in zip(("y", "dx", "dw", "db"), ours, theirs, exact, strict=False):
        assert_as_accurate_as_torch(mine, t, e, name=f"{kind} {name} {M}x{N}")


def test_layer_norm_close_values():
    """The draw (seed 2, row 130) on which the fp32 forward's y error was 3.7e-6 against torch's 5e-7 in the
    interpreter before the kernel corrected its mean: one sum for the mean rounded it by an ulp, and rstd = 51
    multiplied that into y."""
    torch.manual_seed(2)
    x = torch.randn(300, 3, device=DEVICE) * 2 + 0.5
    w, b = 1 + 0.1 * torch.randn(3, device=DEVICE), 0.1 * torch.randn(3, device=DEVICE)
    exact = F.layer_norm(x.double(), (3,), w.double(), b.double(), 1e-5)
    assert_as_accurate_as_torch(ln.layer_norm(x, w, b), F.layer_norm(x, (3,), w, b, 1e-5), exact, name="close values")


@pytest.mark.parametrize("dtype", FLOATS)
def test_layer_norm_one_column_is_exact(dtype):
    """N = 1: x - mean(x) is exactly 0, so y = b and dx = 0 exactly (an FMA-fused g - mean(g) left ~1e-5 on a GPU)."""
    x = (100 * torch.randn(64, 1, device=DEVICE)).to(dtype)
    w, b = torch.randn(1, device=DEVICE).to(dtype), torch.randn(1, device=DEVICE).to(dtype)
    dy = torch.randn(64, 1, device=DEVICE).to(dtype)
    y, mean, rstd = ln.layer_norm_fwd(x, w, b)
    dx, dw, db = ln.layer_norm_bwd(dy, x, w, mean, rstd)
    assert torch.equal(y, b.expand(64, 1)) and torch.equal(mean, x[:, 0].float())
    assert torch.equal(dx, torch.zeros_like(dx)) and torch.equal(dw, torch.zeros_like(dw))
    torch.testing.assert_close(db, dy.sum(0), rtol=1e-3 if dtype != torch.float32 else 1e-6, atol=1e-3)


def test_norm_refusals_and_empty():
    x8, w8, b8 = torch.randn(4, 8, device=DEVICE), torch.ones(8, device=DEVICE), torch.zeros(8, device=DEVICE)
    with pytest.raises(ValueError, match="2-D"):
        ln.layer_norm_fwd(x8[0], w8, b8)
    with pytest.raises(TypeError, match="dtypes differ"):
        ln.layer_norm_fwd(x8, w8.half(), b8)
    with pytest.raises(ValueError, match="contiguous"):
        ln.layer_norm_fwd(torch.randn(8, 4, device=DEVICE).t(), w8, b8)
    with pytest.raises(ValueError, match="0 elements"):
        ln.layer_norm_fwd(x8[:, :0], w8[:0], b8[:0])
    y, mean, rstd = ln.layer_norm_fwd(x8[:0], w8, b8)  # no rows: nothing to launch
    dx, dw, db = ln.layer_norm_bwd(y, x8[:0], w8, mean, rstd)
    assert y.shape == (0, 8) and dx.shape == (0, 8) and torch.equal(dw, torch.zeros(8, device=DEVICE))
    _, mean, rstd = ln.layer_norm_fwd(x8, w8, b8)
    for programs in (0, -1):
        with pytest.raises(ValueError, match="programs must be at least 1"):
            ln.layer_norm_bwd(x8, x8, w8, mean, rstd, programs=programs)
        with pytest.raises(ValueError, match="programs must be at least 1"):
            ln.rms_norm_bwd(x8, x8, w8, rstd, programs=programs)


@pytest.mark.parametrize("kind", ["layer", "rms"])
@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize(("M", "N"), [(300, 1), (1, 1025), (1, 4099), (300, 1025)])
def test_norms_rest_of_notebook_matrix(kind, dtype, M, N):
    """04_layernorm checks each width once per dtype. Of the rest of its matrix (1, 7, 300 rows x 1, 3, 1000, 1025,
    4099 columns), the cases unlike test_norms_match_torch's: 300 rows of 1 element (on a GPU, one partial tile of
    512 rows), a single wide row (M = 1 is compiled as a constant), and dW/db summed from many programs' partial rows
    (150 on a GPU); with the forward's saved statistics."""
    test_norms_match_torch(kind, dtype, M, N)
    if kind == "layer":
        x = (torch.randn(M, N, device=DEVICE) * 2 + 0.5).to(dtype)
        w, b = torch.ones(N, device=DEVICE).to(dtype), torch.zeros(N, device=DEVICE).to(dtype)
        _, mean, rstd = ln.layer_norm_fwd(x, w, b)
        x64 = x.double()
        torch.testing.assert_close(mean.double(), x64.mean(1), atol=1e-4, rtol=1e-4)
        torch.testing.assert_close(rstd.double(), (x64.var(1, unbiased=False) + 1e-5).rsqrt(), atol=1e-3, rtol=1e-4)


# --- CUDA track: the kernels cuda/03-nn-components exports (gpu_ml/kernels/cuda/*.cuh) ---------
# One library includes every exported header and adds a thin `extern "C"` shim per launcher (the
# lessons' own shims take the stream as an integer; these let %%cuda's wrapper fill it in). On a CPU
# it is only compiled; on a GPU each kernel runs against PyTorch on awkward inputs.


CUDA_INCLUDES = "".join(f'#include "cuda/{name}.cuh"\n' for name in (
    "softmax_warp", "softmax_block", "softmax_online", "layernorm_fwd", "layernorm_colsum", "bias_gelu",
    "bias_gelu_bwd", "cross_entropy"))
CUDA_SHIMS = """
extern "C" int softmax_warp_{S}(const {T}* x, {T}* y, int rows, int cols, int per_lane, cudaStream_t st) {{
    return launch_softmax_warp(x, y, rows, cols, per_lane, st);
}}
extern "C" int softmax_block_{S}(const {T}* x, {T}* y, int rows, int cols, int threads, bool vec, cudaStream_t st) {{
    return launch_softmax_block(x, y, rows, cols, threads, vec, st);
}}
extern "C" int softmax_online_{S}(const {T}* x, {T}* y, int rows, int cols, int threads, cudaStream_t st) {{
    return launch_softmax_online(x, y, rows, cols, threads, st);
}}
extern "C" int layer_norm_fwd_{S}(const {T}* x, const {T}* w, const {T}* b, {T}* y, float* mean, float* rstd,
                                  int rows, int cols, float eps, int threads, bool vec, cudaStream_t st) {{
    return launch_layer_norm_fwd(x, w, b, y, mean, rstd, rows, cols, eps, threads, vec, st);
}}
extern "C" int layer_norm_bwd_{S}(const {T}* dy, const {T}* x, const {T}* w, const float* mean, const float* rstd,
                                  {T}* dx, {T}* dw, {T}* db, float* part, int rows, int cols, int threads, int groups,
                                  bool vec, cudaStream_t st) {{
    return launch_layer_norm_bwd(dy, x, w, mean, rstd, dx, dw, db, part, rows, cols, threads, groups, vec, st);
}}
extern "C" int bias_gelu_fwd_{S}(const {T}* x, const {T}* b, {T}* y, long long rows, int cols, int groups,
                                 bool tanh_approx, bool vec, cudaStream_t st) {{
    return launch_bias_gelu_fwd(x, b, y, rows, cols, groups, tanh_approx, vec, st);
}}
extern "C" int bias_gelu_bwd_{S}(const {T}* dy, const {T}* x, const {T}* b, {T}* dx, {T}* db, float* part,
                                 long long rows, int cols, int groups, bool tanh_approx, bool vec, cudaStream_t st) {{
    return launch_bias_gelu_bwd(dy, x, b, dx, db, part, rows, cols, groups, tanh_approx, vec, st);
}}
extern "C" void cross_entropy_{S}(const {T}* logits, const long long* t, const long long* n_valid, {T}* grad,
                                  float* loss, int rows, int V, long long ignore_index, bool vec) {{
    launch_cross_entropy(logits, t, n_valid, grad, loss, rows, V, ignore_index, true, vec);
}}
"""
CUDA_SOURCE = CUDA_INCLUDES + "".join(CUDA_SHIMS.format(T=t, S=s) for t, s in (("float", "f32"), ("__half", "f16")))
CUDA_DTYPES = (torch.float32, torch.float16)
needs_cuda_gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="the CUDA kernels need a CUDA GPU")


@pytest.fixture(scope="module")
def cuda_kernels():
    """{name: CudaFunction} of the shims, built once (nvcc; cached by gpu_ml.cuda like a %%cuda cell)."""
    path = cu.build(CUDA_SOURCE, library=True)
    return cu.load_library(path, CUDA_SOURCE)


def _fn(kernels, name, dtype):
    return kernels[f"{name}_{'f32' if dtype == torch.float32 else 'f16'}"]


def _packs(cols, dtype):
    """True when a row of `cols` values is whole 16-byte packs (the vectorized kernels' condition)."""
    return cols % (16 // torch.tensor([], dtype=dtype).element_size()) == 0


def _threads(cols):
    """Threads for a block that holds a row 16 values per thread: whole warps, 128..1024 (the lessons' rule)."""
    return min(1024, max(128, -(-cols // 512) * 32))


def test_cuda_shims_compile(cuda_kernels):
    names = {f"{k}_{s}" for k in ("softmax_warp", "softmax_block", "softmax_online", "layer_norm_fwd",
                                  "layer_norm_bwd", "bias_gelu_fwd", "bias_gelu_bwd", "cross_entropy")
             for s in ("f32", "f16")}
    assert set(cuda_kernels) == names


def _masked_rows(rows, cols, dtype):
    x = 3 * torch.randn(rows, cols, device="cuda")
    x[0, : cols // 2] = float("-inf")  # a masked leading half
    if rows > 1:
        x[1, -max(1, cols // 8):] = float("-inf")  # a masked tail
    if rows > 2:
        x[2] = float("-inf")
        x[2, cols - 1] = 2.0  # one finite entry: its output is 1
    if rows > 3:
        x[3] = float("-inf")  # all masked: NaN, as torch.softmax gives
    return x.to(dtype)


def _grads(fn, *tensors, dy, dtype):
    """fn(*tensors) and the gradients of <fn(...), dy>, computed in `dtype` (torch's run) or float64 (exact)."""
    leaves = [t.detach().to(dtype).requires_grad_() for t in tensors]
    out = fn(*leaves)
    out.backward(dy.to(dtype))
    return [out.detach()] + [t.grad for t in leaves]


@needs_cuda_gpu
@pytest.mark.parametrize("dtype", CUDA_DTYPES)
@pytest.mark.parametrize(("rows", "cols"), [(1, 8), (7, 64), (5, 1000), (3, 1024), (2, 4096), (6, 1001), (2, 16384),
                                            (3, 100_003), (5, 1)])  # no 0 rows: one block per row, the wrappers skip it
def test_cuda_softmax_kernels(cuda_kernels, dtype, rows, cols):
    online, warp, block = (_fn(cuda_kernels, f"softmax_{k}", dtype) for k in ("online", "warp", "block"))
    for x in ((3 * torch.randn(rows, cols, device="cuda")).to(dtype), _masked_rows(rows, cols, dtype)):
        runs = {"online": lambda y, x=x: online(x, y, rows, cols, 512)}
        if _packs(cols, dtype) and cols <= 32 * 128:
            runs["warp"] = lambda y, x=x: warp(x, y, rows, cols, 32 if cols <= 1024 else 128)
        if cols <= 16 * 1024:
            for vec in (False, True) if _packs(cols, dtype) else (False,):
                runs[f"block vec={vec}"] = lambda y, x=x, v=vec: block(x, y, rows, cols, _threads(cols), v)
        for name, run in runs.items():
            y = torch.full_like(x, 7.0)
            rc = run(y)  # launched here, not inside an assert (python -O would drop it)
            assert rc == 0, f"{name} refused a valid launch"
            assert_as_accurate_as_torch(y, torch.softmax(x, dim=-1), torch.softmax(x.double(), dim=-1),
                                        name=f"softmax {name} {rows}x{cols}")


@needs_cuda_gpu
@pytest.mark.parametrize("dtype", CUDA_DTYPES)
@pytest.mark.parametrize(("rows", "cols"), [(1, 1), (7, 8), (5, 1000), (300, 3), (3, 4099), (2, 16384), (100, 1028),
                                            (7, 16384)])
def test_cuda_layer_norm_kernels(cuda_kernels, dtype, rows, cols):
    """Forward, and backward at each number of row groups G that 02_softmax_and_layernorm checks: one block for every
    row, up to 7 blocks, one block per row. 1028 columns are whole fp32 packs but single fp16 elements."""
    x = (torch.randn(rows, cols, device="cuda") + 3).to(dtype)
    w, b = torch.randn(cols, device="cuda").to(dtype), torch.randn(cols, device="cuda").to(dtype)
    dy = torch.randn(rows, cols, device="cuda").to(dtype)
    ln = lambda x, w, b: F.layer_norm(x, (cols,), w, b, eps=1e-5)
    theirs, exact = _grads(ln, x, w, b, dy=dy, dtype=dtype), _grads(ln, x, w, b, dy=dy, dtype=torch.float64)
    threads = _threads(cols)
    for vec in (False, True) if _packs(cols, dtype) else (False,):
        y, mean, rstd = torch.empty_like(x), torch.empty(rows, device="cuda"), torch.empty(rows, device="cuda")
        _fn(cuda_kernels, "layer_norm_fwd", dtype).checked(x, w, b, y, mean, rstd, rows, cols, 1e-5, threads, vec)
        assert_as_accurate_as_torch(y, theirs[0], exact[0], name=f"layer norm y vec={vec}")
        for groups in sorted({1, min(rows, 7), rows}):
            dx, dw, db = torch.empty_like(x), torch.empty_like(w), torch.empty_like(b)
            part = torch.empty(2 * groups * cols, device="cuda")
            bwd = _fn(cuda_kernels, "layer_norm_bwd", dtype)
            bwd.checked(dy, x, w, mean, rstd, dx, dw, db, part, rows, cols, max(256, threads), groups, vec)
            if cols == 1:  # x - mean is exactly 0: so is dx
                assert dx.abs().max().item() == 0.0
            for name, ours, t, e in zip(("dx", "dw", "db"), (dx, dw, db), theirs[1:], exact[1:], strict=True):
                assert_as_accurate_as_torch(ours, t, e, name=f"layer norm {name} G={groups} vec={vec}")


@needs_cuda_gpu
@pytest.mark.parametrize("dtype", CUDA_DTYPES)
@pytest.mark.parametrize("tanh", [False, True])
@pytest.mark.parametrize(("rows", "cols"), [(1, 1), (7, 8), (5, 1000), (300, 3), (33, 4099), (0, 8)])
def test_cuda_bias_gelu_kernels(cuda_kernels, dtype, tanh, rows, cols):
    x = (3 * torch.randn(rows, cols, device="cuda")).to(dtype)
    b, dy = torch.randn(cols, device="cuda").to(dtype), torch.randn(rows, cols, device="cuda").to(dtype)
    gelu = lambda x, b: F.gelu(x + b, approximate="tanh" if tanh else "none")
    theirs, exact = _grads(gelu, x, b, dy=dy, dtype=dtype), _grads(gelu, x, b, dy=dy, dtype=torch.float64)
    for vec in (False, True) if _packs(cols, dtype) else (False,):
        for groups in (1, 5):
            y, dx, db = torch.empty_like(x), torch.empty_like(x), torch.empty_like(b)
            part = torch.empty(groups * cols, device="cuda")
            _fn(cuda_kernels, "bias_gelu_fwd", dtype).checked(x, b, y, rows, cols, groups, tanh, vec)
            _fn(cuda_kernels, "bias_gelu_bwd", dtype).checked(dy, x, b, dx, db, part, rows, cols, groups, tanh, vec)
            for name, ours, t, e in zip(("y", "dx", "db"), (y, dx, db), theirs, exact, strict=True):
                assert_as_accurate_as_torch(ours, t, e, name=f"bias+gelu {name} groups={groups} vec={vec}")


@needs_cuda_gpu
@pytest.mark.parametrize("dtype", CUDA_DTYPES)
@pytest.mark.parametrize(("rows", "V"), [(1, 1), (3, 8), (5, 1000), (4, 5003), (2, 32000)])
def test_cuda_cross_entropy_kernel(cuda_kernels, dtype, rows, V):
    """Loss per row and the gradient of their mean over the valid rows, a masked vocabulary and ignored rows included
    (NaN where torch's float64 gives NaN, as `assert_as_accurate_as_torch` checks)."""
    x = _masked_rows(rows, V, dtype) if V > 8 else (3 * torch.randn(rows, V, device="cuda")).to(dtype)
    t = torch.randint(0, V, (rows,), device="cuda")
    t[0] = V - 1  # in the unmasked part of the masked rows
    if rows > 2:
        t[2] = V - 1
    if rows > 3:
        t[3] = -100  # ignored, and all -inf: loss 0 and a NaN gradient row, as F.cross_entropy gives
    if rows > 4:
        t[4] = -100  # ignored: loss 0, gradient 0
    n_valid = (t != -100).sum().view(1)

    def reference(dtype_):
        xr = x.detach().to(dtype_).requires_grad_()
        loss = F.cross_entropy(xr, t, reduction="none")
        (loss.sum() / n_valid).backward()
        return loss.detach(), xr.grad

    (loss_t, grad_t), (loss64, grad64) = reference(dtype), reference(torch.float64)
    for vec in (False, True) if _packs(V, dtype) else (False,):
        grad, loss = torch.full_like(x, 7.0), torch.empty(rows, device="cuda")
        _fn(cuda_kernels, "cross_entropy", dtype)(x, t, n_valid, grad, loss, rows, V, -100, vec)
        assert_as_accurate_as_torch(loss, loss_t, loss64, name=f"loss vec={vec}")
        assert_as_accurate_as_torch(grad, grad_t, grad64, name=f"grad vec={vec}")


@needs_cuda_gpu
def test_cuda_launchers_refuse_invalid_configurations(cuda_kernels):
    x = torch.randn(4, 64, device="cuda")
    y = torch.empty_like(x)
    wide = torch.randn(1, 600, device="cuda")
    refusals = {  # launcher -> arguments it must refuse with -1 (called outside any assert)
        "softmax_warp_f32": (x, y, 4, 64, 64),  # per_lane is 32 or 128
        "softmax_block_f32": (x, y, 4, 64, 100, False),  # not whole warps
        "softmax_online_f32": (x, y, 4, 64, 2048),  # over 1024 threads
        "bias_gelu_fwd_f32": (x, x[0], y, 4, 64, 0, False, False),  # groups >= 1
    }
    for name, args in refusals.items():
        rc = cuda_kernels[name](*args)
        assert rc == -1, f"{name} returned {rc} for an invalid configuration"
    rc = cuda_kernels["softmax_block_f32"](wide, torch.empty_like(wide), 1, 600, 32, False)
    assert rc == -1, "600 columns > 16 values x 32 threads must be refused"
    cuda_kernels["softmax_block_f32"].checked(x, y, 4, 64, 32, False)  # a valid launch: 0


def test_norms_and_softmax_without_bias_and_backward_through_empty_batches():
    """F.layer_norm's bias=None; and `.sum().backward()` on 0 rows, whose upstream gradient has strides (0, 0)."""
    x, w = torch.randn(4, 8, device=DEVICE, requires_grad=True), torch.randn(8, device=DEVICE, requires_grad=True)
    y = ln.layer_norm(x, w, None)
    torch.testing.assert_close(y, F.layer_norm(x, (8,), w, None), rtol=1e-5, atol=1e-5)
    y.square().sum().backward()
    gx, gw = torch.autograd.grad(F.layer_norm(x, (8,), w, None).square().sum(), (x, w))
    torch.testing.assert_close(x.grad, gx, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(w.grad, gw, rtol=1e-4, atol=1e-5)
    empty = torch.randn(0, 8, device=DEVICE, requires_grad=True)
    b = torch.zeros(8, device=DEVICE, requires_grad=True)
    ln.layer_norm(empty, w, b).sum().backward()
    ln.rms_norm(empty, w).sum().backward()
    sm.triton_softmax(empty).sum().backward()
    assert empty.grad.shape == (0, 8) and torch.equal(b.grad, torch.zeros(8, device=DEVICE))
    with pytest.raises(ValueError, match="programs must be at least 1"):
        sm.softmax_fused(torch.randn(3, 8, device=DEVICE), programs=-1)
