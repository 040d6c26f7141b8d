"""What the kernel tests share: the device they run on, the dtypes it has, and flash-attention's accuracy criterion
(our error against a float64 reference at most twice PyTorch's own error in the same dtype, plus a small floor)."""

from __future__ import annotations

import torch

from gpu_ml.validate import kernel_device, usable

DEVICE = kernel_device()
GPU = DEVICE == "cuda"
FLOATS = usable((torch.float32, torch.float16, torch.bfloat16))
FLOOR = {torch.float32: 1e-6, torch.float16: 1e-3, torch.bfloat16: 8e-3}  # about one ulp at 1.0 (fp32: 8)


def assert_as_accurate_as_torch(ours, torch_same_dtype, exact, *, factor=2.0, floor=None, name=""):
    """max|ours - exact| <= factor * max|torch - exact| + floor, NaN and inf where `exact` has them.

    The default floor is about one ulp of the largest exact value in torch's dtype.
    """
    ours, theirs, exact = (t.detach().double().cpu() for t in (ours, torch_same_dtype, exact))
    assert ours.shape == exact.shape, f"{name}: shape {tuple(ours.shape)} != {tuple(exact.shape)}"
    special = ~torch.isfinite(exact)
    nan = exact[special].isnan()  # compared apart: nan_to_num would take a NaN turned into 0 for a match
    assert torch.equal(ours[special].isnan(), nan) and torch.equal(ours[special][~nan], exact[special][~nan]), (
        f"{name}: NaN/inf differ from the reference"
    )
    finite = ~special
    if not finite.any():
        return
    err = (ours[finite] - exact[finite]).abs().max().item()
    torch_err = (theirs[finite] - exact[finite]).abs().nan_to_num(0.0).max().item()
    if floor is None:
        floor = FLOOR[torch_same_dtype.dtype] * max(1.0, exact[finite].abs().max().item())
    bound = factor * torch_err + floor
    assert err <= bound, f"{name}: error {err:.3g} > {factor} x torch's {torch_err:.3g} + {floor:.2g}"
