"""`gpu_ml.train`, the MNIST harness both MNIST notebooks share, on a tiny synthetic dataset."""

import sys

import matplotlib
import pytest
import torch
import torch.nn.functional as F

from gpu_ml import train
from gpu_ml.data import DIGITS, Dataset

matplotlib.use("Agg")
gpu_bench = sys.modules["gpu_ml.bench"]  # the module: `gpu_ml.bench` is also the name of the function


def _dataset(name="MNIST", n=256, labels_max=9):
    g = torch.Generator().manual_seed(0)
    labels = torch.randint(0, labels_max + 1, (n,), generator=g)
    images = torch.randint(0, 50, (n, 28, 28), generator=g).to(torch.uint8)
    images[torch.arange(n), labels.clamp_max(27)] = 255  # row `label` lit: an easy problem
    return Dataset(name, DIGITS, images, labels, images[: n // 2], labels[: n // 2])


def _make():
    model = torch.nn.Linear(784, 10)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)

    def step(xb, yb):
        opt.zero_grad()
        loss = F.cross_entropy(model(xb), yb)
        loss.backward()
        opt.step()
        return loss

    return model, step, opt


def test_prepare_standardizes_and_picks_the_bar():
    split = train.prepare(_dataset(), n_train=200, n_test=50, device="cpu")
    assert split.x_train.shape == (200, 784) and split.x_test.shape == (50, 784)
    assert abs(split.x_train.mean().item()) < 1e-5 and abs(split.x_train.std().item() - 1) < 1e-4
    assert split.accuracy_bar == 0.98 and split.test_images.shape == (50, 28, 28)
    assert train.prepare(_dataset("Fashion-MNIST"), 10, 10, "cpu").accuracy_bar == 0.88
    with pytest.raises(ValueError, match="labels outside"):
        train.prepare(_dataset(labels_max=10), 256, 10, "cpu")


def test_train_is_reproducible_and_learns(capsys):
    split = train.prepare(_dataset(), n_train=256, n_test=128, device="cpu")
    runs = {name: train.train(name, _make, split, epochs=3, batch=32) for name in ("PyTorch eager", "again")}
    a, b = runs.values()
    assert len(a["losses"]) == 3 * 8 and len(a["accuracy"]) == len(a["epoch_ms"]) == 3
    assert torch.equal(a["losses"], b["losses"]) and a["accuracy"] == b["accuracy"]  # same seeds, same run
    train.loss_fell("PyTorch eager", a)
    assert a["accuracy"][-1] > 0.5
    summary = train.compare(runs, split)
    out = capsys.readouterr().out
    assert set(summary) == set(runs) and "predict different classes for 0 of 128" in out
    assert train.median([3.0, 1.0, 2.0, 4.0]) == 3.0


def test_lr_at_sets_every_group_before_each_epoch():
    split = train.prepare(_dataset(), n_train=256, n_test=64, device="cpu")
    seen = []

    def make():
        model, step, opt = _make()
        opt.add_param_group({"params": [torch.zeros(1, requires_grad=True)]})

        def logged(xb, yb):
            seen.append(tuple(g["lr"] for g in opt.param_groups))
            return step(xb, yb)

        return model, logged, opt

    run = train.train("x", make, split, epochs=3, batch=64, lr_at=lambda epoch: [0.1, 0.1, 0.01][epoch])
    assert run["lrs"] == [0.1, 0.1, 0.01]
    assert seen == [(0.1, 0.1)] * 8 + [(0.01, 0.01)] * 4


def test_interleaved_alternates_the_order_after_a_warm_up():
    split = train.prepare(_dataset(), n_train=256, n_test=64, device="cpu")
    calls = []

    def make(name):
        def build():
            model, step, opt = _make()

            def logged(xb, yb):
                calls.append((name, gpu_bench._alone["depth"]))
                return step(xb, yb)

            return model, logged, opt

        return build

    count = gpu_bench.measurements()[0]
    times = train.interleaved({"A": make("A"), "B": make("B")}, split, batch=128, rounds=3)
    assert {name: len(t) for name, t in times.items()} == {"A": 3, "B": 3}
    assert all(t > 0 for ms in times.values() for t in ms)
    epochs = [calls[i] for i in range(0, len(calls), 2)]  # 2 steps per epoch
    # warm-up A B beside other notebooks, then A B, B A, A B with the GPU alone, in one gpu_alone block
    assert epochs == [("A", 0), ("B", 0)] + [(name, 1) for name in "ABBAAB"]
    assert gpu_bench.measurements()[0] == count + 1


def test_train_times_all_its_epochs_in_one_gpu_alone_block():
    split = train.prepare(_dataset(), n_train=256, n_test=64, device="cpu")
    depths = []

    def make():
        model, step, opt = _make()
        return model, lambda xb, yb: depths.append(gpu_bench._alone["depth"]) or step(xb, yb), opt

    count = gpu_bench.measurements()[0]
    train.train("x", make, split, epochs=3, batch=64)
    assert depths == [1] * 12 and gpu_bench.measurements()[0] == count + 1


def test_loss_fell_fails_when_it_did_not():
    with pytest.raises(AssertionError, match="did not fall"):
        train.loss_fell("flat", {"losses": torch.ones(10), "accuracy": [0.1]})


def test_plots_run(capsys):
    split = train.prepare(_dataset(), n_train=256, n_test=64, device="cpu")
    runs = {"PyTorch eager": train.train("PyTorch eager", _make, split, epochs=2, batch=32)}
    train.plot_curves(runs, split, window=2)
    confusion = train.plot_predictions(runs["PyTorch eager"]["model"], split)
    assert confusion.sum() == 64 and "most frequent confusion" in capsys.readouterr().out


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_graphed_training_matches_eager():
    split = train.prepare(_dataset(), n_train=256, n_test=64, device="cuda")

    def make():
        torch.manual_seed(0)
        model = torch.nn.Linear(784, 10, device="cuda")
        opt = torch.optim.SGD(model.parameters(), lr=0.01)

        def step(xb, yb):
            opt.zero_grad(set_to_none=False)
            loss = F.cross_entropy(model(xb), yb)
            loss.backward()
            opt.step()
            return loss

        return model, step, opt

    def lr_at(epoch):  # a new learning rate in the second epoch: the graph must be captured anew
        return 0.05 if epoch == 0 else 0.005

    eager = train.train("eager", make, split, epochs=2, batch=32, lr_at=lr_at)
    graph = train.train("graph", make, split, epochs=2, batch=32, lr_at=lr_at, use_graph=True)
    assert eager["lrs"] == graph["lrs"] == [0.05, 0.005]
    torch.testing.assert_close(graph["losses"], eager["losses"])


def test_report_records_and_enforces_the_bars(monkeypatch, capsys):
    from gpu_ml import results

    recorded = []
    monkeypatch.setattr(results, "record", lambda *a, **k: recorded.append((a, k)))
    monkeypatch.setattr(results, "on_reference_gpu", lambda: True)  # where the speed bars are asserted
    split = train.prepare(_dataset(), n_train=256, n_test=128, device="cpu")
    run = train.train("x", _make, split, epochs=2, batch=32)

    def runs(acc, ms):
        return {"PyTorch eager": {**run, "epoch_ms": [10.0, 10.0]},
                "Ours eager": {**run, "epoch_ms": [ms, ms], "accuracy": [acc, acc]},
                "Ours + CUDA graph": {**run, "epoch_ms": [2.0, 2.0], "accuracy": [acc, acc]}}

    assert train.report(runs(0.99, 8.0), split, ours="Ours", notebook="nb", batch=32,
                        optimizer="SGD") == (0.8, 0.2)
    assert [a[1] for a, _ in recorded] == ["MLP epoch time, Ours eager (MNIST)",
                                           "MLP epoch time, Ours + CUDA graph (MNIST)",
                                           "MLP test accuracy after 2 epochs (MNIST)"]
    assert "bar met: Ours eager epoch time vs PyTorch eager at 0.800x (bar: <= 1.0x)" in capsys.readouterr().out
    recorded.clear()  # the eager ratio from interleaved epochs instead: 12 / 10 ms, over the bar
    with pytest.raises(AssertionError, match=r"bar missed: Ours eager epoch time vs PyTorch eager at 1\.200x"):
        train.report(runs(0.99, 8.0), split, ours="Ours", notebook="nb", batch=32, optimizer="SGD",
                     eager_ms={"PyTorch eager": [9.0, 10.0, 11.0], "Ours eager": [13.0, 12.0, 11.0]})
    assert recorded[0][0][2] == 12.0 and "median of 3 interleaved epochs" in recorded[0][1]["sizes"]
    monkeypatch.setattr(results, "on_reference_gpu", lambda: False)  # another GPU: printed, not asserted
    assert train.report(runs(0.99, 8.0), split, ours="Ours", notebook="nb", batch=32, optimizer="SGD",
                        eager_ms={"PyTorch eager": [10.0], "Ours eager": [12.0]}) == (1.2, 0.2)
    assert "this GPU misses it, which is not an error here" in capsys.readouterr().out
    with pytest.raises(AssertionError, match="reached 97.00% on MNIST"):  # accuracy: asserted everywhere
        train.report(runs(0.97, 8.0), split, ours="Ours", notebook="nb", batch=32, optimizer="SGD")


def test_step_decay_is_an_lr_at_and_describes_itself():
    schedule = train.StepDecay(lr=0.05, momentum=0.9, decay_from=7)
    assert [schedule(e) for e in (0, 6, 7, 9)] == [0.05, 0.05, 0.05 / 10, 0.05 / 10]
    assert schedule.describe() == "SGD momentum 0.9, lr 0.05, x0.1 from epoch 8"
    with pytest.raises(ValueError, match="counted from 0"):
        schedule(-1)
    split = train.prepare(_dataset(), n_train=128, n_test=32, device="cpu")
    run = train.train("decay", _make, split, epochs=3, batch=32, lr_at=train.StepDecay(0.01, 0.0, 2))
    assert run["lrs"] == [0.01, 0.01, 0.001]
