"""`gpu_ml.mlp` with pure-PyTorch stand-ins for a track's kernels: the model, the optimizer base, and the
checks the MNIST notebooks and their exercises run (each shown to fail on a wrong implementation)."""

import pytest
import torch
import torch.nn.functional as F

from gpu_ml import mlp


class TorchLinear(torch.autograd.Function):
    """y = relu?(x @ w + b); the backward writes dW and db into the given views (or adds, with ADD)."""

    ADD = False
    SCALE = 1.0  # != 1: a wrong dW

    @staticmethod
    def forward(ctx, x, w, b, relu, dw, db):
        y = x @ w + b
        y = y.relu() if relu else y
        ctx.save_for_backward(x, w, y if relu else None)
        ctx.grads = (dw, db)
        return y

    @classmethod
    def backward(cls, ctx, dy):
        x, w, y = ctx.saved_tensors
        dz = dy * (y > 0) if y is not None else dy
        dw, db = ctx.grads
        if cls.ADD:
            dw += x.t() @ dz
            db += dz.sum(0)
        else:
            dw.copy_(cls.SCALE * (x.t() @ dz))
            db.copy_(dz.sum(0))
        return dz @ w.t(), None, None, None, None, None


class Accumulating(TorchLinear):
    ADD = True


class Wrong(TorchLinear):
    SCALE = 2.0


class TorchMLP(mlp.FlatMLP):
    linear = TorchLinear.apply


class TorchSGD(mlp.FlatSGD):
    NESTEROV = False

    def step(self):
        g = self.param_groups[0]
        self.velocity.mul_(g["momentum"]).add_(self.model.flat_grad)
        update = self.model.flat_grad + g["momentum"] * self.velocity if self.NESTEROV else self.velocity
        self.model.flat.sub_(g["lr"] * update)


class NesterovSGD(TorchSGD):
    NESTEROV = True


def close(got, ref, name, quiet=False):
    from gpu_ml import check

    check(got, ref, atol=1e-5 * ref.abs().max().item(), rtol=1e-4, name=name, quiet=quiet)


def _batch(n=16):
    g = torch.Generator().manual_seed(0)
    return torch.randn(n, 20, generator=g), torch.randint(0, 3, (n,), generator=g)


def test_flat_mlp_is_views_of_two_buffers_and_checks_its_input():
    m = TorchMLP(sizes=(20, 16, 3), device="cpu")
    assert m.flat.numel() == 20 * 16 + 16 + 16 * 3 + 3
    assert m.layers[1].weight.shape == (16, 3) and m.layers[1].weight.data_ptr() == m.flat[20 * 16 + 16:].data_ptr()
    with pytest.raises(ValueError, match=r"TorchMLP expects a \[batch, 20\]"):
        m(torch.zeros(2, 19))
    with pytest.raises(TypeError, match="float32"):
        m(torch.zeros(2, 20, dtype=torch.float64))


def test_gradients_match_autograd_and_a_wrong_dw_is_caught():
    torch.manual_seed(0)
    ref = mlp.torch_mlp((20, 16, 3), device="cpu")
    xb, yb = _batch()
    for cls, ok in ((TorchMLP, True), (type("WrongMLP", (mlp.FlatMLP,), {"linear": Wrong.apply}), False)):
        m = cls(sizes=(20, 16, 3), device="cpu")
        mlp.copy_weights(ref, m)
        if ok:
            mlp.check_gradients(m, ref, F.cross_entropy, xb, yb, close)
        else:
            with pytest.raises(AssertionError, match="dW"):
                mlp.check_gradients(m, ref, F.cross_entropy, xb, yb, close)


def test_sgd_base_validates_and_check_sgd_catches_a_different_rule():
    m = TorchMLP(sizes=(20, 16, 3), device="cpu")
    with pytest.raises(TypeError, match="TorchSGD optimizes a FlatMLP, got Sequential"):
        TorchSGD(mlp.torch_mlp((20, 3), device="cpu"), lr=0.1)
    with pytest.raises(ValueError, match="lr > 0"):
        TorchSGD(m, lr=-1.0)
    with pytest.raises(NotImplementedError):
        mlp.FlatSGD(m, lr=0.1).step()
    m.flat_grad.copy_(torch.randn_like(m.flat_grad))
    mlp.check_sgd(TorchSGD(m, lr=0.05, momentum=0.9))
    with pytest.raises(AssertionError, match="SGD-momentum steps"):
        mlp.check_sgd(NesterovSGD(m, lr=0.05, momentum=0.9))


def test_the_two_variants_start_from_the_same_model():
    torch.manual_seed(0)
    ref = mlp.torch_mlp((20, 16, 3), device="cpu")
    xb, yb = _batch()
    ours, ours_step, ours_opt = mlp.flat_variant(TorchMLP, TorchSGD, F.cross_entropy, ref, lr=0.1, momentum=0.9)
    theirs, theirs_step, theirs_opt = mlp.torch_variant(ref, lr=0.1, momentum=0.9)
    assert ours_opt.param_groups[0]["lr"] == theirs_opt.param_groups[0]["lr"] == 0.1
    for _ in range(3):
        torch.testing.assert_close(ours_step(xb, yb), theirs_step(xb, yb))
    assert next(ref.parameters()).grad is None  # the baseline trained a copy


def test_exercise_checks_pass_a_right_answer_and_fail_a_wrong_one():
    class Adam(mlp.FlatSGD):
        BIAS_CORRECTION = True

        def __init__(self, model, lr):
            super().__init__(model, lr, momentum=0.0)
            self.m, self.v, self.t = torch.zeros_like(model.flat), torch.zeros_like(model.flat), 0

        def step(self):
            self.t += 1
            g, lr = self.model.flat_grad, self.param_groups[0]["lr"]
            self.m.mul_(0.9).add_(0.1 * g)
            self.v.mul_(0.999).add_(0.001 * g * g)
            c1, c2 = (1 - 0.9**self.t, 1 - 0.999**self.t) if self.BIAS_CORRECTION else (1.0, 1.0)
            self.model.flat.sub_(lr * (self.m / c1) / ((self.v / c2).sqrt() + 1e-8))

    class NoCorrection(Adam):
        BIAS_CORRECTION = False

    assert mlp.check_adam(Adam, TorchMLP, device="cpu")
    verdict = mlp.check_adam(NoCorrection, TorchMLP, device="cpu")
    assert not verdict and "not solved yet" in verdict.message and "differ" in verdict.message

    xb, yb = torch.randn(64, 784), torch.randint(0, 10, (64,))
    assert mlp.check_accumulation(type("Acc", (mlp.FlatMLP,), {"linear": Accumulating.apply}), F.cross_entropy, xb, yb)
    assert not mlp.check_accumulation(TorchMLP, F.cross_entropy, xb, yb)  # overwrites: the second half wins


def test_weight_difference_is_the_largest_weight_gap_and_refuses_other_shapes():
    torch.manual_seed(0)
    ref, ours = mlp.torch_mlp(sizes=(6, 5, 3)), mlp.FlatMLP(sizes=(6, 5, 3))
    mlp.copy_weights(ref, ours)
    assert mlp.weight_difference(ours, ref) == 0.0
    with torch.no_grad():
        ours.layers[1].weight[4, 2] += 0.25  # [in, out]: torch's weight [2, 4]
        ours.layers[0].bias += 1.0  # biases are not counted
    assert mlp.weight_difference(ours, ref) == pytest.approx(0.25)
    with pytest.raises(ValueError, match="layers"):
        mlp.weight_difference(mlp.FlatMLP(sizes=(6, 3)), ref)
    with pytest.raises(ValueError, match="do not correspond"):
        mlp.weight_difference(mlp.FlatMLP(sizes=(6, 4, 3)), ref)


class ThroughAutograd(TorchLinear):
    """Right values, but dW and db returned to autograd (into w.grad, b.grad) as well."""

    @classmethod
    def backward(cls, ctx, dy):
        grads = super().backward(ctx, dy)
        dw, db = ctx.grads
        return grads[0], dw.clone(), db.clone(), None, None, None


def test_check_linear_passes_a_right_layer_and_catches_wrong_ones(capsys):
    torch.manual_seed(0)
    mlp.check_linear(TorchLinear.apply, close)
    assert "relu=True  (y * c).sum() dX" in capsys.readouterr().out
    with pytest.raises(AssertionError, match="dW"):
        mlp.check_linear(Wrong.apply, close)
    with pytest.raises(AssertionError, match="autograd's accumulation"):
        mlp.check_linear(ThroughAutograd.apply, close)
