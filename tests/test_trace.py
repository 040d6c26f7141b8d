import pytest
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from gpu_ml.trace import Op, Traffic, matmul_flops, peak_bytes


def test_unfused_elementwise_bytes():
    x, y = torch.rand(1000), torch.rand(1000)
    with Traffic() as t:
        (x + y) * 2
    assert [(op.name, op.overload, op.dtype) for op in t.ops] == [("add", "add.Tensor", "float32"),
                                                                  ("mul", "mul.Tensor", "float32")]
    assert [(op.read, op.written) for op in t.ops] == [(8000, 4000), (4000, 4000)]
    assert t.total_bytes() == 20 * 1000 and t.total_flops() == 0


def test_views_and_allocations_are_free():
    x = torch.rand(64, 32)
    with Traffic() as t:
        x.t().reshape(-1)[:10].unsqueeze(0).detach()  # the reshape of a transpose copies: one op
        torch.empty(100)
    assert [op.name for op in t.ops] == ["clone"]
    assert t.ops[0].nbytes == 2 * x.nbytes


def test_in_place_op_reads_and_writes():
    x = torch.rand(100)
    with Traffic() as t:
        x.mul_(2)
    assert t.ops == [Op("mul_", "mul_.Tensor", "float32", 0, 400, 400)]


def test_matmul_flops_on_meta_tensors():
    a, b = torch.empty(3, 5, 7, device="meta", dtype=torch.bfloat16), torch.empty(3, 7, 11, device="meta")
    with Traffic() as t:
        a @ b.to(torch.bfloat16)
        torch.addmm(torch.empty(11, device="meta"), torch.empty(5, 7, device="meta"), torch.empty(7, 11, device="meta"))
    assert [op.name for op in t.ops] == ["_to_copy", "bmm", "addmm"]
    assert [op.flops for op in t.ops] == [0, 2 * 3 * 5 * 7 * 11, 2 * 5 * 7 * 11]
    assert t.ops[1].dtype == "bfloat16" and t.ops[1].written == 3 * 5 * 11 * 2
    assert matmul_flops("add", (a, b)) == 0


def test_safe_softmax_is_expanded():
    q = torch.empty(1, 2, 16, 8, device="meta")
    with Traffic() as t, sdpa_kernel(SDPBackend.MATH):
        F.scaled_dot_product_attention(q, q, q)
    names = [op.name for op in t.ops]
    assert "_safe_softmax" not in names
    assert names[-5:-1] == ["softmax", "isneginf", "all", "where"]
    assert t.total_flops() == 4 * 2 * 16 * 16 * 8  # QK^T and PV


@pytest.mark.skipif(torch.cuda.is_available(), reason="CPU behaviour")
def test_peak_bytes_refuses_without_gpu():
    with pytest.raises(RuntimeError, match="needs a CUDA GPU"):
        peak_bytes(lambda: None)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_peak_bytes_on_gpu():
    keep = torch.empty(2**20, device="cuda")  # allocated before: not counted
    assert peak_bytes(lambda: torch.empty(2**22, device="cuda")) == 4 * 2**22
    assert peak_bytes(lambda: None) == 0
    del keep
