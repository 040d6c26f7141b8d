"""The MNIST harness both MNIST notebooks share: data on the device, a timed training loop (eager
or replayed from a CUDA graph), evaluation, the comparison table and the plots."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import NamedTuple

import torch

from gpu_ml.bench import gpu_alone
from gpu_ml.data import Dataset

Step = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]  # (images, labels) -> loss, after one update


class Split(NamedTuple):
    """Flattened, standardized images and labels on the device, with what the plots need."""

    name: str
    classes: tuple[str, ...]
    accuracy_bar: float  # 98% for MNIST, 88% for Fashion-MNIST
    x_train: torch.Tensor
    y_train: torch.Tensor
    x_test: torch.Tensor
    y_test: torch.Tensor
    test_images: torch.Tensor  # uint8 [n_test, 28, 28], on the CPU, for the picture of predictions


class StepDecay(NamedTuple):
    """SGD with momentum at `lr` for epochs 0 .. decay_from - 1, then lr / 10: both MNIST notebooks' schedule.

    Called with an epoch (counted from 0) it returns that epoch's rate, so it is `train`'s `lr_at`.
    """

    lr: float
    momentum: float
    decay_from: int

    def __call__(self, epoch: int) -> float:
        if epoch < 0:
            raise ValueError(f"epochs are counted from 0, got {epoch}")
        return self.lr if epoch < self.decay_from else self.lr / 10

    def describe(self) -> str:
        """The optimizer in words, for the recorded results: 'SGD momentum 0.9, lr 0.05, x0.1 from epoch 8'."""
        return f"SGD momentum {self.momentum}, lr {self.lr}, x0.1 from epoch {self.decay_from + 1}"


def prepare(data: Dataset, n_train: int, n_test: int, device: str) -> Split:
    """The first n_train / n_test images, flattened to 784 values, standardized with the training
    set's mean and standard deviation and moved to `device` once; labels are range-checked once
    here, not in every step (a check per step would cost a device sync)."""
    x_train = data.train_images[:n_train].reshape(-1, 784).float() / 255
    x_test = data.test_images[:n_test].reshape(-1, 784).float() / 255
    mu, sigma = x_train.mean(), x_train.std()
    y_train, y_test = data.train_labels[:n_train], data.test_labels[:n_test]
    for labels in (y_train, y_test):
        if labels.numel() and not (0 <= int(labels.min()) and int(labels.max()) < len(data.classes)):
            raise ValueError(f"{data.name}: labels outside [0, {len(data.classes)})")
    return Split(data.name, data.classes, 0.98 if data.name == "MNIST" else 0.88,
                 ((x_train - mu) / sigma).to(device), y_train.to(device), ((x_test - mu) / sigma).to(device),
                 y_test.to(device), data.test_images[:n_test])


class Graphed:
    """Run `step` for `warmup` real steps, then capture one step into a CUDA graph and replay it.

    The warm-up steps and the capture share one side stream: autograd makes the current stream wait
    for the stream each gradient node was created on, and a capture that depends on work outside it
    fails (`cudaErrorStreamCaptureIsolation`). A graph replays its kernels with the arguments they
    had at capture, the learning rate among them: after changing one, call `reset()`, and the next
    step captures a new graph.
    """

    def __init__(self, step: Step, warmup: int = 3):
        self.step, self.warmup, self.side = step, warmup, torch.cuda.Stream()
        self.state: dict = {}

    def reset(self) -> None:
        """Drop the graph; the next step captures a new one."""
        self.state = {}

    def __call__(self, xb: torch.Tensor, yb: torch.Tensor, i: int) -> torch.Tensor:
        if i < self.warmup:  # real training steps, on the side stream as capture requires
            self.side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(self.side):
                loss = self.step(xb, yb)
            torch.cuda.current_stream().wait_stream(self.side)
            return loss
        state = self.state
        if not state:
            state["x"], state["y"] = xb.clone(), yb.clone()
            state["graph"] = torch.cuda.CUDAGraph()
            with torch.cuda.graph(state["graph"], stream=self.side):
                state["loss"] = self.step(state["x"], state["y"])
        state["x"].copy_(xb)
        state["y"].copy_(yb)
        state["graph"].replay()
        return state["loss"]


def evaluate(model: Callable[[torch.Tensor], torch.Tensor], split: Split) -> tuple[float, torch.Tensor]:
    """Test accuracy and the logits of the whole test set."""
    with torch.no_grad():
        logits = model(split.x_test)
    return (logits.argmax(1) == split.y_test).float().mean().item(), logits


def train(name: str, make: Callable[[], tuple[object, Step, object]], split: Split, *, epochs: int, batch: int,
          lr_at: Callable[[int], float] | None = None, use_graph: bool = False) -> dict:
    """Train the (model, step, optimizer) that `make()` builds, from the same seeds whatever the variant.

    One permutation per epoch from a seeded generator; the last incomplete batch is dropped so that
    every step has the same shape. Each step's loss is copied into a log on the device (no sync per
    step). The time per epoch is wall-clock time between two synchronizations around the training
    steps only; peak memory counts what is allocated from the model's creation to the end of
    training, minus what existed before (the dataset and the shuffle buffers). Returns the model,
    the losses, the test accuracy after each epoch, the epoch times in ms and the peak in MB.
    """
    from tqdm.auto import tqdm

    gpu = split.x_train.is_cuda
    n_train, steps = len(split.x_train), len(split.x_train) // batch
    xs, ys = torch.empty_like(split.x_train), torch.empty_like(split.y_train)  # each epoch's shuffled copy
    if gpu:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        start_mem = torch.cuda.memory_allocated()
    torch.manual_seed(0)
    model, step, optimizer = make()
    run = Graphed(step) if use_graph else (lambda xb, yb, i: step(xb, yb))
    gen = torch.Generator(device=split.x_train.device).manual_seed(1234)
    losses = torch.zeros(epochs * steps, device=split.x_train.device)
    accuracy, epoch_ms, lrs = [], [], []
    k = 0
    # no other notebook's cell on this GPU while the epochs are timed (gpu-ml test): one hand-over of a shared GPU
    # for the whole training, not one per epoch
    with gpu_alone():
        for epoch in tqdm(range(epochs), desc=name, leave=True):
            if lr_at is not None and any(g["lr"] != lr_at(epoch) for g in optimizer.param_groups):
                for group in optimizer.param_groups:
                    group["lr"] = lr_at(epoch)
                if use_graph:
                    run.reset()  # the graph holds the old learning rate: the next step captures a new one
            lrs.append(optimizer.param_groups[0]["lr"])
            perm = torch.randperm(n_train, device=split.x_train.device, generator=gen)
            torch.index_select(split.x_train, 0, perm, out=xs)
            torch.index_select(split.y_train, 0, perm, out=ys)
            if gpu:
                torch.cuda.synchronize()
            t0 = time.perf_counter()
            for i in range(steps):
                loss = run(xs[i * batch:(i + 1) * batch], ys[i * batch:(i + 1) * batch], k)
                losses[k].copy_(loss.detach())
                k += 1
            if gpu:
                torch.cuda.synchronize()
            epoch_ms.append((time.perf_counter() - t0) * 1e3)
            accuracy.append(evaluate(model, split)[0])
    peak_mb = (torch.cuda.max_memory_allocated() - start_mem) / 2**20 if gpu else float("nan")
    return dict(model=model, losses=losses.cpu(), accuracy=accuracy, lrs=lrs, epoch_ms=epoch_ms, peak_mb=peak_mb)


def interleaved(makes: dict[str, Callable[[], tuple[object, Step, object]]], split: Split, *, batch: int,
                rounds: int = 6) -> dict[str, list[float]]:
    """Eager epoch times in ms of fresh (model, step, optimizer) variants, measured alternately.

    A launch-bound loop's epoch time drifts by 10% and more with the state of the host, so timing
    one variant's epochs after the other's compares two different moments. Here every variant
    first runs one untimed epoch (compilation, allocations, first calls), then `rounds` rounds of
    one timed epoch each, in alternating order (A B, B A, ...), so that a drift falls on all of
    them alike. The batches are the training set's first `len // batch`, in order; what the models
    learn is not looked at.
    """
    gpu = split.x_train.is_cuda
    steps = len(split.x_train) // batch
    built = {}
    for name, make in makes.items():
        torch.manual_seed(0)
        built[name] = make()[1]

    def epoch(step: Step) -> float:
        if gpu:
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        for i in range(steps):
            step(split.x_train[i * batch:(i + 1) * batch], split.y_train[i * batch:(i + 1) * batch])
        if gpu:
            torch.cuda.synchronize()
        return (time.perf_counter() - t0) * 1e3

    for step in built.values():
        epoch(step)
    times: dict[str, list[float]] = {name: [] for name in built}
    with gpu_alone():  # the timed rounds, in one hand-over of a GPU that gpu-ml test shares
        for r in range(rounds):
            for name in list(built) if r % 2 == 0 else list(built)[::-1]:
                times[name].append(epoch(built[name]))
    return times


def loss_fell(name: str, run: dict) -> None:
    """Print the first and last losses of a run and assert that the loss fell by a quarter at least."""
    first, last = run["losses"][0].item(), run["losses"][-4:].mean().item()
    print(f"{name:20}: loss {first:.3f} at the first step -> {last:.3f} (mean of the last 4); "
          f"test accuracy {run['accuracy'][-1]:.2%}")
    assert last < 0.75 * first, f"{name}: the loss did not fall ({first:.3f} -> {last:.3f})"


def median(values: list[float]) -> float:
    """The median as the notebooks report it: the upper middle value of an even count."""
    return sorted(values)[len(values) // 2]


def compare(runs: dict[str, dict], split: Split, baseline: str = "PyTorch eager") -> dict[str, float]:
    """Print accuracy, median and mean epoch time, ratio to `baseline` and peak memory of every run, and
    how many test images each model classifies differently from `baseline`; return the median epoch times."""
    base = median(runs[baseline]["epoch_ms"])
    print(f"{'variant':22} {'test acc':>9} {'ms/epoch':>9} {'(mean)':>8} {'vs eager':>9} {'peak MB':>8}")
    summary = {}
    for name, r in runs.items():
        summary[name] = median(r["epoch_ms"])
        print(f"{name:22} {r['accuracy'][-1]:9.2%} {summary[name]:9.1f} {sum(r['epoch_ms']) / len(r['epoch_ms']):8.1f} "
              f"{summary[name] / base:8.3f}x {r['peak_mb']:8.1f}")
    preds = {name: evaluate(r["model"], split)[1].argmax(1) for name, r in runs.items()}
    for name in runs:
        if name != baseline:
            n_diff = (preds[name] != preds[baseline]).sum().item()
            print(f"{name} and {baseline} predict different classes for {n_diff} of {len(split.y_test)} test images")
    return summary


def report(runs: dict[str, dict], split: Split, *, ours: str, notebook: str, batch: int, optimizer: str,
           eager_ms: dict[str, list[float]] | None = None) -> tuple[float, float]:
    """The comparison table (`compare`), the README's results for `ours` ("Triton" or "CUDA"), and the
    bars: test accuracy of both our variants >= split.accuracy_bar (on every GPU), and both epoch
    times <= 1.0x PyTorch eager (`results.bar`: asserted on an H100/H200). `optimizer` describes the
    optimizer and its learning rates for the recorded results. With `eager_ms` (from `interleaved`),
    the eager epoch times and their ratio come from those alternating epochs instead of the training
    runs. Returns our eager and graphed epoch times as ratios to PyTorch eager."""
    from gpu_ml import results

    summary = compare(runs, split)
    base = summary["PyTorch eager"]
    eager, graph = f"{ours} eager", f"{ours} + CUDA graph"
    ratio_graph = summary[graph] / base
    eager_value, how = summary[eager], "median of the training epochs"
    if eager_ms is not None:
        base_ms, eager_value = median(eager_ms["PyTorch eager"]), median(eager_ms[eager])
        rounds = len(eager_ms[eager])
        how = f"median of {rounds} interleaved epochs each"
        print(f"interleaved eager epochs ({rounds} each, alternating order), ms: " + "; ".join(
            f"{name} " + " ".join(f"{t:.1f}" for t in ms) for name, ms in eager_ms.items()))
        print(f"medians: PyTorch eager {base_ms:.1f} ms, {eager} {eager_value:.1f} ms")
        base = base_ms
    ratio_eager = eager_value / base
    epochs = len(runs[graph]["accuracy"])
    model = f"784-512-512-10, batch {batch}"
    records = ((eager, eager_value, ratio_eager, f", {how}"), (graph, summary[graph], ratio_graph, ""))
    for variant, value, ratio, note in records:
        results.record(notebook, f"MLP epoch time, {variant} ({split.name})", value, "ms",
                       baseline="PyTorch eager", ratio=ratio, sizes=f"{model}, SGD momentum, fp32{note}")
    results.record(notebook, f"MLP test accuracy after {epochs} epochs ({split.name})",
                   100 * runs[graph]["accuracy"][-1], "%", sizes=f"{model}, {optimizer}")
    print(f"stretch goal, {graph} <= 0.5x PyTorch eager: {'met' if ratio_graph <= 0.5 else 'missed'}")
    for variant, ratio in ((graph, ratio_graph), (eager, ratio_eager)):  # asserted on an H100/H200 only
        results.bar(f"{variant} epoch time vs PyTorch eager", ratio, at_most=1.0,
                    reference=(notebook, f"MLP epoch time, {variant} ({split.name})"))
    for variant in (eager, graph):  # accuracy is not a speed: it holds on every GPU
        acc = runs[variant]["accuracy"][-1]
        if acc < split.accuracy_bar:
            raise AssertionError(f"bar missed: {variant} reached {acc:.2%} on {split.name} "
                                 f"(bar: {split.accuracy_bar:.0%})")
    return ratio_eager, ratio_graph


def plot_curves(runs: dict[str, dict], split: Split, window: int) -> None:
    """Training loss per step (mean over `window` steps, log scale) and test accuracy per epoch."""
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(13, 4))
    for name, r in runs.items():
        smooth = r["losses"][: len(r["losses"]) // window * window].view(-1, window).mean(1)
        ax1.plot((torch.arange(len(smooth)) * window).numpy(), smooth.numpy(), label=name)
        ax2.plot(range(1, len(r["accuracy"]) + 1), [100 * a for a in r["accuracy"]], marker="o", label=name)
    ax1.set_xlabel("step")
    ax1.set_ylabel(f"training loss (mean over {window} steps)")
    ax1.set_yscale("log")
    ax2.set_xlabel("epoch")
    ax2.set_ylabel("test accuracy (%)")
    ax2.axhline(100 * split.accuracy_bar, color="gray", linestyle="--", label="bar")
    for ax in (ax1, ax2):
        ax.grid(True, alpha=0.3)
        ax.legend()
    plt.tight_layout()
    plt.show()


def plot_predictions(model: Callable[[torch.Tensor], torch.Tensor], split: Split) -> torch.Tensor:
    """32 test images with the model's prediction (mistakes in red, the true class in brackets), then
    the confusion matrix over the test set; prints the most frequent confusion and returns the matrix."""
    import matplotlib.pyplot as plt

    acc, logits = evaluate(model, split)
    pred, truth, classes = logits.argmax(1).cpu(), split.y_test.cpu(), split.classes
    fig, axes = plt.subplots(4, 8, figsize=(14, 7.5))
    for i, ax in enumerate(axes.flat):
        ax.imshow(split.test_images[i].numpy(), cmap="gray_r")
        right = pred[i] == truth[i]
        ax.set_title(classes[pred[i]] + ("" if right else f"\n[{classes[truth[i]]}]"),
                     color="black" if right else "red", fontsize=9)
        ax.axis("off")
    plt.suptitle(f"{split.name}: test accuracy {acc:.2%}")
    plt.tight_layout()
    plt.show()

    n = len(classes)
    confusion = torch.zeros(n, n, dtype=torch.int64)
    confusion.index_put_((truth, pred), torch.ones_like(truth), accumulate=True)
    fig, ax = plt.subplots(figsize=(7, 6))
    ax.imshow(confusion.numpy(), cmap="Blues")
    for t in range(n):
        for p in range(n):
            ax.text(p, t, int(confusion[t, p]), ha="center", va="center", fontsize=8,
                    color="white" if confusion[t, p] > confusion.max() / 2 else "black")
    ax.set_xticks(range(n), classes, rotation=45, ha="right")
    ax.set_yticks(range(n), classes)
    ax.set_xlabel("predicted")
    ax.set_ylabel("true")
    plt.tight_layout()
    plt.show()
    worst = max(((t, p) for t in range(n) for p in range(n) if t != p), key=lambda tp: confusion[tp])
    print(f"most frequent confusion: {classes[worst[0]]} predicted as {classes[worst[1]]} "
          f"({int(confusion[worst])} of {int(confusion[worst[0]].sum())} test images)")
    return confusion
