"""The exported matmul, linear-layer, FlashAttention and paged-attention kernels (`gpu_ml.kernels`) on awkward
inputs, as tests/test_kernels.py tests the others (and with its criterion, tests/kernel_checks.py): a file of its
own so that `gpu-ml test` runs the two halves side by side.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from kernel_checks import DEVICE, FLOATS, GPU, assert_as_accurate_as_torch
from torch.nn.attention import SDPBackend, sdpa_kernel

from gpu_ml.env import capability
from gpu_ml.kernels.triton import flash_attention as fa
from gpu_ml.kernels.triton import flash_attention_backward as fab
from gpu_ml.kernels.triton import linear as lin
from gpu_ml.kernels.triton import matmul as mm
from gpu_ml.kernels.triton import paged_attention as pa
from gpu_ml.validate import usable

# --- matmul (triton/02-matrix-ops/02_fast_matmul) ---------------------------------------------


def _tf32(t):
    """fp32 cut to TF32's 10 mantissa bits, as tensor cores read fp32 registers in TF32 mode (truncated)."""
    return (t.contiguous().view(torch.int32) & ~0x1FFF).view(torch.float32)


def _torch_matmul(a, b):
    """A product in the kernels' precision: fp32 tl.dot uses TF32 on a GPU, so the inputs are rounded to it
    (cuBLAS decides for itself when it uses TF32, so torch.matmul cannot stand for it)."""
    if GPU and a.dtype == torch.float32:
        return (_tf32(a).double() @ _tf32(b).double()).float()
    return a @ b


MM_SHAPES = [(1, 1, 1), (17, 33, 65), (1, 70, 45), (70, 1, 45), (200, 130, 77), (64, 64, 256)]


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize(("M", "N", "K"), MM_SHAPES)
def test_matmul_grouped_with_epilogue(dtype, M, N, K):
    a, b = torch.randn(M, K, device=DEVICE).to(dtype), torch.randn(K, N, device=DEVICE).to(dtype)
    bias = torch.randn(N, device=DEVICE).to(dtype)
    exact = torch.relu(a.double() @ b.double() + bias.double())
    theirs = torch.relu(_torch_matmul(a, b) + bias)
    ours = mm.matmul_grouped(a, b, bias, relu=True, BM=32, BN=32, BK=32, GROUP_M=2)
    assert_as_accurate_as_torch(ours, theirs, exact, name=f"{M}x{N}x{K}")


def test_matmul_grouped_relu_keeps_nan():
    """NaN in A or in the bias stays NaN through the ReLU epilogue, as torch.relu keeps it (max(NaN, 0) is 0)."""
    a, b, bias = torch.randn(3, 4, device=DEVICE), torch.randn(4, 5, device=DEVICE), torch.randn(5, device=DEVICE)
    a[0, 0], bias[4] = float("nan"), float("nan")
    ours = mm.matmul_grouped(a, b, bias, relu=True, BM=32, BN=32, BK=32)
    torch.testing.assert_close(ours, torch.relu(a @ b + bias), equal_nan=True)
    assert_as_accurate_as_torch(ours, torch.relu(a @ b + bias), torch.relu(a.double() @ b.double() + bias.double()))


def test_the_accuracy_check_sees_a_lost_nan():
    exact = torch.tensor([float("nan"), float("inf"), 1.0], dtype=torch.float64)
    with pytest.raises(AssertionError, match="NaN/inf differ"):
        assert_as_accurate_as_torch(torch.tensor([0.0, float("inf"), 1.0]), exact.float(), exact)
    with pytest.raises(AssertionError, match="NaN/inf differ"):
        assert_as_accurate_as_torch(torch.tensor([float("nan"), float("-inf"), 1.0]), exact.float(), exact)
    assert_as_accurate_as_torch(exact.float(), exact.float(), exact)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize(("M", "N", "K"), [(17, 33, 65), (0, 5, 7), (5, 0, 7), (5, 7, 0), (300, 136, 72)])
def test_matmul_tuned_any_shape_and_dtype(dtype, M, N, K):
    """The tuner may only pick configurations that fit the device (fp32 17x33x65 once picked one that did not)."""
    a, b = torch.randn(M, K, device=DEVICE).to(dtype), torch.randn(K, N, device=DEVICE).to(dtype)
    c = mm.matmul(a, b)
    assert c.shape == (M, N) and c.dtype == dtype
    assert_as_accurate_as_torch(c, _torch_matmul(a, b), a.double() @ b.double(), name=f"{M}x{N}x{K}")


def test_matmul_grouped_refuses_tiles_tl_dot_cannot_take():
    a, b = torch.randn(8, 8, device=DEVICE), torch.randn(8, 8, device=DEVICE)
    for kwargs, match in [({"BM": 48}, "BM must be a power of two >= 16"), ({"BK": 8}, "BK must be a power of two"),
                          ({"GROUP_M": 0}, "GROUP_M must be a positive int")]:
        with pytest.raises(ValueError, match=match):
            mm.matmul_grouped(a, b, **kwargs)


def test_matmul_views_and_refusals():
    a = torch.randn(96, 80, device=DEVICE, dtype=torch.float16)
    torch.testing.assert_close(mm.matmul_grouped(a.t(), a[:, ::2]), a.t() @ a[:, ::2], rtol=1e-2, atol=1e-2)
    x = torch.randn(8, 8, device=DEVICE)
    with pytest.raises(ValueError, match=r"need A \(M x K\)"):
        mm.matmul(x, torch.randn(9, 8, device=DEVICE))
    with pytest.raises(TypeError, match="dtypes differ"):
        mm.matmul(x, x.half())
    with pytest.raises(ValueError, match="must be 2-D"):
        mm.matmul(x[None], x)
    with pytest.raises(ValueError, match="contiguous"):
        mm.matmul_grouped(x, x, bias=torch.zeros(16, device=DEVICE)[::2])


@pytest.mark.skipif(not GPU or capability() < (9, 0), reason="TMA needs Hopper")
@pytest.mark.parametrize(("M", "N", "K"), [(1, 8, 8), (200, 136, 72), (1000, 1032, 200), (1637, 3072, 640)])
def test_matmul_tma_kernels(M, N, K):
    a = torch.randn(M, K, device=DEVICE, dtype=torch.bfloat16)
    b = torch.randn(K, N, device=DEVICE, dtype=torch.bfloat16)
    exact = a.double() @ b.double()
    for kw in (dict(BM=64, BN=128, BK=64, num_warps=4), dict(BM=128, BN=256, BK=64, persistent=True),
               dict(BM=128, BN=256, BK=64, persistent=True, subtile=True)):
        assert_as_accurate_as_torch(mm.matmul_tma(a, b, **kw), a @ b, exact, name=f"TMA {kw}")
    # Stream-K: every tile shared out along K (fewer tiles than SMs), or one wave and 24 tiles left (the last shape)
    assert_as_accurate_as_torch(mm.matmul_streamk(a, b), a @ b, exact, name="stream-K")
    with pytest.raises(ValueError, match="multiples of 8"):
        mm.matmul_streamk(a[:, :-1], b[:-1])


# --- linear layer (triton/03-nn-components/03_linear_layer) -----------------------------------


TORCH_ACT = {"none": lambda z: z, "relu": F.relu, "gelu_tanh": lambda z: F.gelu(z, approximate="tanh")}


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("activation", lin.ACTIVATIONS)
@pytest.mark.parametrize(("M", "K", "N"), [(1, 3, 5), (33, 129, 65), (5, 1, 1), (0, 8, 4), (293, 70, 40)])
def test_linear_layer_forward_and_gradients(dtype, activation, M, K, N):
    x = torch.randn(M, K, device=DEVICE).to(dtype)
    w = (torch.randn(N, K, device=DEVICE) / K**0.5).to(dtype)
    b = torch.randn(N, device=DEVICE).to(dtype)
    dy = torch.randn(M, N, device=DEVICE).to(dtype)
    grads = {}
    for label, fn, cast in (("ours", lin.linear, dtype), ("torch", None, dtype), ("exact", None, torch.float64)):
        xs, ws, bs = (t.detach().to(cast).requires_grad_() for t in (x, w, b))
        y = fn(xs, ws, bs, activation) if fn else TORCH_ACT[activation](F.linear(xs, ws, bs))
        y.backward(dy.to(cast))
        grads[label] = (y, xs.grad, ws.grad, bs.grad)
    for i, what in enumerate(("y", "dx", "dw", "db")):
        assert_as_accurate_as_torch(grads["ours"][i], grads["torch"][i], grads["exact"][i],
                                    name=f"{what} {activation} {M}x{K}->{N}")


def test_linear_layer_layouts_and_extremes():
    x, w = torch.randn(70, 293, device=DEVICE).T, torch.randn(80, 70, device=DEVICE)[::2] / 70**0.5
    b = torch.randn(40, device=DEVICE)
    y, _ = lin.linear_forward(x, w, b, "relu")
    torch.testing.assert_close(y, F.relu(F.linear(x, w, b)), rtol=1e-4, atol=1e-4)
    z = torch.tensor([[-1e4, -100, -20, -5, -1, 0, 1, 5, 20, 100, 1e4, float("nan")]], device=DEVICE)
    dy = torch.ones((), device=DEVICE).expand(z.shape)  # stride 0, as y.sum() gives
    for activation in ("relu", "gelu_tanh"):
        zr = z.clone().requires_grad_()
        (expected,) = torch.autograd.grad(TORCH_ACT[activation](zr), zr, dy)
        saved = F.relu(z) if activation == "relu" else z
        torch.testing.assert_close(lin.activation_grad(dy, saved, activation), expected, equal_nan=True)


@pytest.mark.filterwarnings("ignore:Initializing zero-element tensors")  # nn.Linear's own init warns alike
@pytest.mark.parametrize(("shape", "in_features", "out_features"),
                         [((3, 0), 0, 4), ((2, 5, 7), 7, 3), ((7,), 7, 3), ((0, 7), 7, 3), ((4, 6), 6, 0)])
def test_triton_linear_module_matches_nn_linear(shape, in_features, out_features):
    """The module on any leading shape, as nn.Linear: 1-D input, no rows, no input features (y = bias), none out."""
    torch.manual_seed(0)
    ours = lin.TritonLinear(in_features, out_features, activation="relu", device=DEVICE)
    theirs = torch.nn.Linear(in_features, out_features, device=DEVICE)
    theirs.load_state_dict(ours.state_dict())
    x = torch.randn(shape, device=DEVICE, requires_grad=True)
    y = ours(x)
    torch.testing.assert_close(y, F.relu(theirs(x)))
    y.sum().backward()
    (expected,) = torch.autograd.grad(F.relu(theirs(x)).sum(), x)
    torch.testing.assert_close(x.grad, expected)


def test_linear_layer_refusals():
    x, w = torch.randn(8, 6, device=DEVICE), torch.randn(4, 6, device=DEVICE)
    with pytest.raises(ValueError, match="in_features=5"):
        lin.linear_forward(x, torch.randn(4, 5, device=DEVICE))
    with pytest.raises(ValueError, match="contiguous"):
        lin.linear_forward(x, w, torch.randn(8, device=DEVICE)[::2])
    with pytest.raises(TypeError, match="dtypes differ"):
        lin.linear_forward(x.half(), w)
    with pytest.raises(ValueError, match="activation must be"):
        lin.linear_forward(x, w, None, "tanh")


def _linear_check(x, w, b, dy, activation, name):
    """Our layer's y, dX, dW (and db) against torch in x's dtype and in float64."""
    grads = {}
    for label, fn, cast in (("ours", lin.linear, x.dtype), ("torch", None, x.dtype), ("exact", None, torch.float64)):
        leaves = [t.detach().to(cast).requires_grad_() for t in (x, w, b) if t is not None]
        xs, ws, bs = leaves[0], leaves[1], leaves[2] if b is not None else None
        y = fn(xs, ws, bs, activation) if fn else TORCH_ACT[activation](F.linear(xs, ws, bs))
        y.backward(dy.to(cast))
        grads[label] = [y] + [t.grad for t in leaves]
    for i, what in enumerate(("y", "dx", "dw", "db")[: len(grads["ours"])]):
        assert_as_accurate_as_torch(grads["ours"][i], grads["torch"][i], grads["exact"][i], name=f"{what} {name}")


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("activation", lin.ACTIVATIONS)
def test_linear_layer_no_bias(dtype, activation):
    """No bias, every activation (the notebook runs GELU only)."""
    x = torch.randn(33, 129, device=DEVICE).to(dtype)
    w = (torch.randn(65, 129, device=DEVICE) / 129**0.5).to(dtype)
    _linear_check(x, w, None, torch.randn(33, 65, device=DEVICE).to(dtype), activation, f"no bias {activation}")


@pytest.mark.parametrize("dtype", [t for t in FLOATS if t != torch.bfloat16])
@pytest.mark.parametrize("activation", lin.ACTIVATIONS)
def test_linear_layer_extreme_pre_activations(dtype, activation):
    """z from -1e4 to 1e4 (x = 1 through a 1 -> 13 layer whose weights are those values), every activation
    (the notebook runs GELU only)."""
    z = torch.tensor([-1e4, -100, -20, -5, -1, -1e-4, 0, 1e-4, 1, 5, 20, 100, 1e4], device=DEVICE)
    x, b, dy = (torch.ones(2, 1, device=DEVICE), torch.zeros(13, device=DEVICE), torch.ones(2, 13, device=DEVICE))
    _linear_check(x.to(dtype), z[:, None].to(dtype), b.to(dtype), dy.to(dtype), activation, f"extreme z {activation}")


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("activation", ["relu", "gelu_tanh"])
@pytest.mark.parametrize("layout", ["contiguous", "expanded", "transposed", "extreme"])
def test_linear_activation_grad_layouts(dtype, activation, layout):
    """dZ = dY * act'(z), dY read through its strides; every (layout, activation) pair in every dtype (the
    notebook gives each layout one activation per dtype, in rotation)."""
    if layout == "extreme":
        z = torch.tensor([[-1e4, -100, -20, -5, -1, -1e-4, 0, 1e-4, 1, 5, 20, 100, 1e4]], device=DEVICE).to(dtype)
        dy = torch.ones_like(z)
    else:
        z = (torch.randn(37, 200, device=DEVICE) * 3).to(dtype)
        dy = {"contiguous": lambda: torch.randn(37, 200, device=DEVICE).to(dtype),
              "expanded": lambda: torch.ones((), device=DEVICE, dtype=dtype).expand(37, 200),
              "transposed": lambda: torch.randn(200, 37, device=DEVICE).to(dtype).T}[layout]()
    saved = F.relu(z) if activation == "relu" else z
    zr, ze = z.detach().clone().requires_grad_(), z.double().requires_grad_()
    (theirs,) = torch.autograd.grad(TORCH_ACT[activation](zr), zr, dy)
    (exact,) = torch.autograd.grad(TORCH_ACT[activation](ze), ze, dy.double())
    assert_as_accurate_as_torch(lin.activation_grad(dy, saved, activation), theirs, exact,
                                name=f"dZ {layout} {activation}")


@pytest.mark.parametrize("config", list(lin.CONFIGS))
@pytest.mark.parametrize(("m", "k", "n"), [(1, 1, 1), (65, 37, 130)])
def test_linear_matmul_rowsum_configs(config, m, k, n):
    """matmul and the row sum on every tile configuration, A and B transposed views (the notebook forces the
    1x1x1 product on one configuration only)."""
    a, b = torch.randn(k, m, device=DEVICE).T, torch.randn(n, k, device=DEVICE).T
    c, s = lin.matmul(a, b, with_rowsum=True, config=config)
    torch.testing.assert_close(c, a @ b, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(s, a.sum(1), rtol=1e-4, atol=1e-4)


# --- FlashAttention (triton/05-flash-attention) -----------------------------------------------



FA_DTYPES = usable((torch.float16, torch.bfloat16))
FA_DIMS = (64, 128) if GPU else (16, 32)
FA_SHAPES = [  # (B, Hq, Hkv, Nq, Nk, causal, [B, N, H, d] views)
    (1, 2, 2, 1, 1, False, False), (1, 2, 2, 17, 17, True, False), (1, 2, 2, 100, 100, False, False),
    (1, 2, 2, 17, 100, True, False), (1, 2, 2, 100, 17, False, False), (2, 4, 2, 33, 33, True, False),
    (1, 4, 1, 45, 45, False, True),
]
FA_SHAPES += [  # the same shapes with the other mask: the notebooks run each mask at one head dim per shape
    (1, 2, 2, 1, 1, True, False), (1, 2, 2, 17, 17, False, False), (1, 2, 2, 100, 100, True, False),
    (1, 2, 2, 17, 100, False, False), (1, 2, 2, 100, 17, True, False), (2, 4, 2, 33, 33, False, False),
    (1, 4, 1, 45, 45, True, True),
] + ([(1, 2, 2, 257, 257, False, False), (1, 2, 2, 257, 257, True, False)] if GPU else [])  # 2 GPU tiles + 1 row


def _attn_inputs(b, hq, hkv, nq, nk, d, dtype, transposed):
    def make(h, n):
        if transposed:
            return torch.randn(b, n, h, d, device=DEVICE).to(dtype).transpose(1, 2)
        return torch.randn(b, h, n, d, device=DEVICE).to(dtype)

    return make(hq, nq), make(hkv, nk), make(hkv, nk), make(hq, nq)


def _sdpa(q, k, v, do, causal, dtype):
    """SDPA's output and gradients computed in `dtype` (float64: the reference; half: PyTorch's own error)."""
    leaves = [t.detach().to(dtype).requires_grad_() for t in (q, k, v)]
    if GPU and dtype != torch.float64:
        torch.backends.cuda.allow_fp16_bf16_reduction_math_sdp(True)
    try:
        with sdpa_kernel(SDPBackend.MATH):
            out = F.scaled_dot_product_attention(*leaves, is_causal=causal, enable_gqa=True)
    finally:
        if GPU:
            torch.backends.cuda.allow_fp16_bf16_reduction_math_sdp(False)
    out.backward(do.to(dtype))
    return [out.detach()] + [t.grad for t in leaves]


@pytest.mark.parametrize("dtype", FA_DTYPES)
@pytest.mark.parametrize("d", FA_DIMS)
@pytest.mark.parametrize(("b", "hq", "hkv", "nq", "nk", "causal", "transposed"), FA_SHAPES)
def test_flash_attention_forward_and_backward(dtype, d, b, hq, hkv, nq, nk, causal, transposed):
    q, k, v, do = _attn_inputs(b, hq, hkv, nq, nk, d, dtype, transposed)
    leaves = [t.detach().requires_grad_() for t in (q, k, v)]
    o = fab.flash_attention(*leaves, causal)
    o.backward(do)
    ours = [o.detach()] + [t.grad for t in leaves]
    exact, theirs = _sdpa(q, k, v, do, causal, torch.float64), _sdpa(q, k, v, do, causal, dtype)
    for name, mine, t, e in zip(("O", "dQ", "dK", "dV"), ours, theirs, exact, strict=True):
        assert_as_accurate_as_torch(mine, t, e, name=f"{name} {dtype} d={d}")
    lse = fa.flash_attention_forward(q, k, v, causal)[1]
    s = q.double() @ k.double().repeat_interleave(hq // hkv, 1).transpose(-2, -1) * d**-0.5
    if causal:
        s = s.masked_fill(torch.ones(nq, nk, dtype=torch.bool, device=DEVICE).triu(1), float("-inf"))
    torch.testing.assert_close(lse.double(), torch.logsumexp(s, -1), atol=2e-3, rtol=1e-4)


def test_flash_attention_large_scores():
    """Logits with a standard deviation of ~30: the running maximum keeps exp from overflowing."""
    q, k, v, _ = _attn_inputs(1, 2, 2, 64, 64, FA_DIMS[0], torch.float16, False)
    o, _ = fa.flash_attention_forward(q * 30, k, v, causal=True)
    ref = F.scaled_dot_product_attention((q * 30).double(), k.double(), v.double(), is_causal=True)
    torch.testing.assert_close(o.double(), ref, atol=1e-2, rtol=1e-2)


def test_flash_attention_backward_takes_any_layout_of_o():
    """o as a view whose head_dim is not contiguous (a transposed buffer): the same gradients as o itself."""
    q, k, v, do = _attn_inputs(1, 2, 1, 20, 20, FA_DIMS[0], torch.float16, False)
    o, lse = fa.flash_attention_forward(q, k, v)
    o_t = torch.empty(o.shape[:2] + o.shape[:1:-1], device=DEVICE, dtype=o.dtype).transpose(-1, -2).copy_(o)
    assert o_t.stride(-1) != 1
    for ours, expected in zip(fab.flash_attention_backward(do, q, k, v, o_t, lse),
                              fab.flash_attention_backward(do, q, k, v, o, lse), strict=True):
        torch.testing.assert_close(ours, expected, rtol=0, atol=0)


def test_flash_attention_backward_group_offsets_past_int32():
    """GQA, 8 query heads per K/V head, q's heads 335544320 elements apart: each head's own offsets fit int32, but
    7 heads' stride does not; the dK/dV kernel must compute the group's head offsets in int64 (it read outside q).
    The storage is allocated, not written: only the heads' rows are touched."""
    stride, n, d, group = 335544320, 16, 16, 8
    store = torch.empty((group - 1) * stride + n * d, device=DEVICE, dtype=torch.float16)
    q = store.as_strided((1, group, n, d), (group * stride, stride, d, 1)).copy_(
        torch.randn(1, group, n, d, device=DEVICE).half())
    k, v = (torch.randn(1, 1, n, d, device=DEVICE).half() for _ in range(2))
    do, qc = torch.randn(1, group, n, d, device=DEVICE).half(), q.contiguous()
    o, lse = fa.flash_attention_forward(qc, k, v)
    for config in (None, fab.BwdConfig(fab.default_bwd_config(d).dkdv, None)):  # two kernels, and dQ by atomics
        for ours, expected in zip(fab.flash_attention_backward(do, q, k, v, o, lse, config=config),
                                  fab.flash_attention_backward(do, qc, k, v, o, lse, config=config), strict=True):
            torch.testing.assert_close(ours, expected)  # not bit for bit: atomic adds land in any order
    del store


def test_flash_attention_refusals():
    x = torch.randn(1, 2, 8, 32, device=DEVICE, dtype=torch.float16)
    with pytest.raises(ValueError, match="shapes must be"):
        fa.flash_attention_forward(x, x, x[..., :16])
    with pytest.raises(ValueError, match="multiple of"):
        fa.flash_attention_forward(torch.randn(1, 3, 8, 32, device=DEVICE, dtype=torch.float16), x, x)
    with pytest.raises(ValueError, match="empty dimension"):
        fa.flash_attention_forward(x[:, :, :0], x, x)
    with pytest.raises(TypeError, match="supported: torch.float16"):
        fa.flash_attention_forward(x.float(), x.float(), x.float())
    with pytest.raises(ValueError, match="contiguous"):
        z = torch.randn(1, 2, 32, 8, device=DEVICE, dtype=torch.float16).transpose(-2, -1)
        fa.flash_attention_forward(z, z, z)
    # [B, N, H, d] with N * H * d >= 2^31: 4.3 GB allocated, never written or read
    wide = torch.empty(1, 2**17, 129, 128, device=DEVICE, dtype=torch.float16)
    q = wide[:, :, :1].transpose(1, 2)
    with pytest.raises(ValueError, match="int32 offsets"):
        fa.flash_attention_forward(q, q, q)
    q_ok = torch.zeros(q.shape, device=DEVICE, dtype=torch.float16)  # [1, 1, 2^17, 128] contiguous: accepted
    lse = torch.zeros(q.shape[:3], device=DEVICE)
    with pytest.raises(ValueError, match="do: the rows of one head span"):
        fab.flash_attention_backward(q, q_ok, q_ok, q_ok, q_ok, lse)


@pytest.mark.skipif(not GPU, reason="needs a CUDA GPU")
def test_flash_attention_refuses_bf16_below_compute_capability_8(monkeypatch):
    monkeypatch.setenv("GPU_ML_EMULATE", "t4")  # the capability a T4 reports, 7.5, on whatever GPU runs this
    x = torch.randn(1, 2, 8, 32, device="cuda", dtype=torch.bfloat16)
    refusal = r"q has dtype torch.bfloat16: bfloat16 needs a GPU of compute capability 8\.0\+ \(this GPU has .*7\.5\)"
    with pytest.raises(TypeError, match=refusal):
        fa.flash_attention_forward(x, x, x)


# --- paged decode attention (triton/07-llm-inference/02_paged_attention) ------------------------


def _paged_case(lengths, n_heads, n_kv_heads, d, page, dtype, seed=0):
    """A pool with the sequences' K and V in shuffled blocks, the queries, tables and lengths."""
    import random

    from gpu_ml.kernels.triton.paged_kv import PagedKVCache

    g = torch.Generator().manual_seed(seed)
    cache = PagedKVCache(sum(-(-n // page) for n in lengths) + 2, page, n_kv_heads, d, dtype=dtype, device=DEVICE)
    random.Random(seed).shuffle(cache.free)
    for i, n in enumerate(lengths):
        cache.add(i)
        cache.append(i, *(torch.randn(n, n_kv_heads, d, generator=g).to(DEVICE, dtype) for _ in "kv"))
    tables, lens = cache.block_tables(list(range(len(lengths))))
    q = torch.randn(len(lengths), n_heads, d, generator=g).to(DEVICE, dtype)
    return cache, q, tables.clamp(min=0), lens


def _paged_reference(q, cache, dtype):
    out = []
    for i in range(q.shape[0]):
        k, v = (t.transpose(0, 1).to(dtype) for t in cache.gather(i))
        out.append(F.scaled_dot_product_attention(q[i, :, None].to(dtype), k, v, enable_gqa=True)[:, 0])
    return torch.stack(out)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize(("n_heads", "n_kv_heads"), [(8, 2), (4, 1), (2, 2)])
@pytest.mark.parametrize("page", [16, 5, 64])
@pytest.mark.parametrize("splits", [1, 4])
def test_paged_attention_matches_sdpa_on_the_gathered_cache(dtype, n_heads, n_kv_heads, page, splits):
    lengths = [1, 15, 16, 17, 1000 if GPU else 130] + ([32767] if GPU and page == 16 else [])
    cache, q, tables, lens = _paged_case(lengths, n_heads, n_kv_heads, 64 if GPU else 16, page, dtype)
    ours = pa.paged_attention(q, cache.k, cache.v, tables, lens, splits=splits)
    assert ours.dtype == dtype and ours.shape == q.shape
    assert_as_accurate_as_torch(ours, _paged_reference(q, cache, dtype), _paged_reference(q, cache, torch.float64),
                                name=f"paged attention {dtype} {n_heads}/{n_kv_heads} page {page} splits {splits}")


def test_paged_attention_on_a_pool_that_holds_other_sequences_and_an_empty_batch():
    cache, q, tables, lens = _paged_case([40, 3, 77], 4, 2, 16, 8, torch.float32, seed=3)
    one = pa.paged_attention(q[1:2], cache.k, cache.v, tables[1:2], lens[1:2], splits=8)  # splits past its end
    torch.testing.assert_close(one, _paged_reference(q, cache, torch.float64)[1:2].float(), rtol=1e-5, atol=1e-6)
    empty = pa.paged_attention(q[:0], cache.k, cache.v, tables[:0], lens[:0])
    assert empty.shape == (0, 4, 16)


def test_paged_attention_reads_strided_tables_and_lengths():
    """Views of the block tables (a column step) and of the lengths: each entry read where it is, not as if packed."""
    cache, q, tables, lens = _paged_case([40, 3, 77], 4, 2, 16, 8, torch.float32, seed=5)
    wide = torch.full((tables.shape[0], 2 * tables.shape[1]), 10**6, dtype=torch.int32, device=DEVICE)
    wide[:, ::2] = tables  # every other column a block far outside the pool
    lens_view = torch.stack([lens, torch.full_like(lens, 10**6)], 1)[:, 0]  # stride 2
    expected = pa.paged_attention(q, cache.k, cache.v, tables, lens, splits=2)
    torch.testing.assert_close(pa.paged_attention(q, cache.k, cache.v, wide[:, ::2], lens_view, splits=2), expected)
    with pytest.raises(ValueError, match="block_n must be a power of two"):
        pa.paged_attention(q, cache.k, cache.v, tables, lens, block_n=24)


def test_paged_attention_refuses_before_launching():
    cache, q, tables, lens = _paged_case([5, 9], 8, 2, 16, 4, torch.float32)
    bad = tables.clone()
    bad[1, 2] = cache.k.shape[0]
    cases = [((q, cache.k, cache.v, bad, lens), ValueError, r"block_tables\[1, 2\] = 7 points outside the pool"),
             ((q, cache.k, cache.v, -tables - 1, lens), ValueError, "points outside the pool"),
             ((q, cache.k, cache.v, tables, lens + 4), ValueError, "longer than a block table of 3 blocks of 4"),
             ((q[:, :7], cache.k, cache.v, tables, lens), ValueError, "7 query heads must be a multiple of the pool"),
             ((q, cache.k, cache.v, tables, lens * 0), ValueError, "at least one token"),
             ((q, cache.k, cache.v, tables.long(), lens), TypeError, "block_tables has dtype torch.int64"),
             ((q.half(), cache.k, cache.v, tables, lens), ValueError, "in q's dtype"),
             ((q, cache.k, cache.v[..., :8], tables, lens), ValueError, "must match"),
             ((q[..., :8], cache.k[..., :8], cache.v[..., :8], tables, lens), ValueError, "power of two >= 16"),
             ((q[:1], cache.k, cache.v, tables, lens), ValueError, "1 queries, but 2 block tables"),
             ((q[:, :, None], cache.k, cache.v, tables, lens), ValueError, "must be 3-D")]
    for args, error, match in cases:
        with pytest.raises(error, match=match):
            pa.paged_attention(*args)
    no_heads = cache.k[:, :, :0]
    with pytest.raises(ValueError, match="8 query heads must be a multiple of the pool's 0 K/V heads"):
        pa.paged_attention(q, no_heads, no_heads, tables, lens)
    for splits in (3, 0, 2.0):
        with pytest.raises(ValueError, match=r"paged_attention\(\): splits must be a power of two >= 1"):
            pa.paged_attention(q, cache.k, cache.v, tables, lens, splits=splits)
    with pytest.raises(TypeError, match="scale must be a Python number, got Tensor"):
        pa.paged_attention(q, cache.k, cache.v, tables, lens, scale=torch.tensor(0.25))


@pytest.mark.skipif(not GPU, reason="CUDA graphs need a CUDA GPU")
def test_paged_attention_is_captured_in_a_cuda_graph_and_replays_new_tables():
    """A capture cannot synchronize, so the data checks stand aside; a replay reads the tables as they are then."""
    cache, q, tables, lens = _paged_case([40, 3, 77], 4, 2, 64, 8, torch.float16, seed=5)
    pa.paged_attention(q, cache.k, cache.v, tables, lens, splits=4)  # compiles outside the capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = pa.paged_attention(q, cache.k, cache.v, tables, lens, splits=4)
    graph.replay()
    torch.testing.assert_close(out, pa.paged_attention(q, cache.k, cache.v, tables, lens, splits=4))
    tables[[0, 2]], lens[[0, 2]] = tables[[2, 0]].clone(), lens[[2, 0]].clone()  # sequences 0 and 2 swap places
    graph.replay()
    torch.testing.assert_close(out, pa.paged_attention(q, cache.k, cache.v, tables, lens, splits=4))


def test_default_splits_gives_three_programs_per_sm_and_keeps_256_tokens_a_split(monkeypatch):
    monkeypatch.setattr(pa, "sm_count", lambda: 132)
    # the split counts measured fastest on an H200 (GQA 32/8, d = 128, bf16, pages of 16)
    assert [pa.default_splits(B, 8, n) for B, n in ((128, 4096), (32, 8192), (8, 32768), (1, 32768), (1, 131072))] \
        == [1, 2, 8, 64, 64]
    assert pa.default_splits(1, 8, 600) == 2 and pa.default_splits(1, 8, 100) == 1  # >= 256 tokens a split
    assert pa.default_splits(1, 1, 10**7) == 128  # at most 128
    cache, q, tables, lens = _paged_case([300, 5], 4, 2, 16, 8, torch.float32, seed=4)
    torch.testing.assert_close(pa.paged_attention(q, cache.k, cache.v, tables, lens),
                               pa.paged_attention(q, cache.k, cache.v, tables, lens, splits=1), rtol=1e-5, atol=1e-6)
