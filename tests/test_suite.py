"""`gpu-ml test` (gpu_ml.suite): collect, shard, plan over workers, run, record the times."""

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from gpu_ml import cli, results, suite

ROOT = Path(__file__).resolve().parents[1]


def test_collect_finds_every_notebook_and_test_file():
    items = suite.collect(ROOT)
    assert "triton/01-basics/01_vector_add.ipynb" in items and "tests/test_suite.py" in items
    assert all(i.endswith((".ipynb", ".py")) for i in items) and items == sorted(items)
    assert not any(".ipynb_checkpoints" in i or i.startswith(".") for i in items)


def test_shards_partition_the_suite():
    items = [f"i{k}" for k in range(10)]
    parts = [suite.shard(items, i, 3) for i in (1, 2, 3)]
    assert sorted(sum(parts, [])) == sorted(items) and [len(p) for p in parts] == [4, 3, 3]
    with pytest.raises(ValueError, match="need 1 <= i <= n"):
        suite.shard(items, 4, 3)


def test_order_puts_the_longest_items_first():
    seconds = {"a": 1.0, "b": 8.0, "c": 100.0}
    assert suite.order(["a", "b", "c", "x", "y"], seconds) == ["c", "x", "y", "b", "a"]  # x, y: the default guess
    with pytest.raises(ValueError, match="workers must be at least 1"):
        suite.run(["x"], lambda item, gpu: (1.0, True, "", None), 1, 0)


def test_a_free_worker_takes_the_next_item_and_one_waiting_for_its_build_lets_the_next_ones_pass():
    started, built = [], {"cuda/a.ipynb": threading.Event()}
    lock = threading.Lock()

    def runner(item, gpu):
        with lock:
            started.append(item)
        time.sleep(0.5 if item == "slow" else 0.05)
        if item == "c":
            built["cuda/a.ipynb"].set()  # its build ends while the slow item still runs
        return (0.1, True, "", None)

    suite.run(["cuda/a.ipynb", "slow", "b", "c", "d"], runner, 1, 2, built=built)
    assert sorted(started[:2]) == ["b", "slow"] and started[2] == "c"  # a waits for its build; the others pass it
    assert started[3:] == ["cuda/a.ipynb", "d"]  # once built, it goes ahead of d, behind it in the list


def test_commands():
    assert suite.command("a.ipynb", save=True)[1:] == ["-m", "gpu_ml.cli", "execute", "a.ipynb"]
    assert suite.command("a.ipynb", save=False)[1:4] == ["-m", "pytest", "-q"]
    assert suite.command("tests/test_x.py", save=True)[-1] == "tests/test_x.py"


def test_main_runs_reports_and_records(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("GPU_ML_EMULATE", raising=False)  # it saves outputs, which an emulated run refuses
    (tmp_path / "pyproject.toml").write_text("")
    for path in ("triton/a.ipynb", "cuda/b.ipynb", "tests/test_c.py", "tests/test_d.py"):
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text("")
    (tmp_path / "tests/test_d.py").write_text(f"import pytest\n\n{suite.CPU_ONLY}\n")
    monkeypatch.setattr("torch.cuda.is_available", lambda: False)
    ran = []

    def runner(item, gpu):
        ran.append((item, gpu))
        return (2.0, item != "cuda/b.ipynb", "the end of the output", 3.0 if item.endswith(".ipynb") else None)

    built = []

    def prebuild(notebooks, done):
        built.append((sorted(notebooks), list(ran)))
        for nb in notebooks:
            done(nb)
        return "built 0 %%cuda cells"

    assert suite.main(workers=2, test_workers=3, root=tmp_path, runner=runner, prebuild=prebuild) == 1
    assert ran[0] == ("tests/test_c.py", None)  # the test files first, then the notebooks beside the CPU-only one
    assert sorted(ran[1:]) == [("cuda/b.ipynb", None), ("tests/test_d.py", None), ("triton/a.ipynb", None)]
    assert built[0][0] == ["cuda/b.ipynb", "triton/a.ipynb"] and ("cuda/b.ipynb", None) not in built[0][1]
    out = capsys.readouterr().out
    assert "FAIL" in out and "cuda/b.ipynb failed" in out and "3 of 4 passed" in out and "built 0 %%cuda" in out
    assert "; failed: cuda/b.ipynb" in out and " 2.0 s (CPU     3.0 s)  worker " in out
    assert "min of CPU time: " in out and f" of {os.cpu_count()} cores busy on average" in out
    assert "1 test files on 3 worker(s), then 2 notebooks on 2 worker(s) beside 1 CPU-only test files" in out
    record = json.loads((tmp_path / "results" / "suite" / "cpu.json").read_text())
    assert record["workers"] == 2 and record["test_workers"] == 3
    assert record["items"]["triton/a.ipynb"] == {"seconds": 2.0, "passed": True, "cpu_s": 3.0}
    assert record["items"]["tests/test_c.py"] == {"seconds": 2.0, "passed": True}
    (tmp_path / "README.md").write_text(f"{results.START}\n{results.END}\n")
    results.update_readme(tmp_path)  # the suite's record is not a table of figures: the table skips it
    ran.clear()
    assert suite.main(shard_spec="2/3", root=tmp_path, runner=runner) == 0  # only tests/test_c.py
    assert ran == [("tests/test_c.py", None)]
    ran.clear()
    assert suite.main(["triton/a.ipynb"], root=tmp_path, runner=runner) == 0
    assert ran == [("triton/a.ipynb", None)]
    # with --save, gpu-ml execute wrote the notebook's peak GPU memory and time alone into it: the record keeps them
    (tmp_path / "triton/a.ipynb").write_text(json.dumps({"metadata": {"gpu_ml": {
        "peak_gpu_memory_gib": 3.25, "gpu_alone_s": 12.5, "measurements": 7, "measurement_wait_s": 0.5,
        "versions": {}}}}))
    assert suite.main(["triton/a.ipynb"], save=True, root=tmp_path, runner=runner) == 0
    record = json.loads((tmp_path / "results" / "suite" / "cpu.json").read_text())
    assert record["items"]["triton/a.ipynb"] == {"seconds": 2.0, "passed": True, "cpu_s": 3.0,
                                                 "peak_gpu_memory_gib": 3.25,
                                                 "gpu_alone_s": 12.5, "measurements": 7, "measurement_wait_s": 0.5}
    path = tmp_path / "results" / "suite" / "cpu.json"
    path.write_text(json.dumps(json.loads(path.read_text()) | {"note": "how the runs were made"}))  # by hand
    assert suite.main(["triton/a.ipynb"], root=tmp_path, runner=runner) == 0  # a run without --save keeps the peak
    record = json.loads(path.read_text())
    assert record["items"]["triton/a.ipynb"]["peak_gpu_memory_gib"] == 3.25
    assert record["note"] == "how the runs were made"  # and what it does not write
    with pytest.raises(ValueError, match="not notebooks or test files of the suite: triton/nope.ipynb"):
        suite.main(["triton/nope.ipynb"], root=tmp_path, runner=runner)
    for spec in ("3", "2-4", "a/b"):
        with pytest.raises(ValueError, match="give it as I/N"):
            suite.main(shard_spec=spec, root=tmp_path, runner=runner)
    with pytest.raises(ValueError, match="workers must be at least 1, got 0"):
        suite.main(workers=0, root=tmp_path, runner=runner)


def test_an_emulated_run_has_its_own_record_and_saves_no_outputs(tmp_path, monkeypatch):
    (tmp_path / "pyproject.toml").write_text("")
    (tmp_path / "triton").mkdir()
    (tmp_path / "triton/a.ipynb").write_text("{}")
    monkeypatch.setattr("torch.cuda.is_available", lambda: True)
    monkeypatch.setattr("torch.cuda.device_count", lambda: 1)
    monkeypatch.setattr("torch.cuda.get_device_name", lambda *a: "NVIDIA H200")
    monkeypatch.setenv("GPU_ML_EMULATE", "t4")
    runner = lambda item, gpu: (1.0, True, "", None)  # noqa: E731
    with pytest.raises(ValueError, match="--save under GPU_ML_EMULATE"):
        suite.main(save=True, root=tmp_path, runner=runner, prebuild=lambda nbs, done: "")
    assert suite.main(root=tmp_path, runner=runner, prebuild=lambda nbs, done: "") == 0
    assert (tmp_path / "results" / "suite" / "tesla-t4-emulated.json").exists()
    assert not (tmp_path / "results" / "suite" / "nvidia-h200.json").exists()


def test_notebooks_sharing_a_gpu_under_emulation_plan_with_the_gpus_own_peaks_capped_by_the_profile(tmp_path,
                                                                                                    monkeypatch):
    (tmp_path / "pyproject.toml").write_text("")
    (tmp_path / "triton").mkdir()
    for name in "abc":
        (tmp_path / f"triton/{name}.ipynb").write_text("{}")
    (tmp_path / "results/suite").mkdir(parents=True)
    (tmp_path / "results/suite/nvidia-h200.json").write_text(json.dumps({"items": {
        "triton/a.ipynb": {"seconds": 1.0, "peak_gpu_memory_gib": 90.0},
        "triton/b.ipynb": {"seconds": 1.0, "peak_gpu_memory_gib": 2.0}}}))
    monkeypatch.setattr("torch.cuda.is_available", lambda: True)
    monkeypatch.setattr("torch.cuda.device_count", lambda: 1)
    monkeypatch.setattr("torch.cuda.get_device_name", lambda *a: "NVIDIA H200")
    monkeypatch.setattr("torch.cuda.mem_get_info", lambda *a: (0, 141 * 2**30))
    seen = {}

    def run(items, runner, gpus, workers, ended=None, *, peaks=None, **kwargs):
        seen.update(peaks or {})
        return {item: (1.0, True, "", None) for item in items}

    monkeypatch.setattr(suite, "run", run)
    for profile, capped in (("a100", 80.0), ("t4", 15.0)):
        monkeypatch.setenv("GPU_ML_EMULATE", profile)
        assert suite.main(workers=3, root=tmp_path, runner=lambda item, gpu: (1.0, True, "", None)) == 0
        assert seen == {"triton/a.ipynb": capped, "triton/b.ipynb": 2.0,
                        "triton/c.ipynb": min(capped, suite.DEFAULT_PEAK_GIB)}


def test_several_notebooks_without_test_files_are_built_on_every_core_each_running_once_built(tmp_path, monkeypatch):
    (tmp_path / "pyproject.toml").write_text("")
    (tmp_path / "cuda").mkdir()
    for name in "ab":
        (tmp_path / f"cuda/{name}.ipynb").write_text("{}")
    monkeypatch.setattr("torch.cuda.is_available", lambda: True)
    monkeypatch.setattr("torch.cuda.device_count", lambda: 1)
    monkeypatch.setattr("torch.cuda.get_device_name", lambda *a: "NVIDIA H200")
    monkeypatch.delenv("GPU_ML_EMULATE", raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: 16)
    events = []

    def build(notebooks, root, processes, done):
        events.append(("building", list(notebooks), processes))
        for nb in notebooks:
            time.sleep(0.3)  # nothing runs before its own build is done
            events.append(("built", nb))
            done(nb)
        return "built"

    monkeypatch.setattr(suite, "build_cuda_cells", build)
    (tmp_path / "results/suite").mkdir(parents=True)
    (tmp_path / "results/suite/nvidia-h200.json").write_text(json.dumps({"items": {"cuda/b.ipynb": {"seconds": 90.0}}}))
    runner = lambda item, gpu: events.append(("ran", item)) or (1.0, True, "", None)  # noqa: E731
    assert suite.main(root=tmp_path, runner=runner) == 0
    assert events == [("building", ["cuda/b.ipynb", "cuda/a.ipynb"], 16),  # the longest first, on every core
                      ("built", "cuda/b.ipynb"), ("ran", "cuda/b.ipynb"), ("built", "cuda/a.ipynb"),
                      ("ran", "cuda/a.ipynb")]
    events.clear()
    assert suite.main(["cuda/a.ipynb"], root=tmp_path, runner=runner) == 0  # one notebook builds its own cells
    assert events == [("ran", "cuda/a.ipynb")]


def _one_h200_project(tmp_path, monkeypatch, *notebooks: str) -> None:
    """A project of `notebooks`, a GPU test file tests/test_c.py and a CPU-only tests/test_d.py, on one (faked) H200
    of 100 GiB."""
    (tmp_path / "pyproject.toml").write_text("")
    for path in (*notebooks, "tests/test_c.py", "tests/test_d.py"):
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text("{}")
    (tmp_path / "tests/test_d.py").write_text(suite.CPU_ONLY + "\n")
    monkeypatch.setattr("torch.cuda.is_available", lambda: True)
    monkeypatch.setattr("torch.cuda.device_count", lambda: 1)
    monkeypatch.setattr("torch.cuda.get_device_name", lambda *a: "NVIDIA H200")
    monkeypatch.setattr("torch.cuda.mem_get_info", lambda *a: (0, 100 * 2**30))
    monkeypatch.delenv("GPU_ML_EMULATE", raising=False)


def test_notebooks_sharing_a_gpu_run_after_the_test_files_by_default(tmp_path, monkeypatch):
    """Without tests_beside, the GPU test files run first, without the lock; then the notebooks, sharing the GPU
    (the lock named), beside the CPU-only test file."""
    _one_h200_project(tmp_path, monkeypatch, "triton/a.ipynb", "triton/b.ipynb")
    monkeypatch.setattr(suite, "build_cuda_cells", lambda notebooks, root, processes, done: "built")
    events = []
    runner = lambda item, gpu: events.append((item, suite.SHARED_GPU_LOCK in os.environ)) or (1.0, True, "", None)  # noqa: E731
    assert suite.main(workers=2, root=tmp_path, runner=runner) == 0
    assert events[0] == ("tests/test_c.py", False)
    assert sorted(events[1:]) == [("tests/test_d.py", True), ("triton/a.ipynb", True), ("triton/b.ipynb", True)]


def test_notebooks_sharing_a_gpu_run_beside_the_test_files_each_once_built(tmp_path, monkeypatch):
    """With tests_beside and more notebook workers than GPUs, the GPU test files run beside the notebooks (the
    notebooks' measurements pause them), and the build beside both on the other cores; a notebook without CUDA cells
    need not wait for the build, one with them waits for its own. Test files and notebooks plan with one account of
    the GPU's memory."""
    _one_h200_project(tmp_path, monkeypatch, "cuda/a.ipynb", "triton/b.ipynb")
    monkeypatch.setattr(os, "cpu_count", lambda: 16)
    events, plans = [], []

    def build(notebooks, root, processes, done):
        events.append(("building", processes))
        done("triton/b.ipynb")  # no CUDA cells
        deadline = time.time() + 60
        while len(events) < 4 and time.time() < deadline:  # the three items that need not wait have run
            time.sleep(0.01)
        events.append(("built", "cuda/a.ipynb"))
        done("cuda/a.ipynb")
        return "built"

    monkeypatch.setattr(suite, "build_cuda_cells", build)
    real_run = suite.run

    def run(items, *args, memory=None, peaks=None, **kwargs):
        plans.append((sorted(items), memory, peaks))
        return real_run(items, *args, memory=memory, peaks=peaks, **kwargs)

    monkeypatch.setattr(suite, "run", run)
    runner = lambda item, gpu: events.append((item, suite.SHARED_GPU_LOCK in os.environ)) or (1.0, True, "", None)  # noqa: E731
    assert suite.main(workers=2, test_workers=2, tests_beside=True, root=tmp_path, runner=runner) == 0
    assert events[0] == ("building", 14)  # 16 cores less 2 for the test files
    built_at = events.index(("built", "cuda/a.ipynb"))
    assert sorted(events[1:built_at]) == [("tests/test_c.py", True), ("tests/test_d.py", True),
                                          ("triton/b.ipynb", True)]  # none waits for the build
    assert events[built_at + 1:] == [("cuda/a.ipynb", True)]
    plan = {tuple(items): (memory, peaks) for items, memory, peaks in plans}
    tests, notebooks = plan[("tests/test_c.py",)], plan[("cuda/a.ipynb", "triton/b.ipynb")]
    assert tests[0] is notebooks[0] and tests[0].capacity == suite.MEMORY_SHARE * 100  # one account
    assert notebooks[1]["tests/test_c.py"] == suite.DEFAULT_TEST_PEAK_GIB
    assert notebooks[1]["triton/b.ipynb"] == suite.DEFAULT_PEAK_GIB
    assert plan[("tests/test_d.py",)][0] is None  # the CPU-only file: no GPU memory


def test_test_files_beside_sharing_notebooks_get_the_lock_and_record_their_peak(tmp_path, monkeypatch):
    _one_h200_project(tmp_path, monkeypatch, "triton/a.ipynb", "triton/b.ipynb")
    monkeypatch.setattr(suite, "build_cuda_cells", lambda notebooks, root, processes, done: "built")
    child = (f"import os, sys; lock = os.environ.get({suite.SHARED_GPU_LOCK!r})\n"
             f"print(sys.argv[1], bool(lock), bool(os.environ.get({suite.TEST_HOLDS_LOCK!r})))\n"
             f"run = os.environ.get({suite.RUN_FILE!r})\n"
             "if run: open(run, 'w').write('{\"peak_gpu_memory_gib\": 3.0, \"paused_s\": 1.5}')")
    monkeypatch.setattr(suite, "command", lambda item, save: [sys.executable, "-c", child, item])
    seen, real = [], suite.run_item
    monkeypatch.setattr(suite, "run_item",
                        lambda *a, **k: seen.append(real(*a, **k)[2].split()) or (1.0, True, "", None))
    assert suite.main(workers=2, tests_beside=True, root=tmp_path) == 0
    assert sorted(seen) == [["tests/test_c.py", "True", "True"], ["tests/test_d.py", "False", "False"],
                            ["triton/a.ipynb", "True", "False"], ["triton/b.ipynb", "True", "False"]]  # the kernel's
    items = json.loads((tmp_path / "results/suite/nvidia-h200.json").read_text())["items"]
    assert items["tests/test_c.py"] == {"seconds": 1.0, "passed": True, "peak_gpu_memory_gib": 3.0, "paused_s": 1.5}
    assert "peak_gpu_memory_gib" not in items["tests/test_d.py"]  # CPU-only: no run file


def test_items_side_by_side_share_the_cores_through_omp_num_threads(tmp_path, monkeypatch):
    _one_h200_project(tmp_path, monkeypatch, "triton/a.ipynb", "triton/b.ipynb")
    monkeypatch.setattr(suite, "build_cuda_cells", lambda notebooks, root, processes, done: "built")
    monkeypatch.setattr(suite.os, "cpu_count", lambda: 16)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    child = "import os, sys; print(sys.argv[1], os.environ.get('OMP_NUM_THREADS'))"
    monkeypatch.setattr(suite, "command", lambda item, save: [sys.executable, "-c", child, item])
    seen, real = [], suite.run_item
    monkeypatch.setattr(suite, "run_item",
                        lambda *a, **k: seen.append(real(*a, **k)[2].split()) or (1.0, True, "", None))
    assert suite.main(workers=4, test_workers=8, root=tmp_path) == 0
    assert sorted(seen) == [["tests/test_c.py", "2"], ["tests/test_d.py", "2"], ["triton/a.ipynb", "4"],
                            ["triton/b.ipynb", "4"]]
    seen.clear()
    monkeypatch.setenv("OMP_NUM_THREADS", "3")  # the user's choice stands
    assert suite.main(workers=4, root=tmp_path) == 0
    assert {threads for _, threads in seen} == {"3"}


def test_runs_side_by_side_share_the_gpus_memory():
    """Two runs with one GpuMemory (the test files and the notebooks): their items never ask for more together than
    it holds, and while one run's next item waits for memory the other starts nothing on that GPU."""
    running, together, guard = set(), [], threading.Lock()
    release = {item: threading.Event() for item in ("t1", "t2")}  # the others end at once

    def runner(item, gpu):
        with guard:
            running.add(item)
            together.append(frozenset(running))
        if item in release:
            assert release[item].wait(60)
        with guard:
            running.discard(item)
        return (0.1, True, "", None)

    def until(condition):
        deadline = time.time() + 60
        while not condition():
            assert time.time() < deadline
            time.sleep(0.01)

    memory = suite.GpuMemory(1, 100.0)
    peaks = {"t1": 50.0, "t2": 10.0, "t3": 15.0, "big": 90.0}
    runs = [threading.Thread(target=suite.run, args=(["t1", "t2", "t3"], runner, 1, 2),
                             kwargs={"peaks": peaks, "memory": memory}),
            threading.Thread(target=suite.run, args=(["big"], runner, 1, 1), kwargs={"peaks": peaks, "memory": memory})]
    runs[0].start()
    until(lambda: running == {"t1", "t2"})  # 60 GiB
    runs[1].start()
    until(lambda: memory.waiting[0] is not None)  # big: 90 GiB do not fit beside them
    release["t2"].set()  # t3 would fit beside t1 now, but big waits first
    until(lambda: "t2" not in running)
    time.sleep(0.3)
    assert "t3" not in running
    release["t1"].set()
    for thread in runs:
        thread.join()
    assert all(sum(peaks[i] for i in s) <= 100 for s in together if len(s) > 1)
    first = {name: min(i for i, s in enumerate(together) if name in s) for name in peaks}
    assert first["big"] < first["t3"]  # t3 fitted beside t1 before big could start, but big's wait came first


def test_run_item_never_hands_a_test_file_the_lock(tmp_path, monkeypatch):
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests/test_cpu.py").write_text(suite.CPU_ONLY + "\n")
    show = f"import os; print(os.environ.get({suite.SHARED_GPU_LOCK!r}))"
    monkeypatch.setattr(suite, "command", lambda item, save: [sys.executable, "-c", show])
    monkeypatch.setenv(suite.SHARED_GPU_LOCK, str(tmp_path / "gpu.lock"))
    assert suite.run_item("tests/test_cpu.py", None, False, 30, tmp_path)[2].split() == ["None"]


def test_each_item_is_recorded_as_it_ends(tmp_path, monkeypatch):
    """A run cut short (a time limit, a killed machine) keeps the record of every item that had ended."""
    (tmp_path / "pyproject.toml").write_text("")
    for path in ("triton/a.ipynb", "triton/b.ipynb"):
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text("")
    monkeypatch.setattr("torch.cuda.is_available", lambda: False)
    record = tmp_path / "results" / "suite" / "cpu.json"
    seen = []

    def runner(item, gpu):
        if item == "triton/b.ipynb":  # what a run killed now would leave behind
            seen.append(json.loads(record.read_text())["items"])
        return (3.0, False, f"the end of {item}'s output", None)

    assert suite.main(["triton/a.ipynb", "triton/b.ipynb"], root=tmp_path, runner=runner) == 1
    assert seen == [{"triton/a.ipynb": {"seconds": 3.0, "passed": False}}]
    assert list(json.loads(record.read_text())["items"]) == ["triton/a.ipynb", "triton/b.ipynb"]


def test_run_spreads_workers_over_the_gpus():
    seen = []

    def runner(item, gpu):
        seen.append((item, gpu))
        time.sleep(0.2)  # each worker takes one item
        return (1.0, True, "", None)

    suite.run(["a", "b", "c"], runner, 2, 3)
    assert sorted(gpu for _, gpu in seen) == [0, 0, 1]  # workers 0 and 2 on GPU 0, worker 1 on GPU 1
    suite.run(["d"], runner, 1, 1)
    assert seen[-1] == ("d", None)  # one GPU: nothing to choose


def test_notebooks_sharing_a_gpu_start_only_when_their_peaks_fit_beside_the_running_ones():
    running, together = set(), []
    guard = threading.Lock()

    def runner(item, gpu):
        with guard:
            running.add(item)
            together.append(frozenset(running))
        time.sleep(0.2)
        with guard:
            running.discard(item)
        return (0.2, True, "", None)

    peaks = {"big1": 60.0, "big2": 60.0, "small": 10.0}  # "unknown": DEFAULT_PEAK_GIB
    suite.run(["big1", "big2", "small", "unknown"], runner, 1, 3, peaks=peaks, capacity=100.0)
    assert not any({"big1", "big2"} <= s for s in together)  # 120 GiB together: never side by side
    assert together[:2] == [{"big1"}, {"big2"}]  # the small ones did not pass big2 while it waited for memory
    assert {"big2", "small", "unknown"} in together  # but ran beside it: 86 GiB
    together.clear()
    suite.run(["huge"], runner, 1, 1, peaks={"huge": 500.0}, capacity=100.0)  # alone, it runs anyway
    assert together == [frozenset({"huge"})]


def test_build_cuda_cells_builds_each_notebook_with_cuda_cells_in_a_process(tmp_path, monkeypatch):
    for name in ("a", "c"):
        (tmp_path / f"{name}.ipynb").write_text('{"cells": [{"source": "%%cuda ..."}]}')
    (tmp_path / "b.ipynb").write_text('{"cells": []}')
    calls, done = [], []

    def fake_run(cmd, **kwargs):
        calls.append(cmd[-1])
        assert "os.nice(10)" in cmd[2]  # below the notebooks and tests beside it
        if cmd[-1] == "c.ipynb":
            return subprocess.CompletedProcess(cmd, 1, stdout="", stderr="nvcc failed")  # the notebook builds it
        return subprocess.CompletedProcess(cmd, 0, stdout="3\n", stderr="")

    monkeypatch.setattr(suite.subprocess, "run", fake_run)
    line = suite.build_cuda_cells(["c.ipynb", "a.ipynb", "b.ipynb"], tmp_path, 1, done.append)
    assert line.startswith("built 3 %%cuda cells of 2 notebooks")
    assert calls == ["c.ipynb", "a.ipynb"]  # in the order given
    assert done == ["b.ipynb", "c.ipynb", "a.ipynb"]  # each one's wait ends, also after a failed build


def test_run_item_reports_failure_and_time_out(tmp_path, monkeypatch):
    monkeypatch.setattr(suite, "command", lambda item, save: [sys.executable, "-c", item])
    seconds, passed, output, _ = suite.run_item("print('hi')", None, False, 30, tmp_path)
    assert passed and "hi" in output and seconds > 0
    assert not suite.run_item("raise SystemExit(3)", 0, False, 30, tmp_path)[1]
    _, passed, output, _ = suite.run_item("import time; time.sleep(5)", None, False, 0.5, tmp_path)
    assert not passed and "timed out" in output


@pytest.mark.skipif(not hasattr(os, "wait4"), reason="CPU seconds come from os.wait4 (POSIX)")
def test_run_item_counts_the_cpu_seconds_of_the_child_and_what_it_waited_for(tmp_path, monkeypatch):
    monkeypatch.setattr(suite, "command", lambda item, save: [sys.executable, "-c", item])
    spin = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.6:\n    pass"
    child = f"import subprocess, sys; subprocess.run([sys.executable, '-c', {spin!r}])"
    before = suite.children_cpu()
    seconds, passed, _, cpu = suite.run_item(child, None, False, 30, tmp_path)
    assert passed and 0.6 <= cpu <= seconds + 0.5  # the grandchild's 0.6 s of CPU count: its parent waited for it
    assert suite.children_cpu() - before >= 0.6  # and the suite's total (its last line)
    _, _, _, slept = suite.run_item("import time; time.sleep(0.5)", None, False, 30, tmp_path)
    assert slept < 0.4  # waiting is not CPU time


def test_without_the_resource_module_the_last_line_gives_no_cpu_time(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "resource", None)  # as on Windows: import resource fails
    assert suite.children_cpu() is None
    (tmp_path / "pyproject.toml").write_text("")
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests/test_a.py").write_text("")
    monkeypatch.setattr("torch.cuda.is_available", lambda: False)
    assert suite.main(root=tmp_path, runner=lambda item, gpu: (1.0, True, "", None)) == 0
    out = capsys.readouterr().out
    assert "min of item time)" in out and "CPU time" not in out


def test_cli_has_the_test_command(monkeypatch):
    seen = {}
    monkeypatch.setattr(suite, "main", lambda only, **kw: seen.update(kw, only=only) or 0)
    assert cli.main(["test", "--shard", "1/4", "--workers", "2", "--test-workers", "6", "--save"]) == 0
    assert seen == {"only": None, "shard_spec": "1/4", "workers": 2, "test_workers": 6, "save": True,
                    "timeout": 1800, "tests_beside": False}
    assert cli.main(["test", "--workers", "8", "--tests-beside"]) == 0
    assert seen["tests_beside"] is True
    assert cli.main(["test", "tests/test_c.py", "cuda/b.ipynb"]) == 0
    assert seen["only"] == ["tests/test_c.py", "cuda/b.ipynb"]


def test_a_test_file_given_the_lock_holds_it_and_writes_its_run_file(tmp_path):
    """conftest.py under gpu-ml test: a test file beside sharing notebooks claims the lock (its process is then
    registered to be paused, and the programs it runs pause with it) and, at the end, writes its peak and lock
    seconds for the suite's record."""
    (tmp_path / "test_tiny.py").write_text("from gpu_ml import cuda\n\n\ndef test_programs_pause_with_it():\n"
                                           "    assert cuda.PROGRAMS_TIME_THEMSELVES is False\n")
    run = tmp_path / "run.json"
    env = dict(os.environ, **{suite.RUN_FILE: str(run), suite.TEST_HOLDS_LOCK: "1",
                              suite.SHARED_GPU_LOCK: str(tmp_path / "gpu.lock")})
    env.pop("PYTEST_ADDOPTS", None)  # no xdist workers (CI's -n auto): the tests run where conftest.py claimed
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-c",
                           str(ROOT / "pyproject.toml"), "-p", "conftest", str(tmp_path / "test_tiny.py")],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:]
    assert (tmp_path / "gpu.lock.pids").is_dir()  # claimed: registered to be paused (and gone again at its exit)
    assert not list((tmp_path / "gpu.lock.pids").iterdir())
    written = json.loads(run.read_text())
    assert written["peak_gpu_memory_gib"] == 0.0 and written["gpu_alone_s"] == 0.0 and written["paused_s"] == 0.0
    assert 0 <= written["lock_wait_s"] < 5
