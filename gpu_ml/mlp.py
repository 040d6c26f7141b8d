"""The flat-buffer MLP both MNIST notebooks train on their own kernels, the PyTorch model they compare
it with, and the checks of its gradients, its optimizer and the exercises.

A track plugs in its kernels: a `FlatMLP` subclass sets `linear` (its autograd Function), a
`FlatSGD` subclass implements `step()` (one launch over the flat buffers).
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable

import torch
import torch.nn.functional as F

from gpu_ml.check import check
from gpu_ml.grading import Verdict, grade

SIZES = (784, 512, 512, 10)
Loss = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]  # (logits, labels) -> mean loss
Device = str | torch.device | None  # None: the GPU if there is one, else the CPU (Triton's interpreter)


def _device(device: Device) -> str | torch.device:
    return device if device is not None else ("cuda" if torch.cuda.is_available() else "cpu")


class FlatMLP(torch.nn.Module):
    """An MLP (ReLU between layers) whose parameters and gradients live in two flat fp32 buffers.

    Weights are stored [in, out], so the forward is x @ W. Every parameter is a view into `flat` and
    its `.grad` a view into `flat_grad`, so `model.layers[0].weight.grad` reads like PyTorch's. A
    subclass sets `linear(x, w, b, relu, dw, db)`, its track's autograd Function, whose backward writes
    dW and db into those views (overwriting them: a step needs no zero_grad).
    """

    linear: Callable[..., torch.Tensor]

    def __init__(self, sizes: tuple[int, ...] = SIZES, device: Device = None):
        super().__init__()
        self.sizes, device = tuple(sizes), _device(device)
        total = sum(i * o + o for i, o in zip(self.sizes[:-1], self.sizes[1:], strict=True))
        self.flat = torch.zeros(total, device=device)
        self.flat_grad = torch.zeros(total, device=device)
        self.layers = torch.nn.ModuleList()
        offset = 0
        for i, o in zip(self.sizes[:-1], self.sizes[1:], strict=True):
            layer = torch.nn.Module()
            for name, shape in (("weight", (i, o)), ("bias", (o,))):
                n = math.prod(shape)
                p = torch.nn.Parameter(self.flat[offset:offset + n].view(shape))
                p.grad = self.flat_grad[offset:offset + n].view(shape)
                layer.register_parameter(name, p)
                offset += n
            self.layers.append(layer)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        cls = type(self).__name__
        if not isinstance(x, torch.Tensor) or x.dim() != 2 or x.shape[1] != self.sizes[0]:
            got = tuple(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__
            raise ValueError(f"{cls} expects a [batch, {self.sizes[0]}] tensor of flattened images, got {got}")
        if x.dtype != torch.float32:
            raise TypeError(f"{cls} expects float32 input, got {x.dtype}")
        if x.device != self.flat.device:
            raise ValueError(f"{cls} is on {self.flat.device}, the input on {x.device}")
        last = len(self.layers) - 1
        for i, layer in enumerate(self.layers):
            x = self.linear(x, layer.weight, layer.bias, i < last, layer.weight.grad, layer.bias.grad)
        return x

    def zero_grad(self, set_to_none: bool = False) -> None:
        """Zero the flat gradient buffer (never None: the layers write into it)."""
        self.flat_grad.zero_()


class FlatSGD:
    """SGD with momentum over a FlatMLP's flat buffers, as torch.optim.SGD defines it (no dampening, no
    Nesterov, no weight decay): v <- momentum * v + g, p <- p - lr * v, with v = 0 at the start.

    The learning rate and momentum live in `param_groups[0]`, where torch.optim keeps them, so that a
    training loop (or a schedule) can change them between steps. A subclass implements `step()`.
    """

    def __init__(self, model: FlatMLP, lr: float, momentum: float = 0.9):
        if not isinstance(model, FlatMLP):
            raise TypeError(f"{type(self).__name__} optimizes a FlatMLP, got {type(model).__name__}")
        if not (lr > 0 and 0 <= momentum < 1):
            raise ValueError(f"{type(self).__name__} needs lr > 0 and 0 <= momentum < 1, got lr={lr}, "
                             f"momentum={momentum}")
        self.model, self.param_groups = model, [dict(lr=float(lr), momentum=float(momentum))]
        self.velocity = torch.zeros_like(model.flat)

    def step(self) -> None:
        raise NotImplementedError("a track's optimizer launches its kernel here")


def torch_mlp(sizes: tuple[int, ...] = SIZES, device: Device = None) -> torch.nn.Sequential:
    """The same MLP in plain PyTorch (nn.Linear stores weights [out, in]), default initialization."""
    layers: list[torch.nn.Module] = []
    for i, o in zip(sizes[:-1], sizes[1:], strict=True):
        layers += [torch.nn.Linear(i, o), torch.nn.ReLU()]
    return torch.nn.Sequential(*layers[:-1]).to(_device(device))


def _linears(ref: torch.nn.Sequential) -> list[torch.nn.Linear]:
    return [m for m in ref if isinstance(m, torch.nn.Linear)]


def copy_weights(ref: torch.nn.Sequential, ours: FlatMLP) -> None:
    """Copy a torch_mlp's weights (transposed to [in, out]) and biases into a FlatMLP."""
    linears = _linears(ref)
    with torch.no_grad():
        for lin, layer in zip(linears, ours.layers, strict=True):
            layer.weight.copy_(lin.weight.t())
            layer.bias.copy_(lin.bias)


def weight_difference(ours: FlatMLP, ref: torch.nn.Sequential) -> float:
    """The largest absolute difference between a FlatMLP's weights and a torch_mlp's (biases not counted)."""
    linears = _linears(ref)
    if len(linears) != len(ours.layers):
        raise ValueError(f"the models have {len(ours.layers)} and {len(linears)} layers")
    diffs = []
    for lin, layer in zip(linears, ours.layers, strict=True):
        if layer.weight.shape != lin.weight.t().shape:
            raise ValueError(f"weights of shape {tuple(layer.weight.shape)} and {tuple(lin.weight.shape)} (transposed) "
                             "do not correspond")
        diffs.append((layer.weight.detach() - lin.weight.detach().t()).abs().max().item())
    return max(diffs)


def torch_variant(ref: torch.nn.Sequential, lr: float, momentum: float):
    """(model, step, optimizer) for the PyTorch baseline: a copy of `ref`, F.cross_entropy, torch.optim.SGD."""
    model = copy.deepcopy(ref)
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=momentum)

    def step(xb: torch.Tensor, yb: torch.Tensor) -> torch.Tensor:
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(xb), yb)
        loss.backward()
        opt.step()
        return loss

    return model, step, opt


def flat_variant(mlp_cls: type[FlatMLP], sgd_cls: type[FlatSGD], loss_fn: Loss, ref: torch.nn.Sequential,
                 lr: float, momentum: float):
    """(model, step, optimizer) for our kernels: an mlp_cls with `ref`'s sizes and weights, loss_fn and sgd_cls."""
    linears = _linears(ref)
    sizes = (linears[0].in_features, *(lin.out_features for lin in linears))
    model = mlp_cls(sizes=sizes, device=linears[0].weight.device)
    copy_weights(ref, model)
    opt = sgd_cls(model, lr=lr, momentum=momentum)

    def step(xb: torch.Tensor, yb: torch.Tensor) -> torch.Tensor:
        loss = loss_fn(model(xb), yb)
        loss.backward()
        opt.step()
        return loss

    return model, step, opt


def check_gradients(model: FlatMLP, ref: torch.nn.Sequential, loss_fn: Loss, xb: torch.Tensor, yb: torch.Tensor,
                    close: Callable[..., None]) -> None:
    """The loss and every dW and db of `model` (with `ref`'s weights) against float64 autograd on `ref`.

    `close(got, expected, name=...)` is the notebook's fp32 comparison.
    """
    ref64 = copy.deepcopy(ref).double()
    ref_loss = F.cross_entropy(ref64(xb.double()), yb)
    ref_loss.backward()
    loss = loss_fn(model(xb), yb)
    loss.backward()
    close(loss, ref_loss.detach(), name=f"loss, batch of {len(xb)}")
    linears = _linears(ref64)
    for k, (lin, layer) in enumerate(zip(linears, model.layers, strict=True)):
        close(layer.weight.grad, lin.weight.grad.t(), name=f"layer {k} dW")
        close(layer.bias.grad, lin.bias.grad, name=f"layer {k} db")


def check_linear(linear: Callable[..., torch.Tensor], close: Callable[..., None], device: Device = None) -> None:
    """A linear layer's autograd Function, `linear(x, w, b, relu, dw, db)` (a 37 x 100 @ 100 x 65 product),
    against float64 autograd: y, dX through autograd, and dW, db written into the given buffers (w.grad and
    b.grad stay None), with and without ReLU, for the incoming gradients of (y * c).sum() and y.sum().

    `close(got, expected, name=..., quiet=...)` is the notebook's fp32 comparison; the inputs come from torch's
    global generator, so seed it first for the same draws every run.
    """
    dev = _device(device)
    for relu in (True, False):
        for loss_name in ("(y * c).sum()", "y.sum()"):
            x = torch.randn(37, 100, device=dev, requires_grad=True)
            w, b = torch.randn(100, 65, device=dev) / 10, torch.randn(65, device=dev)
            c = torch.randn(37, 65, device=dev)
            dw, db = torch.empty_like(w), torch.empty_like(b)
            y = linear(x, w.requires_grad_(), b.requires_grad_(), relu, dw, db)
            ((y * c).sum() if loss_name.startswith("(") else y.sum()).backward()
            x64, w64, b64 = (t.detach().double().requires_grad_() for t in (x, w, b))
            y64 = x64 @ w64 + b64
            y64 = y64.relu() if relu else y64
            ((y64 * c.double()).sum() if loss_name.startswith("(") else y64.sum()).backward()
            tag = f"relu={relu!s:5} {loss_name:13}"
            close(y, y64, name=f"{tag} y", quiet=True)
            close(x.grad, x64.grad, name=f"{tag} dX", quiet=not relu)
            close(dw, w64.grad, name=f"{tag} dW", quiet=True)
            close(db, b64.grad, name=f"{tag} db", quiet=True)
            if w.grad is not None or b.grad is not None:
                raise AssertionError(f"{tag}: dW and db went through autograd's accumulation into w.grad, b.grad")


def check_sgd(opt: FlatSGD, steps: int = 3) -> None:
    """`steps` steps of `opt` against torch.optim.SGD with the same settings, each on a different gradient
    (multiples of the model's current flat_grad): parameters and momentum buffer."""
    model, group = opt.model, opt.param_groups[0]
    ref_flat = model.flat.clone().requires_grad_()
    ref_opt = torch.optim.SGD([ref_flat], lr=group["lr"], momentum=group["momentum"])
    grad = model.flat_grad.clone()
    for k in range(steps):
        model.flat_grad.copy_(grad * (k + 1))
        ref_flat.grad = grad * (k + 1)
        ref_opt.step()
        opt.step()
    check(model.flat, ref_flat, name=f"{steps} SGD-momentum steps vs torch.optim.SGD")
    check(opt.velocity, ref_opt.state[ref_flat]["momentum_buffer"], name="momentum buffer")


def check_adam(adam_cls: Callable[..., FlatSGD], mlp_cls: type[FlatMLP], device: Device = None,
               lr: float = 1e-3) -> Verdict:
    """Exercise 1: three steps of adam_cls(model, lr=lr) on a small mlp_cls against torch.optim.Adam."""
    torch.manual_seed(1)
    sizes = (20, 16, 3)
    start = torch.randn(mlp_cls(sizes=sizes, device=device).flat.numel(), device=_device(device))
    grads = [torch.randn_like(start) for _ in range(3)]

    def attempt() -> torch.Tensor:
        m = mlp_cls(sizes=sizes, device=device)
        m.flat.copy_(start)
        opt = adam_cls(m, lr=lr)
        for g in grads:
            m.flat_grad.copy_(g)
            opt.step()
        return m.flat

    def reference() -> torch.Tensor:
        p = start.clone().requires_grad_()
        opt = torch.optim.Adam([p], lr=lr)
        for g in grads:
            p.grad = g.clone()
            opt.step()
        return p.detach()

    return grade("Adam: 3 steps vs torch.optim.Adam", attempt, reference, {f"a {sizes} MLP's flat buffer": ()})


def check_accumulation(mlp_cls: type[FlatMLP], loss_fn: Loss, xb: torch.Tensor, yb: torch.Tensor) -> Verdict:
    """Exercise 2: two half-batches accumulated (the mean loss of each, halved) give the full batch's gradients."""
    half = len(xb) // 2
    xb, yb = xb[: 2 * half], yb[: 2 * half]
    torch.manual_seed(1)
    m = mlp_cls(sizes=(xb.shape[1], 64, 10), device=xb.device)
    m.flat.copy_(torch.randn_like(m.flat) / 30)

    def attempt() -> torch.Tensor:
        m.zero_grad()
        for part in (slice(0, half), slice(half, 2 * half)):
            (loss_fn(m(xb[part]), yb[part]) / 2).backward()
        return m.flat_grad.clone()

    def reference() -> torch.Tensor:
        m.zero_grad()
        loss_fn(m(xb), yb).backward()
        return m.flat_grad.clone()

    return grade("gradient accumulation: two halves vs the full batch", attempt, reference,
                 {f"a batch of {2 * half}, halves of {half}": ()}, atol=1e-6, rtol=1e-4)
