import pytest
import torch
import torch.nn.functional as F

from gpu_ml.attention import causal_mask, check_qkv, gqa_sdpa, grouped_sdpa


def test_causal_mask():
    m = causal_mask(4, "cpu")
    assert m.dtype == torch.bool and m.shape == (4, 4)
    assert torch.equal(m, torch.ones(4, 4, dtype=torch.bool).triu(1))
    assert causal_mask(4, "cpu") is m  # cached


def test_check_qkv_accepts():
    q, k, v = torch.randn(2, 3, 5, 8), torch.randn(2, 3, 7, 8), torch.randn(2, 3, 7, 4)
    check_qkv(q, k, v)
    check_qkv(q, q, q, causal=True)


@pytest.mark.parametrize(("args", "causal", "error", "match"), [
    ((torch.randn(5, 8), torch.randn(5, 6), torch.randn(5, 8)), False, ValueError, "same head dim"),
    ((torch.randn(5, 8), torch.randn(5, 8), torch.randn(4, 8)), False, ValueError, "same number of tokens"),
    ((torch.randn(2, 5, 8), torch.randn(3, 5, 8), torch.randn(3, 5, 8)), False, ValueError, "leading"),
    ((torch.randn(8), torch.randn(5, 8), torch.randn(5, 8)), False, ValueError, "tokens, features"),
    ((torch.randn(4, 8), torch.randn(5, 8), torch.randn(5, 8)), True, ValueError, "as many queries as keys"),
    ((torch.randn(5, 8), torch.randn(5, 8).double(), torch.randn(5, 8)), False, TypeError, "one floating dtype"),
    ((torch.ones(5, 8, dtype=torch.int32),) * 3, False, TypeError, "one floating dtype"),
    ((torch.randn(5, 8), torch.randn(5, 8), "v"), False, TypeError, "torch.Tensor"),
    ((torch.randn(5, 8), torch.empty(5, 8, device="meta"), torch.randn(5, 8)), False, ValueError, "one device"),
])
def test_check_qkv_refuses(args, causal, error, match):
    with pytest.raises(error, match=match):
        check_qkv(*args, causal=causal)
    if error is ValueError and match not in ("as many queries as keys", "one device"):
        with pytest.raises(error, match="shapes must be"):
            check_qkv(*args, causal=causal)


@pytest.mark.parametrize(("T", "S", "causal"), [(1, 37, False), (5, 37, False), (16, 16, True), (1, 1, False)])
def test_grouped_heads_without_enable_gqa_match_sdpa_with_it(T, S, causal):
    torch.manual_seed(0)
    q, k, v = torch.randn(2, 8, T, 16), torch.randn(2, 2, S, 16), torch.randn(2, 2, S, 16)
    expected = F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True)
    torch.testing.assert_close(grouped_sdpa(q, k, v, causal), expected)
    torch.testing.assert_close(gqa_sdpa(q, k, v, causal), expected)  # on a CPU: the math backend


@pytest.mark.parametrize("kv_heads", [3, 16, 0])
def test_grouped_sdpa_refuses_heads_that_do_not_group(kv_heads):
    q, k = torch.randn(2, 8, 4, 16), torch.randn(2, kv_heads, 4, 16)
    with pytest.raises(ValueError, match="q's 8 heads must be a multiple of k's"):
        grouped_sdpa(q, k, k)
