import dataclasses

import pytest
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

from gpu_ml.models import LLAMA3_8B, LLAMA3_70B, ModelConfig, attention_flops, attention_min_bytes


def test_llama3_parameter_counts():
    # the published sizes: 8.03 B and 70.6 B parameters
    assert LLAMA3_8B.params() == 8_030_261_248
    assert LLAMA3_70B.params() == 70_553_706_496
    assert LLAMA3_8B.layer_params() == LLAMA3_8B.attention_params() + 3 * 4096 * 14336 + 2 * 4096


def test_kv_bytes_per_token():
    assert LLAMA3_8B.kv_bytes_per_token() == 128 * 1024  # 2 * 32 layers * 8 heads * 128 * 2 bytes
    assert LLAMA3_70B.kv_bytes_per_token(bytes_per_value=1) == 160 * 1024
    mha = dataclasses.replace(LLAMA3_8B, n_kv_heads=LLAMA3_8B.n_heads)
    assert mha.kv_bytes_per_token() == 4 * LLAMA3_8B.kv_bytes_per_token()
    assert mha.attention_params() == 4 * 4096 * 4096


def test_config_is_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        LLAMA3_8B.n_layers = 1  # type: ignore[misc]


def test_attention_flops_matches_flop_counter():
    B, H, n_q, n_k, d = 2, 3, 5, 7, 4
    q, k, v = torch.randn(B, H, n_q, d), torch.randn(B, H, n_k, d), torch.randn(B, H, n_k, d)
    # the math backend: torch 2.11's counter misses the CPU flash kernel (it counted 0 on the H200 machine)
    with sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:
        F.scaled_dot_product_attention(q, k, v)
    assert counter.get_total_flops() == attention_flops(B, H, n_q, n_k, d)


@pytest.mark.parametrize(("n_q", "n_k"), [(1, 1), (6, 6), (7, 7), (4, 9), (9, 4)])
def test_causal_counts_kept_scores(n_q, n_k):
    kept = int(torch.ones(n_q, n_k).tril().sum())  # PyTorch's is_causal mask: query i sees keys 0..i
    assert attention_flops(2, 3, n_q, n_k, 8, causal=True) == 4 * 2 * 3 * 8 * kept


def test_causal_half_is_flash_attention_convention():
    full = attention_flops(2, 16, 4096, 4096, 128)
    assert attention_flops(2, 16, 4096, 4096, 128, True, causal_half=True) == full // 2
    assert attention_flops(1, 1, 7, 7, 1, True, causal_half=True) == 4 * 49 // 2
    exact = attention_flops(1, 1, 7, 7, 1, True)
    assert exact == 4 * 28 and exact > attention_flops(1, 1, 7, 7, 1, True, causal_half=True)
    assert attention_flops(2, 16, 64, 64, 128, causal_half=True) == attention_flops(2, 16, 64, 64, 128)


def test_model_config_fields():
    tiny = ModelConfig("tiny", n_layers=1, d_model=64, n_heads=4, n_kv_heads=2, head_dim=16, d_ff=96, vocab=0)
    assert tiny.layer_params() == 64 * 8 * 16 + 4 * 16 * 64 + 3 * 64 * 96 + 2 * 64
    assert tiny.params() == tiny.layer_params() + 64


def test_attention_min_bytes_is_q_k_v_o():
    q = torch.empty(2, 3, 50, 16, dtype=torch.float16)
    assert attention_min_bytes(2, 3, 50, 16, 2) == 4 * q.nbytes
