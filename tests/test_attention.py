import pytest
import torch

from gpu_ml.attention import causal_mask, check_qkv


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
])
def test_check_qkv_refuses(args, causal, error, match):
    with pytest.raises(error, match=match):
        check_qkv(*args, causal=causal)
    if error is ValueError and "queries" not in match:
        with pytest.raises(error, match="shapes must be"):
            check_qkv(*args, causal=causal)
