"""The decode-step kernels of triton/07-llm-inference/03_decode_step (`gpu_ml.kernels.triton.decode`) on awkward
inputs: strided views, large positions, ragged sizes, empty batches, every epilogue; and their refusals."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from kernel_checks import DEVICE, FLOATS, GPU
from triton.runtime.errors import OutOfResources

from gpu_ml.kernels.triton import decode as dec
from gpu_ml.validate import usable


def _rope_reference(x, positions, inv_freq):
    angle = (positions.float()[:, None] * inv_freq[None, :])[:, None, :]
    x1, x2 = x[..., : x.shape[-1] // 2].float(), x[..., x.shape[-1] // 2 :].float()
    return torch.cat([x1 * angle.cos() - x2 * angle.sin(), x2 * angle.cos() + x1 * angle.sin()], -1).to(x.dtype)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("d", [2, 16, 128])
def test_rope_rotates_a_strided_view_in_place_and_nothing_else(dtype, d):
    torch.manual_seed(0)
    rows = torch.randn(4, 5 * d + 3, device=DEVICE, dtype=dtype)
    x = rows[:, : 5 * d].view(4, 5, d)[:, 1:4]  # 3 of 5 heads, row stride 5 * d + 3
    positions = torch.tensor([0, 1, 4095, 32767], device=DEVICE)
    inv_freq = dec.rope_frequencies(d, device=DEVICE)
    before, expected = rows.clone(), _rope_reference(x, positions, inv_freq)
    dec.apply_rope_(x, positions, inv_freq)
    torch.testing.assert_close(x, expected, rtol=2e-3 if dtype != torch.float32 else 1e-5, atol=1e-5)
    untouched = torch.ones_like(rows, dtype=torch.bool)
    untouched[:, d : 4 * d] = False
    assert torch.equal(rows[untouched], before[untouched])
    assert torch.equal(x[0], expected[0])  # position 0 turns by nothing


def test_rope_frequencies_are_llamas():
    inv = dec.rope_frequencies(128, 500000.0)
    assert inv.dtype == torch.float32 and inv.shape == (64,) and inv[0] == 1.0
    torch.testing.assert_close(inv, 1.0 / (500000.0 ** (torch.arange(0, 128, 2).float() / 128)))


def test_rope_on_an_empty_batch_and_its_refusals():
    inv = dec.rope_frequencies(8, device=DEVICE)
    x = torch.randn(0, 2, 8, device=DEVICE)
    assert dec.apply_rope_(x, torch.zeros(0, dtype=torch.int64, device=DEVICE), inv) is x
    x = torch.randn(3, 2, 8, device=DEVICE)
    pos = torch.arange(3, device=DEVICE)
    for args, error, match in [((x, pos[:2], inv), ValueError, "3 positions"),
                               ((x, pos, inv[:3]), ValueError, "4 frequencies"),
                               ((x[..., :6], pos, inv[:3]), ValueError, "power of two"),
                               ((x.transpose(1, 2), pos, inv[:1]), ValueError, "stride 1"),
                               ((x, pos.float(), inv), TypeError, "positions has dtype"),
                               ((x, pos, inv.double()), TypeError, "inv_freq has dtype"),
                               ((x[:1].expand(3, 2, 8), pos, inv), ValueError, "share memory"),
                               ((x.clone().requires_grad_(), pos, inv), ValueError, "requires grad")]:
        with pytest.raises(error, match=match):
            dec.apply_rope_(*args)


def test_rope_tells_autograd_it_wrote_in_place():
    """Under no_grad it may rotate a tensor autograd saved; then the version counter makes backward refuse, as
    after PyTorch's own in-place ops, instead of a silently wrong gradient."""
    a = torch.randn(2, 1, 8, device=DEVICE, requires_grad=True)
    y = a.exp()  # exp saves its output for the backward
    with torch.no_grad():
        dec.apply_rope_(y, torch.tensor([5, 9], device=DEVICE), dec.rope_frequencies(8, device=DEVICE))
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.sum().backward()


def test_write_kv_puts_each_token_in_its_slot_and_only_there():
    torch.manual_seed(1)
    k_pool, v_pool = torch.zeros(7, 5, 3, 16, device=DEVICE), torch.zeros(7, 5, 3, 16, device=DEVICE)
    tables = torch.tensor([[6, 2, 0], [4, 1, 3]], device=DEVICE, dtype=torch.int32)
    qkv = torch.randn(2, 9, 16, device=DEVICE)  # k and v are views of a fused projection: heads 3-5 and 6-8
    k, v = qkv[:, 3:6], qkv[:, 6:9]
    dec.write_kv(k_pool, v_pool, k, v, tables, torch.tensor([14, 5], device=DEVICE))  # page 5: block 0 row 4, 1 row 0
    expected_k, expected_v = torch.zeros_like(k_pool), torch.zeros_like(v_pool)
    expected_k[0, 4], expected_v[0, 4], expected_k[1, 0], expected_v[1, 0] = k[0], v[0], k[1], v[1]
    assert torch.equal(k_pool, expected_k) and torch.equal(v_pool, expected_v)
    dec.write_kv(k_pool, v_pool, k[:0], v[:0], tables[:0], torch.zeros(0, dtype=torch.int32, device=DEVICE))


def test_write_kv_and_rope_read_strided_tables_positions_and_frequencies():
    """Index tensors that are views (a column step in the tables, every other position or frequency): each entry is
    read where it is, not as if the tensor were packed (a table read as packed wrote into the wrong block)."""
    k_pool, v_pool = torch.zeros(8, 4, 2, 16, device=DEVICE), torch.zeros(8, 4, 2, 16, device=DEVICE)
    k, v = torch.randn(2, 2, 16, device=DEVICE), torch.randn(2, 2, 16, device=DEVICE)
    tables = torch.tensor([[3, 0, 5, 0], [6, 0, 7, 0]], device=DEVICE, dtype=torch.int32)[:, ::2]  # [[3, 5], [6, 7]]
    positions = torch.tensor([5, 0, 2, 0], device=DEVICE, dtype=torch.int32)[::2]  # [5, 2]
    dec.write_kv(k_pool, v_pool, k, v, tables, positions)
    expected_k = torch.zeros_like(k_pool)
    expected_k[5, 1], expected_k[6, 2] = k[0], k[1]  # token 0: block tables[0, 1] = 5, row 1; token 1: block 6, row 2
    assert torch.equal(k_pool, expected_k)
    x = torch.randn(4, 3, 16, device=DEVICE)
    positions = torch.tensor([0, 99, 5, 99, 17, 99, 1000, 99], device=DEVICE)[::2]
    inv_freq = torch.stack([dec.rope_frequencies(16, device=DEVICE), torch.zeros(8, device=DEVICE)], 1)[:, 0]
    expected = _rope_reference(x, positions.contiguous(), inv_freq.contiguous())
    torch.testing.assert_close(dec.apply_rope_(x.clone(), positions, inv_freq), expected, rtol=1e-5, atol=1e-5)


def test_write_kv_refusals():
    k_pool = torch.zeros(4, 8, 2, 16, device=DEVICE)
    k, tables, pos = torch.randn(2, 2, 16, device=DEVICE), torch.zeros(2, 1, dtype=torch.int32, device=DEVICE), \
        torch.zeros(2, dtype=torch.int32, device=DEVICE)
    for args, error, match in [((k_pool, k_pool, k, k[:, :1], tables, pos), ValueError, "must match"),
                               ((k_pool, k_pool[:, :4], k, k, tables, pos), ValueError, "must match"),
                               ((k_pool, k_pool, k, k, tables[:1], pos), ValueError, "one block table"),
                               ((k_pool, k_pool, k, k, tables.long(), pos), TypeError, "block_tables has dtype"),
                               ((k_pool, k_pool, k.half(), k.half(), tables, pos), TypeError, "dtype"),
                               ((k_pool, k_pool, k[..., ::2], k[..., ::2], tables, pos), ValueError, "must match"),
                               ((k_pool[:, :0], k_pool[:, :0], k, k, tables, pos), ValueError, "no slot"),
                               ((k_pool[:0], k_pool[:0], k, k, tables, pos), ValueError, "no slot"),
                               ((k_pool, k_pool, k, k, tables[:, :0], pos), ValueError, "no slot"),
                               ((*(k_pool[:1].expand(4, 8, 2, 16),) * 2, k, k, tables, pos), ValueError,
                                "share memory")]:
        with pytest.raises(error, match=match):
            dec.write_kv(*args)


def test_write_kv_of_no_heads_or_no_features_writes_nothing():
    tables, pos = torch.zeros(2, 1, dtype=torch.int32, device=DEVICE), torch.zeros(2, dtype=torch.int32, device=DEVICE)
    for g, d in ((0, 16), (2, 0)):
        pool, k = torch.zeros(4, 8, g, d, device=DEVICE), torch.randn(2, g, d, device=DEVICE)
        dec.write_kv(pool, pool.clone(), k, k, tables, pos)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("M,N,K", [(1, 33, 100), (5, 64, 128), (16, 200, 17), (64, 72, 256), (100, 40, 64)])
def test_decode_linear_every_epilogue_matches_torch(dtype, M, N, K):
    torch.manual_seed(2)
    x, r = torch.randn(M, K, device=DEVICE, dtype=dtype), torch.randn(M, N, device=DEVICE, dtype=dtype)
    w, up = (torch.randn(N, K, device=DEVICE, dtype=dtype) / K**0.5 for _ in "wu")
    truth = x.double() @ w.double().T
    tol = dict(rtol=1e-4, atol=1e-4) if dtype == torch.float32 else dict(rtol=2e-2, atol=2e-2)
    torch.testing.assert_close(dec.decode_linear(x, w).double(), truth, **tol)
    torch.testing.assert_close(dec.decode_linear(x, w, residual=r).double(), truth + r.double(), **tol)
    torch.testing.assert_close(dec.decode_linear(x, w, up=up).double(),
                               F.silu(truth) * (x.double() @ up.double().T), **tol)


def test_decode_linear_on_views_and_degenerate_sizes():
    big = torch.randn(10, 80, device=DEVICE)
    x, w = big[::3, :40], torch.randn(30, 80, device=DEVICE)[:, 40:]  # strided rows of x and of w
    torch.testing.assert_close(dec.decode_linear(x, w), x @ w.T, rtol=1e-4, atol=1e-4)
    assert dec.decode_linear(x[:0], w).shape == (0, 30)
    assert dec.decode_linear(x, w[:0]).shape == (4, 0)
    r = torch.randn(4, 30, device=DEVICE)
    assert torch.equal(dec.decode_linear(x[:, :0], w[:, :0], residual=r), r)  # K = 0: the epilogue of a zero sum
    assert torch.equal(dec.decode_linear(x[:, :0], w[:, :0], up=w[:, :0]), torch.zeros(4, 30, device=DEVICE))
    up = torch.randn(30, 64, device=DEVICE)[:, :40]  # an up projection whose rows are not w's stride apart
    torch.testing.assert_close(dec.decode_linear(x, w, up=up), F.silu(x @ w.T) * (x @ up.T), rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(dec.decode_linear(x, w.contiguous(), up=up), F.silu(x @ w.T) * (x @ up.T), rtol=1e-4,
                               atol=1e-4)


class _SharedMemoryFor:
    """Stands in for decode_linear_kernel on a device whose shared memory holds `fit` stages of the tile."""

    def __init__(self, fit, real):
        self.fit, self.real, self.tried = fit, real, []

    def __getitem__(self, grid):
        def launch(*args, num_stages, **kwargs):
            self.tried.append(num_stages)
            if num_stages > self.fit:
                raise OutOfResources(num_stages * 65536, max(self.fit, 0) * 65536, "shared memory")
            return self.real[grid](*args, num_stages=num_stages, **kwargs)
        return launch


@pytest.mark.parametrize("fit", [2, 0])
def test_decode_linear_takes_fewer_stages_where_shared_memory_is_short(monkeypatch, fit):
    fake = _SharedMemoryFor(fit, dec.decode_linear_kernel)
    monkeypatch.setattr(dec, "decode_linear_kernel", fake)
    monkeypatch.setattr(dec, "_stages_that_fit", {})
    x, w, tile = torch.randn(3, 40, device=DEVICE), torch.randn(24, 40, device=DEVICE), (16, 16, 16, 4, 4)
    if fit == 0:  # not even one stage fits: the device's error, not a wrong result
        with pytest.raises(OutOfResources):
            dec.decode_linear(x, w, tile=tile)
        assert fake.tried == [4, 3, 2, 1]
        return
    torch.testing.assert_close(dec.decode_linear(x, w, tile=tile), x @ w.T, rtol=1e-4, atol=1e-4)
    assert fake.tried == [4, 3, 2]
    dec.decode_linear(x, w, tile=tile)
    assert fake.tried == [4, 3, 2, 2]  # remembered for this device, dtype, epilogue and tile


def test_decode_linear_refusals():
    x, w, r = torch.randn(3, 8, device=DEVICE), torch.randn(5, 8, device=DEVICE), torch.randn(3, 5, device=DEVICE)
    for kwargs, error, match in [(dict(x=x, weight=w[:, :4]), ValueError, "needs a weight"),
                                 (dict(x=x, weight=w, up=w[:4]), ValueError, "same shape"),
                                 (dict(x=x, weight=w, residual=r[:2]), ValueError, "residual must be"),
                                 (dict(x=x, weight=w, residual=r, up=w), ValueError, "two different epilogues"),
                                 (dict(x=x, weight=w.T.contiguous().T), ValueError, "stride 1"),
                                 (dict(x=x, weight=w.double()), TypeError, "dtype"),
                                 (dict(x=x[0], weight=w), ValueError, "2-D"),
                                 (dict(x=x, weight=w, tile=(16, 48, 64, 4, 2)), ValueError, "BLOCK_N must be"),
                                 (dict(x=x, weight=w, tile=(16, 64, 8, 4, 2)), ValueError, "BLOCK_K must be"),
                                 (dict(x=x, weight=w, tile=(16, 64, 64, 3, 2)), ValueError, "num_warps must be"),
                                 (dict(x=x, weight=w, tile=(16, 64, 64, 4, 0)), ValueError, "num_stages must be"),
                                 (dict(x=x[:, :0], weight=w[:, :0], tile=(16, 48, 64, 4, 2)), ValueError, "BLOCK_N")]:
        with pytest.raises(error, match=match):
            dec.decode_linear(**kwargs)


@pytest.mark.skipif(not GPU, reason="CUDA graphs need a CUDA GPU")
def test_decode_kernels_run_in_a_cuda_graph():
    torch.manual_seed(3)
    half = usable((torch.bfloat16, torch.float16))[0]  # fp16 below compute capability 8.0
    x, w = torch.randn(8, 4096, device="cuda", dtype=half), torch.randn(1024, 4096, device="cuda", dtype=half) / 64
    heads, pos = torch.randn(8, 12, 128, device="cuda", dtype=half), torch.arange(8, device="cuda") * 999
    inv = dec.rope_frequencies(128, device="cuda")
    expected_y, expected_heads = dec.decode_linear(x, w), _rope_reference(heads, pos, inv)
    dec.apply_rope_(heads.clone(), pos, inv)  # compiles outside the capture
    start = heads.clone()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        y = dec.decode_linear(x, w)
        dec.apply_rope_(heads, pos, inv)
    heads.copy_(start)
    graph.replay()
    torch.testing.assert_close(y, expected_y)
    torch.testing.assert_close(heads, expected_heads)


def test_write_kv_refuses_wrong_ranks_and_non_tensors():
    pool = torch.zeros(4, 8, 2, 16, device=DEVICE)
    k, tables = torch.randn(2, 2, 16, device=DEVICE), torch.zeros(2, 1, dtype=torch.int32, device=DEVICE)
    pos = torch.zeros(2, dtype=torch.int32, device=DEVICE)
    with pytest.raises(ValueError, match="need pools"):
        dec.write_kv(pool, pool, k[0], k[0], tables, pos)
    with pytest.raises(TypeError, match="must be a torch.Tensor"):
        dec.write_kv(pool, pool, None, k, tables, pos)
