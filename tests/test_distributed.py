"""`gpu_ml.distributed.launch`: p ranks with torch.distributed up, their results back in rank order, and every way a
rank can go wrong (it raises, dies, hangs; a bad p; NCCL without the GPUs) reported as an error naming the rank,
never a hang. On the CPU with gloo; the collectives of cuda/08-multi-gpu run in them too."""

from __future__ import annotations

import collections
import os
import time

import pytest
import torch
import torch.distributed as dist

from gpu_ml import distributed
from gpu_ml.distributed import NO_MULTICAST, launch, need_gpus
from gpu_ml.kernels.distributed import collectives as coll

pytestmark = pytest.mark.cpu_only  # gloo only: gpu-ml test runs it beside the notebooks


def _rank_world_and_sum(offset):
    rank, p = dist.get_rank(), dist.get_world_size()
    x = torch.tensor([rank + offset])
    dist.all_reduce(x)
    return rank, p, x, os.environ["RANK"], {k: os.environ.get(k) for k in NO_MULTICAST}


def test_results_come_back_in_rank_order():
    for p in (1, 3):
        results = launch(_rank_world_and_sum, p, 10)
        assert [r[:2] for r in results] == [(r, p) for r in range(p)]
        assert all(torch.equal(r[2], torch.tensor([sum(range(p)) + 10 * p])) for r in results)
        assert [r[3] for r in results] == [str(r) for r in range(p)]
        assert all(r[4] == NO_MULTICAST for r in results)  # NVLink multicast off in every rank, gloo included


def _fails_on_rank_one():
    if dist.get_rank() == 1:
        raise ValueError("rank one says no")
    t = torch.zeros(1)
    dist.all_reduce(t)  # the others wait for rank 1, which has gone
    return t


def test_a_rank_that_raises_is_named_with_its_traceback():
    start = time.monotonic()
    with pytest.raises(RuntimeError, match=r"rank 1 of 3 failed") as error:
        launch(_fails_on_rank_one, 3, timeout=60)
    message = str(error.value)
    assert "ValueError: rank one says no" in message and "_fails_on_rank_one" in message
    assert time.monotonic() - start < 20  # stopped at once, not at the timeout


def _autograd_after_fork():
    raise RuntimeError("Unable to handle autograd's threading in combination with fork-based multiprocessing. "
                       "See https://github.com/pytorch/pytorch/wiki/Autograd-and-Fork")  # what torch raises then


def test_autograd_refused_after_fork_says_what_to_do():
    with pytest.raises(RuntimeError, match=r"rank [01] of 2 failed") as error:
        launch(_autograd_after_fork, 2, timeout=60)
    assert "ran a backward pass before the launch" in str(error.value)
    with pytest.raises(RuntimeError) as error:
        launch(_fails_on_rank_one, 2, timeout=60)
    assert "backward pass" not in str(error.value)  # only for that error


def _dies_on_rank_two():
    if dist.get_rank() == 2:
        os._exit(3)
    dist.barrier()
    return 0


def test_a_rank_that_dies_is_named():
    with pytest.raises(RuntimeError, match=r"rank 2 of 3 exited with code 3 without returning"):
        launch(_dies_on_rank_two, 3, timeout=60)


def test_a_rank_that_reported_just_before_it_ended_is_not_taken_for_dead(monkeypatch):
    """The last look for reports comes after the grace period even when this process was stopped through all of it
    (paused by a measurement in another notebook under gpu-ml test, or a loaded machine)."""
    import pickle
    import queue
    import types

    results = queue.Queue()
    results.put((0, True, pickle.dumps("done"), 0.0))
    clock = iter([0.0])
    monkeypatch.setattr(distributed.time, "monotonic", lambda: next(clock, 100.0))  # stopped past the grace period
    done = {}
    distributed._failed([types.SimpleNamespace(exitcode=0)], results, 1, done, {})
    assert done == {0: "done"}


def test_the_failure_caught_first_is_the_cause_whatever_order_the_reports_come_in():
    """Rank 2 raised first; its peers failed after it, when it left the group (a connection closed), and one of
    their reports came first."""
    import queue
    import types

    results = queue.Queue()
    results.put((2, False, "Traceback (most recent call last):\nValueError: rank 2 gives up\n", 10.0))
    results.put((0, False, "Traceback (most recent call last):\nRuntimeError: Connection closed by peer\n", 10.3))
    procs = [types.SimpleNamespace(exitcode=None) for _ in range(3)]
    first = {1: (10.2, "Traceback (most recent call last):\nRuntimeError: Connection closed by peer\n")}
    with pytest.raises(RuntimeError) as error:
        distributed._failed(procs, results, 3, {}, first)
    lines = [line for line in str(error.value).splitlines() if line]
    assert lines[0] == "rank 2 of 3 failed; all ranks stopped. Its traceback:"
    assert lines[2:] == ["ValueError: rank 2 gives up", "rank 1 failed too: RuntimeError: Connection closed by peer",
                         "rank 0 failed too: RuntimeError: Connection closed by peer"]


def _waits_forever():
    t = torch.zeros(1)
    dist.recv(t, (dist.get_rank() + 1) % 2)  # both ranks wait for the other: a deadlock
    return t


def test_a_hang_times_out_with_the_stack_of_each_rank():
    start = time.monotonic()
    with pytest.raises(RuntimeError, match=r"ranks 0, 1 of 2 did not finish within 2 s") as error:
        launch(_waits_forever, 2, timeout=2)
    message = str(error.value)
    assert "--- rank 0 was waiting in:" in message and "--- rank 1 was waiting in:" in message
    assert "in _waits_forever" in message  # faulthandler's stack points at the line
    assert time.monotonic() - start < 20


def test_a_function_defined_anywhere_runs_on_the_cpu():
    # A closure cannot be pickled by reference: the CPU ranks are forked, so it runs all the same (on Linux).
    scale = 7
    assert launch(lambda: dist.get_rank() * scale, 2) == [0, 7]


def test_spawned_ranks_run_an_importable_function():
    # How NCCL ranks start (fresh interpreters): the function and its arguments travel pickled.
    results = launch(coll.ring_all_reduce, 2, torch.arange(5.0), start_method="spawn")
    assert all(torch.equal(r, 2 * torch.arange(5.0)) for r in results)
    with pytest.raises(ValueError, match="start_method must be"):
        launch(coll.ring_all_reduce, 2, torch.arange(5.0), start_method="forkserver")


@pytest.mark.parametrize("p", [0, -1, 2.0, True, "2"])
def test_a_bad_p_is_refused_before_anything_starts(p):
    with pytest.raises(ValueError, match="p must be a positive int"):
        launch(_rank_world_and_sum, p, 0)


def test_a_bad_timeout_or_thread_count_is_refused():
    for timeout in (0, -1, float("inf"), float("nan")):
        with pytest.raises(ValueError, match="timeout must be a positive, finite number"):
            launch(_rank_world_and_sum, 2, 0, timeout=timeout)
    for threads in (0, -2, 1.5, True):
        with pytest.raises(ValueError, match="threads must be a positive int"):
            launch(_rank_world_and_sum, 2, 0, threads=threads)


def test_a_namedtuple_comes_back_with_its_tensors_on_the_cpu():
    from gpu_ml.distributed import _to_cpu

    Pair = collections.namedtuple("Pair", "a b")
    back = _to_cpu(Pair(torch.ones(2), [torch.zeros(1)]))
    assert type(back) is Pair and torch.equal(back.a, torch.ones(2)) and torch.equal(back.b[0], torch.zeros(1))


def test_nccl_without_enough_gpus_is_refused_before_launching(monkeypatch, capsys):
    monkeypatch.setattr(distributed, "gpu_count", lambda: 1)
    started = []
    monkeypatch.setattr(distributed.mp, "get_context", lambda *a: started.append(a))
    with pytest.raises(RuntimeError, match=r"gpus=True with p=2 needs 2 CUDA GPUs .* this machine has 1"):
        launch(_rank_world_and_sum, 2, 0, gpus=True)
    assert started == []  # no process was started
    assert need_gpus(1) and not need_gpus(2)
    assert "needs 2 CUDA GPUs" in capsys.readouterr().out


def _all_collectives(n):
    """Every collective of the lesson on an int64 vector of n elements; torch.distributed's answers beside them."""
    rank, p = dist.get_rank(), dist.get_world_size()
    x = torch.arange(n, dtype=torch.int64) * (rank + 1) + rank
    total = x.clone()
    dist.all_reduce(total)
    shard = coll.chunks_of(x, p)[rank]
    root = p - 1
    sent = x.clone()
    dist.broadcast(sent, root)
    return {"ring": (coll.ring_all_reduce(x), total), "tree": (coll.tree_all_reduce(x), total),
            "reduce-scatter": (coll.ring_reduce_scatter(x), coll.chunks_of(total, p)[rank]),
            "broadcast": (coll.tree_broadcast(x, root), sent), "shard": shard, "x": x}


@pytest.mark.parametrize(("p", "n"), [(1, 5), (2, 1), (3, 10), (5, 3), (6, 1001)])
def test_the_exported_collectives_match_torch_distributed(p, n):
    results = launch(_all_collectives, p, n)
    for out in results:
        for name in ("ring", "tree", "reduce-scatter", "broadcast"):
            ours, theirs = out[name]
            assert torch.equal(ours, theirs), name
    gathered = launch(lambda: coll.ring_all_gather(coll.chunks_of(torch.arange(n) * 3, p)[dist.get_rank()], n), p)
    assert all(torch.equal(g, torch.arange(n) * 3) for g in gathered)


def test_the_cost_model_and_its_fit():
    assert coll.ring_all_reduce_seconds(1000, 4, 1e-6, 1e-9) == pytest.approx(6e-6 + 1.5e-6)
    assert coll.ring_reduce_scatter_seconds(1000, 4, 1e-6, 1e-9) == pytest.approx(3e-6 + 0.75e-6)
    assert coll.tree_all_reduce_seconds(1000, 5, 1e-6, 1e-9) == pytest.approx(6 * (1e-6 + 1e-6))
    assert coll.tree_all_reduce_seconds(1000, 1, 1e-6, 1e-9) == 0.0
    sizes = [2.0**k for k in range(10, 24)]
    alpha, beta = coll.fit_alpha_beta(sizes, [3e-5 + s * 2e-10 for s in sizes])
    assert alpha == pytest.approx(3e-5, rel=1e-6) and beta == pytest.approx(2e-10, rel=1e-6)
    # the summation bound: 0 for integers; for float32 and p = 3, 2 * gamma_2 * sum|x|
    assert torch.equal(coll.sum_bound(torch.ones(2), 3, torch.int64), torch.zeros(2))
    u = 2.0**-24
    assert coll.sum_bound(torch.ones(1), 3, torch.float32).item() == pytest.approx(2 * 2 * u / (1 - 2 * u))
