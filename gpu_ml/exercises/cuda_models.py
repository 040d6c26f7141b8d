"""Exercises of cuda/03-nn-components 03-04 and cuda/04-mnist-classifier (CUDA ones graded like cudalings).

Every output a kernel writes is followed by GUARD untouched elements (gpu_ml.cudalings._buffer/inside_guard), so a store
past the end is caught; outputs a kernel only updates in place (Adam's p, m, v; accumulated gradients) start from
given values instead of NaN.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F

from gpu_ml.cudalings import Cases, Cudaling, checked_call, guarded_buffer, inside_guard, randn_on, seeded_rng
from gpu_ml.exercises.core import CudaExercise, Exercise
from gpu_ml.exercises.cuda_nn import softmax_backward_ref, softmax_backward_run  # the same dx = y * (dy - sum)

ACTIVATIONS = "cuda/03-nn-components/03_activations_and_cross_entropy.ipynb"
EXTENSION = "cuda/03-nn-components/04_pytorch_extension.ipynb"
MNIST = "cuda/04-mnist-classifier/01_mnist_mlp_cuda.ipynb"
IGNORE = -100  # cross_entropy_rows' ignore_index, as F.cross_entropy's default


def _filled(values: torch.Tensor) -> torch.Tensor:
    """A guarded buffer (see guarded_buffer) whose first values.numel() elements are `values` (an output updated in
    place)."""
    buf = guarded_buffer(values.numel(), values.device.type, values.dtype)
    buf[: values.numel()] = values.flatten()
    return buf


def _extremes(x: torch.Tensor, big: float) -> torch.Tensor:
    """x with +-100 and +-big mixed in: where exp(+-z) overflows fp32 and a careless formula gives inf / inf."""
    x = x.clone()
    flat = x.view(-1)
    flat[::7], flat[1::7], flat[2::11], flat[3::11] = 100.0, -100.0, big, -big
    return x


# ----------------------------------------------------------------------------- 03: bias + SiLU, cross-entropy


def _silu_fwd_cases(device: str) -> Cases:
    g = seeded_rng()
    cases = {f"{r} x {c}": (2 * randn_on(g, r, c, device=device), randn_on(g, c, device=device))
             for r, c in [(1, 1), (5, 3), (37, 300), (1031, 257)]}
    cases["37 x 40, x of +-100 and +-1e4 (exp overflows)"] = (
        _extremes(2 * randn_on(g, 37, 40, device=device), 1e4), randn_on(g, 40, device=device))
    return cases


def _silu_fwd_run(fn: Callable, x: torch.Tensor, b: torch.Tensor):
    rows, cols = x.shape
    y = guarded_buffer(x.numel(), x.device.type)
    checked_call(fn, x, b, y, rows, cols)
    return inside_guard(y, x.numel(), "y").view(rows, cols)


def _silu_fwd_ref(x: torch.Tensor, b: torch.Tensor):
    return F.silu(x.double() + b.double())


def _silu_bwd_cases(device: str) -> Cases:
    g = seeded_rng()
    cases = {}
    for r, c, groups in [(1, 1, 1), (5, 3, 2), (2, 300, 3), (1031, 257, 8), (64, 1000, 64)]:
        note = ": group 2 has no rows" if groups > r else ""
        cases[f"{r} x {c}, {groups} group(s){note}"] = (
            randn_on(g, r, c, device=device), 2 * randn_on(g, r, c, device=device), randn_on(g, c, device=device),
            groups)
    cases["37 x 40, 4 groups, x of +-100 and +-1e4 (exp overflows)"] = (
        randn_on(g, 37, 40, device=device), _extremes(2 * randn_on(g, 37, 40, device=device), 1e4),
        randn_on(g, 40, device=device), 4)
    return cases


def _silu_bwd_run(fn: Callable, dy: torch.Tensor, x: torch.Tensor, b: torch.Tensor, groups: int):
    rows, cols = x.shape
    dev = x.device.type
    dx, db, partials = guarded_buffer(x.numel(), dev), guarded_buffer(cols, dev), guarded_buffer(groups * cols, dev)
    checked_call(fn, dy, x, b, dx, db, partials, rows, cols, groups)
    inside_guard(partials, groups * cols, "partials")
    return inside_guard(dx, x.numel(), "dx").view(rows, cols), inside_guard(db, cols, "db")


def _silu_bwd_ref(dy: torch.Tensor, x: torch.Tensor, b: torch.Tensor, groups: int):
    x64, b64 = x.double().requires_grad_(), b.double().requires_grad_()
    with torch.enable_grad():
        F.silu(x64 + b64).backward(dy.double())
    return x64.grad, b64.grad


def _ce_cases(device: str) -> Cases:
    g = seeded_rng()

    def targets(*t: int) -> torch.Tensor:
        return torch.tensor(t, dtype=torch.int64, device=device)

    def randint(rows: int, V: int) -> torch.Tensor:
        return torch.randint(0, V, (rows,), generator=g).to(device)

    t37 = randint(37, 1000)
    t37[::5] = IGNORE
    big = (torch.randint(0, 2, (9, 10), generator=g) * 2e4 - 1e4).to(device)
    big[0], big[1] = 1e4, -1e4  # equal logits: a softmax of exactly 1/10
    masked, inf = 3 * randn_on(g, 6, 100, device=device), float("-inf")
    masked[0, :90] = inf  # lanes 4..25 see only -inf: (m, s) must stay (-inf, 0), not NaN
    masked[1, 50:] = inf
    masked[2, :], masked[2, 37] = inf, 2.0  # one finite logit
    masked[3, 1] = inf  # its target: an infinite loss, a finite gradient
    masked[4, :] = inf  # nothing finite: NaN, as in PyTorch
    return {
        "1 x 1": (randn_on(g, 1, 1, device=device), targets(0)),
        "3 x 31": (3 * randn_on(g, 3, 31, device=device), randint(3, 31)),
        "37 x 1000, every 5th row ignored": (3 * randn_on(g, 37, 1000, device=device), t37),
        "300 x 7": (randn_on(g, 300, 7, device=device), randint(300, 7)),
        "9 x 10, logits of +-1e4": (big, targets(0, 9, 0, 9, 1, 2, 3, 4, 5)),
        "6 x 100, -inf logits (a masked head, tail, all but one, the target, all)": (masked,
                                                                                  targets(95, 0, 37, 1, 5, 7)),
        "4 x 50, targets 50 and -5 (out of range: NaN loss) and an ignored row":
            (randn_on(g, 4, 50, device=device), targets(50, -5, IGNORE, 3)),
    }


def _ce_run(fn: Callable, logits: torch.Tensor, targets: torch.Tensor):
    rows, V = logits.shape
    loss, grad = guarded_buffer(rows, logits.device.type), guarded_buffer(logits.numel(), logits.device.type)
    checked_call(fn, logits, targets, loss, grad, rows, V)
    return inside_guard(loss, rows, "loss"), inside_guard(grad, logits.numel(), "grad").view(rows, V)


def _ce_ref(logits: torch.Tensor, targets: torch.Tensor):
    x, V = logits.double(), logits.shape[1]
    valid = targets != IGNORE
    in_range = (targets >= 0) & (targets < V)
    t = targets.clamp(0, V - 1)
    lse = torch.logsumexp(x, dim=1)
    loss = torch.where(in_range, lse - x.gather(1, t[:, None])[:, 0], float("nan"))
    loss = torch.where(valid, loss, 0.0)
    grad = torch.softmax(x, dim=1) - F.one_hot(t, V).double() * in_range[:, None]
    return loss, torch.where(valid[:, None], grad, 0.0)


# ----------------------------------------------------------------------------- 04: softmax backward, GELU''


def _softmax_bwd_cases(device: str) -> Cases:
    g = seeded_rng()
    cases = {}
    for r, c, scale in [(1, 1, 1.0), (3, 31, 1.0), (7, 1000, 3.0), (33, 4099, 3.0), (5, 64, 1e4)]:
        name = f"{r} x {c}" + (", logits of scale 1e4 (one-hot rows)" if scale > 100 else "")
        y = torch.softmax(scale * randn_on(g, r, c, device=device), dim=1)
        cases[name] = (y, randn_on(g, r, c, device=device))
    return cases


def _gelu2_cases(device: str) -> Cases:
    g = seeded_rng()

    def case(r: int, c: int, big: float | None = None):
        x = 2 * randn_on(g, r, c, device=device)
        if big is not None:
            x = _extremes(x, big)
        return (randn_on(g, r, c, device=device), randn_on(g, r, c, device=device), x, randn_on(g, c, device=device))

    return {"1 x 1": case(1, 1), "5 x 3": case(5, 3), "37 x 257": case(37, 257),
            "20 x 33, x of +-100 and +-1e4": case(20, 33, 1e4),
            "20 x 33, x of +-1e20 (z * z overflows fp32, phi(z) is 0)": case(20, 33, 1e20)}


def _gelu2_run(fn: Callable, ddx: torch.Tensor, dy: torch.Tensor, x: torch.Tensor, b: torch.Tensor):
    rows, cols = x.shape
    d_dy, d_x = guarded_buffer(x.numel(), x.device.type), guarded_buffer(x.numel(), x.device.type)
    checked_call(fn, ddx, dy, x, b, d_dy, d_x, rows, cols)
    return inside_guard(d_dy, x.numel(), "d_dy").view(rows, cols), inside_guard(d_x, x.numel(), "d_x").view(rows, cols)


def _gelu2_ref(ddx: torch.Tensor, dy: torch.Tensor, x: torch.Tensor, b: torch.Tensor):
    """What autograd's double backward of F.gelu(x + b) gives, in float64: the gradients of dx = dy * GELU'(x + b)
    with respect to dy and x, for an incoming gradient ddx."""
    x64, dy64 = x.double().requires_grad_(), dy.double().requires_grad_()
    with torch.enable_grad():
        (dx,) = torch.autograd.grad(F.gelu(x64 + b.double()), x64, dy64, create_graph=True)
        d_dy, d_x = torch.autograd.grad(dx, (dy64, x64), ddx.double())
    return d_dy, d_x


def _gelu_bf16_cases(device: str) -> Cases:
    g = seeded_rng()

    def case(r: int, c: int, big: float | None = None):  # x in [-6, 2): GELU's curved part, where rounding shows
        x = 8 * torch.rand(r, c, generator=g) - 6
        if big is not None:
            x = _extremes(x, big)
        return x.to(device, torch.bfloat16), randn_on(g, c, device=device, dtype=torch.bfloat16)

    return {"1 x 1": case(1, 1), "5 x 3": case(5, 3), "37 x 300": case(37, 300), "64 x 1000": case(64, 1000),
            "20 x 33, x of +-100 and +-1e4": case(20, 33, 1e4)}


def _gelu_bf16_run(fn: Callable, x: torch.Tensor, b: torch.Tensor):
    rows, cols = x.shape
    y = guarded_buffer(x.numel(), x.device.type, torch.bfloat16)
    checked_call(fn, x, b, y, rows, cols)
    return inside_guard(y, x.numel(), "y").view(rows, cols)


def _gelu_bf16_ref(x: torch.Tensor, b: torch.Tensor):
    return F.gelu(x.double() + b.double())  # rounded once, to bf16, by the grader


# ----------------------------------------------------------------------------- 04-mnist: Adam, accumulation

BETA1, BETA2, EPS = 0.9, 0.999, 1e-8


def _adam_cases(device: str) -> Cases:
    g = seeded_rng()
    cases = {}
    for n, step in [(1, 1), (1000, 1), (1000, 10), (100_003, 3)]:
        p, grad = randn_on(g, n, device=device), randn_on(g, n, device=device)
        if step == 1:  # the state of a first step
            m, v = torch.zeros(n, device=device), torch.zeros(n, device=device)
        else:
            m, v = 0.1 * randn_on(g, n, device=device), 0.01 * randn_on(g, n, device=device).abs()
        grad.view(-1)[1::13] = 0.0  # where m and v are 0 at step 1, the update is 0 / (0 + eps) = 0
        grad.view(-1)[5::17] *= 1e-5  # gradients near 1e-5: eps outside or inside the square root differ
        cases[f"n={n}, step {step}"] = (p, grad, m, v, 1e-3 if step > 1 else 0.05, step)
    return cases


def _adam_run(fn: Callable, p: torch.Tensor, grad: torch.Tensor, m: torch.Tensor, v: torch.Tensor, lr: float,
              step: int):
    n = p.numel()
    pb, mb, vb = _filled(p), _filled(m), _filled(v)  # updated in place, in copies: the reference reads the originals
    checked_call(fn, pb, grad, mb, vb, lr, BETA1, BETA2, EPS, 1 - BETA1**step, 1 - BETA2**step, n)
    return inside_guard(pb, n, "p"), inside_guard(mb, n, "m"), inside_guard(vb, n, "v")


def _adam_ref(p: torch.Tensor, grad: torch.Tensor, m: torch.Tensor, v: torch.Tensor, lr: float, step: int):
    """torch.optim.Adam's update (no weight decay, no amsgrad), in float64."""
    p, grad, m, v = p.double(), grad.double(), m.double(), v.double()
    m = BETA1 * m + (1 - BETA1) * grad
    v = BETA2 * v + (1 - BETA2) * grad * grad
    bc1, bc2 = 1 - BETA1**step, 1 - BETA2**step
    return p - lr / bc1 * m / ((v / bc2).sqrt() + EPS), m, v


def _accumulate_cases(device: str) -> Cases:
    g = seeded_rng()

    def case(b: int, i: int, o: int):  # x, dy, y = ReLU's output (about half exactly 0), dw and db so far
        return (randn_on(g, b, i, device=device), randn_on(g, b, o, device=device),
                randn_on(g, b, o, device=device).relu(), randn_on(g, i, o, device=device),
                randn_on(g, o, device=device))

    return {f"batch {b}, {i} -> {o}": case(b, i, o)
            for b, i, o in [(1, 1, 1), (37, 33, 10), (5, 1, 100), (64, 784, 10), (3, 300, 257)]}


def _accumulate_run(fn: Callable, x: torch.Tensor, dy: torch.Tensor, y: torch.Tensor, dw: torch.Tensor,
                    db: torch.Tensor):
    (batch, n_in), n_out = x.shape, dy.shape[1]
    dwb, dbb = _filled(dw), _filled(db)  # the gradients accumulated so far, added to in place
    checked_call(fn, x, dy, y, dwb, dbb, batch, n_in, n_out)
    return inside_guard(dwb, dw.numel(), "dw").view(n_in, n_out), inside_guard(dbb, n_out, "db")


def _accumulate_ref(x: torch.Tensor, dy: torch.Tensor, y: torch.Tensor, dw: torch.Tensor, db: torch.Tensor):
    dz = dy.double() * (y > 0)  # ReLU's gradient: 0 where its output is 0
    return dw.double() + x.double().t() @ dz, db.double() + dz.sum(0)


def _count_cases(device: str) -> Cases:
    g = seeded_rng()

    def labels(logits: torch.Tensor, last_tied: bool = False) -> torch.Tensor:
        """About 70% of the rows labelled with their argmax (the first largest logit); with last_tied, rows with
        a tie are labelled with the LAST largest logit instead (a prediction that must not count)."""
        M, C = logits.shape
        y = torch.randint(0, C, (M,), generator=g)
        right = torch.rand(M, generator=g) < 0.7
        y = torch.where(right, logits.argmax(1), y)
        if last_tied:
            last = C - 1 - logits.flip(1).argmax(1)
            y = torch.where(last != logits.argmax(1), last, y)
        return y

    cases = {}
    for M, C in [(1, 1), (37, 10), (1000, 100), (100_003, 10)]:
        z = torch.randn(M, C, generator=g)
        cases[f"{M} x {C}"] = (z.to(device), labels(z).to(device))
    tied = torch.randint(0, 3, (300, 10), generator=g).float()  # many rows with two or more largest logits
    cases["300 x 10, tied logits (the first largest is the prediction)"] = (tied.to(device),
                                                                            labels(tied, last_tied=True).to(device))
    return cases


def _count_run(fn: Callable, logits: torch.Tensor, labels: torch.Tensor):
    M, C = logits.shape
    correct = guarded_buffer(1, logits.device.type, torch.int32)  # -1 until the host function zeroes it
    checked_call(fn, logits, labels, correct, M, C)
    return inside_guard(correct, 1, "correct")


def _count_ref(logits: torch.Tensor, labels: torch.Tensor):
    return (logits.argmax(1) == labels).sum().reshape(1).int()  # argmax: the first of equal largest values


# ----------------------------------------------------------------------------- the exercises

EXERCISES: list[Exercise] = []
CUDA_EXERCISES: list[CudaExercise] = [
    CudaExercise(ACTIVATIONS, Cudaling("bias_silu_fwd", ("float*", "float*", "float*", "int", "int"),
                                       _silu_fwd_cases, _silu_fwd_run, _silu_fwd_ref, atol=1e-5, rtol=1e-5)),
    CudaExercise(ACTIVATIONS, Cudaling("bias_silu_bwd", ("float*", "float*", "float*", "float*", "float*", "float*",
                                                         "int", "int", "int"),
                                       _silu_bwd_cases, _silu_bwd_run, _silu_bwd_ref, atol=1e-4, rtol=1e-4)),
    CudaExercise(ACTIVATIONS, Cudaling("cross_entropy_rows", ("float*", "long long*", "float*", "float*", "int", "int"),
                                       _ce_cases, _ce_run, _ce_ref, atol=1e-5, rtol=1e-4)),
    CudaExercise(EXTENSION, Cudaling("softmax_backward", ("float*", "float*", "float*", "int", "int"),
                                     _softmax_bwd_cases, softmax_backward_run, softmax_backward_ref, atol=1e-6,
                                     rtol=1e-4)),
    CudaExercise(EXTENSION, Cudaling("gelu_double_backward", ("float*", "float*", "float*", "float*", "float*",
                                                              "float*", "int", "int"),
                                     _gelu2_cases, _gelu2_run, _gelu2_ref, atol=1e-5, rtol=1e-4)),
    # rtol 2^-7: one bf16 rounding step (an fp32 result next to a rounding boundary may round the other way)
    CudaExercise(EXTENSION, Cudaling("bias_gelu_bf16", ("__nv_bfloat16*", "__nv_bfloat16*", "__nv_bfloat16*", "int",
                                                        "int"),
                                     _gelu_bf16_cases, _gelu_bf16_run, _gelu_bf16_ref, atol=1e-6, rtol=2**-7)),
    CudaExercise(MNIST, Cudaling("adam_step", ("float*", "float*", "float*", "float*", "float", "float", "float",
                                               "float", "float", "float", "long long"),
                                 _adam_cases, _adam_run, _adam_ref, atol=1e-6, rtol=1e-4)),
    CudaExercise(MNIST, Cudaling("linear_grads_accumulate", ("float*", "float*", "float*", "float*", "float*", "int",
                                                             "int", "int"),
                                 _accumulate_cases, _accumulate_run, _accumulate_ref, atol=1e-4, rtol=1e-4)),
    CudaExercise(MNIST, Cudaling("count_correct", ("float*", "long long*", "int*", "int", "int"),
                                 _count_cases, _count_run, _count_ref)),
]
