"""Real model shapes (Llama-3) and the FLOP formulas the transformer lessons count with."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ModelConfig:
    """The shape of a Llama-style decoder: every byte and FLOP count of the lessons is computed from it."""

    name: str
    n_layers: int
    d_model: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    d_ff: int
    vocab: int

    def attention_params(self) -> int:
        """Wq, Wk, Wv (query heads and key/value heads) and Wo of one layer."""
        d, hd = self.d_model, self.head_dim
        return d * (self.n_heads + 2 * self.n_kv_heads) * hd + self.n_heads * hd * d

    def layer_params(self) -> int:
        """Attention + the gated MLP (gate, up, down) + the two RMSNorm weight vectors of one layer."""
        return self.attention_params() + 3 * self.d_model * self.d_ff + 2 * self.d_model

    def params(self) -> int:
        """Every layer, the embedding and the (untied) output head, and the final norm."""
        return self.n_layers * self.layer_params() + 2 * self.vocab * self.d_model + self.d_model

    def kv_bytes_per_token(self, bytes_per_value: int = 2) -> int:
        """K and V, in every layer, for one token: 2 * layers * kv_heads * head_dim * bytes."""
        return 2 * self.n_layers * self.n_kv_heads * self.head_dim * bytes_per_value


LLAMA3_8B = ModelConfig("Llama-3-8B", n_layers=32, d_model=4096, n_heads=32, n_kv_heads=8, head_dim=128,
                        d_ff=14336, vocab=128256)
LLAMA3_70B = ModelConfig("Llama-3-70B", n_layers=80, d_model=8192, n_heads=64, n_kv_heads=8, head_dim=128,
                         d_ff=28672, vocab=128256)


def attention_flops(batch: int, heads: int, n_q: int, n_k: int, head_dim: int, causal: bool = False,
                    *, causal_half: bool = False) -> int:
    """Matmul FLOPs of an attention forward: S = QK^T and O = PV, 2 * n_q * n_k * head_dim each, per head.

    With `causal`, only the scores the mask keeps (query i sees keys 0..i, PyTorch's `is_causal`):
    exactly n(n + 1) / 2 of them when n_q = n_k = n. `causal_half=True` counts n_q * n_k / 2 instead,
    the convention FlashAttention's papers and benchmarks report TFLOP/s with.
    """
    full = 4 * batch * heads * head_dim * n_q * n_k
    if not causal:
        return full
    if causal_half:
        return full // 2
    kept = min(n_q, n_k)
    scores = kept * (kept + 1) // 2 + max(n_q - n_k, 0) * n_k
    return 4 * batch * heads * head_dim * scores


def attention_min_bytes(batch: int, heads: int, n: int, head_dim: int, bytes_per_value: int) -> int:
    """The least HBM traffic of an attention forward with n_q = n_k = n: read Q, K, V and write O once each."""
    return 4 * batch * heads * n * head_dim * bytes_per_value
