"""gpu_ml.profile (Nsight Compute) and gpu_ml.sanitize (compute-sanitizer): parsing, the refusals without a GPU or
the tool, and the child-process plumbing against stand-in tools on CPU; the real tools on a GPU machine."""

from __future__ import annotations

import shutil
import stat
import subprocess
import sys

import pytest

from gpu_ml import profile, sanitize
from gpu_ml.env import has_gpu

NCU_OUTPUT = """==PROF== Connected to process 4242 (/usr/bin/python3.12)
==PROF== Profiling "gemm_kernel" - 0: 0%....50%....100% - 3 passes
"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size","Device","CC",\
"Section Name","Metric Name","Metric Unit","Metric Value"
"0","4242","python3.12","127.0.0.1","void gemm_kernel<float>(float*, int)","1","7","(128, 1, 1)","(64, 1, 1)","0",\
"9.0","Command line profiler metrics","dram__bytes.sum","byte","1,048,576"
"0","4242","python3.12","127.0.0.1","void gemm_kernel<float>(float*, int)","1","7","(128, 1, 1)","(64, 1, 1)","0",\
"9.0","Command line profiler metrics","gpu__time_duration.sum","nsecond","5,120"
"1","4242","python3.12","127.0.0.1","softmax","1","7","(256, 1, 1)","(8, 1, 1)","0","9.0",\
"Command line profiler metrics","sm__throughput.avg.pct_of_peak_sustained_elapsed","%","n/a"
==PROF== Disconnected from process 4242
"""


def test_parse_csv_reads_the_measurements_after_the_header():
    measured = profile.parse_csv(NCU_OUTPUT)
    assert [(m.launch, m.metric, m.value) for m in measured] == [
        (0, "dram__bytes.sum", 1048576.0), (0, "gpu__time_duration.sum", 5120.0),
        (1, "sm__throughput.avg.pct_of_peak_sustained_elapsed", "n/a")]
    assert measured[0].kernel == "void gemm_kernel<float>(float*, int)" and measured[1].unit == "nsecond"
    table = profile.by_kernel(measured)
    assert table[(0, "void gemm_kernel<float>(float*, int)")]["gpu__time_duration.sum"] == 5120.0
    assert profile.parse_csv("==PROF== no kernels were profiled\n") == []
    header = NCU_OUTPUT[NCU_OUTPUT.index('"ID"'):].splitlines()[0]
    with pytest.raises(ValueError, match="fewer fields than its header"):
        profile.parse_csv(header + '\n"0","1"\n')
    with pytest.raises(ValueError, match="lacks the columns"):
        profile.parse_csv('"ID","Kernel Name"\n"0","k"\n')


def test_sanitizer_summary_is_read():
    assert sanitize.errors_in("========= ERROR SUMMARY: 0 errors\n") == 0
    assert sanitize.errors_in("========= Invalid __global__ write\n========= ERROR SUMMARY: 3 errors\n") == 3
    assert sanitize.errors_in("========= RACECHECK SUMMARY: 3 hazards displayed (2 errors, 1 warnings)\n") == 2
    with pytest.raises(ValueError, match="no 'ERROR SUMMARY' line"):
        sanitize.errors_in("Segmentation fault\n")


def test_a_tool_is_found_on_path_or_beside_nvcc(tmp_path, monkeypatch):
    _stand_in(tmp_path, "nvcc", "exit 0\n")
    _stand_in(tmp_path, "compute-sanitizer", "exit 0\n")
    monkeypatch.setattr(profile, "nvcc", lambda: str(tmp_path / "nvcc"))
    monkeypatch.setattr(profile, "has_nvcc", lambda: True)
    monkeypatch.setattr(shutil, "which", lambda name: None)  # on no PATH
    assert profile.find("compute-sanitizer") == str(tmp_path / "compute-sanitizer")
    assert profile.find("ncu") is None
    monkeypatch.setattr(sanitize, "has_gpu", lambda: False)
    assert not sanitize.available()  # the tool is there, the GPU is not
    monkeypatch.setattr(sanitize, "has_gpu", lambda: True)
    assert sanitize.available()


def test_without_a_gpu_or_the_tool_nothing_starts(monkeypatch):
    monkeypatch.setattr(profile, "has_gpu", lambda: False)
    with pytest.raises(RuntimeError, match="ncu .* needs a CUDA GPU"):
        profile.ncu("pass")
    with pytest.raises(RuntimeError, match="compute-sanitizer .* needs a CUDA GPU"):
        sanitize.sanitize("pass")
    monkeypatch.setattr(profile, "has_gpu", lambda: True)
    monkeypatch.setattr(shutil, "which", lambda name: None)  # neither on PATH nor beside an nvcc
    monkeypatch.setattr(profile, "has_nvcc", lambda: False)
    with pytest.raises(FileNotFoundError, match="ncu not found on PATH"):
        profile.ncu("pass")
    with pytest.raises(ValueError, match="tool must be one of"):
        sanitize.sanitize("pass", tool="leakcheck")


def _stand_in(folder, name: str, script: str) -> None:
    path = folder / name
    path.write_text("#!/bin/sh\n" + script)
    path.chmod(path.stat().st_mode | stat.S_IEXEC)


def test_the_child_process_is_run_and_read_through_stand_in_tools(tmp_path, monkeypatch):
    """Shell scripts stand in for the tools: what they are given, and what is made of what they print."""
    monkeypatch.setattr(profile, "has_gpu", lambda: True)
    monkeypatch.setenv("PATH", f"{tmp_path}:/usr/bin:/bin")
    (tmp_path / "ncu.out").write_text(NCU_OUTPUT)
    _stand_in(tmp_path, "ncu", f'echo "$@" > {tmp_path}/ncu.args\ncat {tmp_path}/ncu.out\n')
    measured = profile.ncu("import torch", kernel="gemm", count=2)
    assert len(measured) == 3
    args = (tmp_path / "ncu.args").read_text()
    assert "--csv" in args and "-c 2" in args and "-k regex:gemm" in args and "-c import torch" in args
    _stand_in(tmp_path, "ncu", 'echo "==ERROR== the profiler failed"\nexit 1\n')
    with pytest.raises(RuntimeError, match="ncu exited with 1:\n==ERROR== the profiler failed"):
        profile.ncu("pass")
    _stand_in(tmp_path, "compute-sanitizer", 'echo "========= Invalid __global__ read"\n'
              'echo "========= ERROR SUMMARY: 2 errors"\nexit 0\n')
    report = sanitize.sanitize("pass", tool="racecheck")
    assert report.errors == 2 and not report.clean and report.tool == "racecheck"
    _stand_in(tmp_path, "compute-sanitizer", f'echo "$@" > {tmp_path}/cs.args\n'
              'echo "========= RACECHECK SUMMARY: 0 hazards displayed (0 errors, 0 warnings)"\n')
    report = sanitize.sanitize_program(tmp_path / "a.out", tool="racecheck")
    assert report.clean
    assert (tmp_path / "cs.args").read_text().split() == ["--tool", "racecheck", str(tmp_path / "a.out")]


# The table `ncu --query-metrics` prints (its layout; a few rows of the many it lists).
QUERY_OUTPUT = """Device NVIDIA H200 (GH100)
------------------------------------------------------ ------------ ----------- ----------------------------------
Metric Name                                            Metric Type  Metric Unit Metric Description
------------------------------------------------------ ------------ ----------- ----------------------------------
dram__bytes                                            Counter      byte        # of bytes accessed in DRAM
lts__t_sector_hit_rate                                 Ratio                    proportion of L2 sector lookups that hit
sm__throughput                                         Throughput   %           SM throughput, ideal load balancing
smsp__sass_thread_inst_executed_op_ffma_pred_on        Counter      inst        # of thread instructions executed,
                                                                            predicated on, FFMA
"""


def test_the_metric_list_is_read_from_query_metrics_output():
    assert profile.parse_metric_list(QUERY_OUTPUT) == {
        "dram__bytes", "lts__t_sector_hit_rate", "sm__throughput", "smsp__sass_thread_inst_executed_op_ffma_pred_on"}
    assert profile.parse_metric_list('"dram__bytes","Counter","byte","# of bytes"\n') == {"dram__bytes"}  # CSV
    with pytest.raises(ValueError, match="no metric names in ncu's --query-metrics output"):
        profile.parse_metric_list("==ERROR== the profiler failed\n\n")


def test_unknown_metrics_are_named_before_a_profile():
    known = profile.parse_metric_list(QUERY_OUTPUT)
    names = ["dram__bytes.sum", "dram__bytes_read.sum", "lts__t_sector_hit_rate.pct", "sm__throughput",
             "launch__registers_per_thread", "smsp__sass_thread_inst_executed_op_fma_pred_on.sum"]
    assert profile.unknown_metrics(names, known) == ["dram__bytes_read.sum",
                                                     "smsp__sass_thread_inst_executed_op_fma_pred_on.sum"]
    assert profile.require_metrics(names[:4:2] + names[4:5], known) == 2  # launch statistics are left to ncu
    with pytest.raises(ValueError, match=r"does not know 2 of these metrics: dram__bytes_read\.sum, "
                                         r"smsp__sass_thread_inst_executed_op_fma_pred_on\.sum"):
        profile.require_metrics(names, known)


def test_query_metrics_and_the_profile_options_reach_ncu(tmp_path, monkeypatch):
    monkeypatch.setattr(profile, "has_gpu", lambda: True)
    monkeypatch.setenv("PATH", f"{tmp_path}:/usr/bin:/bin")
    (tmp_path / "query.out").write_text(QUERY_OUTPUT)
    (tmp_path / "ncu.out").write_text(NCU_OUTPUT)
    _stand_in(tmp_path, "ncu", f'echo "$@" > {tmp_path}/ncu.args\n'
              f'if [ "$1" = "--query-metrics" ]; then cat {tmp_path}/query.out; else cat {tmp_path}/ncu.out; fi\n')
    assert "dram__bytes" in profile.query_metrics()
    assert (tmp_path / "ncu.args").read_text().split() == ["--query-metrics"]
    profile.require_metrics(["dram__bytes.sum"])  # asks ncu when no list is given
    profile.ncu("pass", from_start=False, clock_control="none")
    args = (tmp_path / "ncu.args").read_text()
    assert "--profile-from-start off" in args and "--clock-control none" in args
    profile.ncu("pass")
    args = (tmp_path / "ncu.args").read_text()
    assert "--profile-from-start" not in args and "--clock-control" not in args  # ncu's defaults otherwise
    with pytest.raises(ValueError, match="clock_control must be one of"):
        profile.ncu("pass", clock_control="boost")
    _stand_in(tmp_path, "ncu", 'echo "==ERROR== no device"\nexit 1\n')
    with pytest.raises(RuntimeError, match="ncu --query-metrics exited with 1"):
        profile.query_metrics()


# What ncu prints where the driver keeps the counters from this user (Colab, many rented GPUs).
NOT_PERMITTED_OUTPUT = """==PROF== Connected to process 4242 (/usr/bin/python3.12)
==ERROR== ERR_NVGPUCTRPERM - The user does not have permission to access NVIDIA GPU Performance Counters on the \
target device 0. For instructions on enabling permissions and to get more information see \
https://developer.nvidia.com/ERR_NVGPUCTRPERM
==PROF== Disconnected from process 4242
==WARNING== No kernels were profiled.
"""


def _fake_ncu(monkeypatch, stdout: str, returncode: int, stderr: str = "") -> list[list[str]]:
    """subprocess.run stands in for ncu (as found by `tool`): it prints `stdout` and exits with `returncode`."""
    calls: list[list[str]] = []

    def run(command, **kwargs):
        calls.append(command)
        return subprocess.CompletedProcess(command, returncode, stdout=stdout, stderr=stderr)

    monkeypatch.setattr(profile, "tool", lambda name: f"/fake/{name}")
    monkeypatch.setattr(profile.subprocess, "run", run)
    return calls


@pytest.mark.parametrize("returncode", [0, 1])  # with no kernel profiled, or ncu's own failure
def test_counters_not_permitted_is_its_own_error(monkeypatch, returncode):
    calls = _fake_ncu(monkeypatch, NOT_PERMITTED_OUTPUT, returncode)
    with pytest.raises(profile.CountersNotPermitted) as refused:
        profile.ncu("pass")
    message = str(refused.value)
    assert isinstance(refused.value, RuntimeError) and calls[0][0] == "/fake/ncu"
    for said in ("ERR_NVGPUCTRPERM", "only administrators", "On Colab", "NVreg_RestrictProfilingToAdminUsers=0",
                 "https://developer.nvidia.com/ERR_NVGPUCTRPERM", "ncu said: ==ERROR== ERR_NVGPUCTRPERM - The user"):
        assert said in message, (said, message)
    with pytest.raises(profile.CountersNotPermitted, match="NVreg_RestrictProfilingToAdminUsers=0"):
        profile.query_metrics()
    with pytest.raises(profile.CountersNotPermitted):
        profile.require_metrics(["dram__bytes.sum"])  # asks query_metrics
    _fake_ncu(monkeypatch, "", returncode, stderr=NOT_PERMITTED_OUTPUT)  # found on stderr as well
    with pytest.raises(profile.CountersNotPermitted):
        profile.ncu("pass")


@pytest.mark.parametrize("sharing", [False, True])
def test_ncu_holds_the_gpu_alone_and_beside_other_notebooks_runs_the_code_once_before(monkeypatch, sharing):
    depth = lambda: sys.modules["gpu_ml.bench"]._alone["depth"]  # noqa: E731  (the module, not gpu_ml.bench())
    calls = []
    _fake_ncu(monkeypatch, NCU_OUTPUT, 0)
    ncu_run = profile.subprocess.run
    monkeypatch.setattr(profile.subprocess, "run", lambda command, **kw: calls.append(("ncu", depth()))
                        or ncu_run(command, **kw))
    monkeypatch.setattr(profile, "run_child", lambda command, timeout, alone: calls.append((command, alone, depth())))
    monkeypatch.setattr(profile, "sharing_gpu", lambda: sharing)
    assert profile.ncu("print(1)")
    first = [([sys.executable, "-c", "print(1)"], False, 0)]  # beside the others, paused with this notebook
    assert calls == (first if sharing else []) + [("ncu", 1)]


def test_other_ncu_failures_stay_plain_runtime_errors(monkeypatch):
    _fake_ncu(monkeypatch, "==ERROR== the profiler failed\n", 1)
    with pytest.raises(RuntimeError, match="ncu exited with 1:\n==ERROR== the profiler failed") as failed:
        profile.ncu("pass")
    assert not isinstance(failed.value, profile.CountersNotPermitted)
    with pytest.raises(RuntimeError, match="ncu --query-metrics exited with 1") as failed:
        profile.query_metrics()
    assert not isinstance(failed.value, profile.CountersNotPermitted)
    _fake_ncu(monkeypatch, "==WARNING== No kernels were profiled.\n", 0)
    with pytest.raises(RuntimeError, match="measured no kernel") as failed:
        profile.ncu("pass")
    assert not isinstance(failed.value, profile.CountersNotPermitted)
    _fake_ncu(monkeypatch, NCU_OUTPUT, 0)  # and a profile that worked is read as before
    assert len(profile.ncu("pass")) == 3


def test_profiled_launches_are_grouped_by_kernel_name():
    table = profile.by_kernel(profile.parse_csv(NCU_OUTPUT))
    groups = profile.group_launches(table, {"gemm": r"gemm_kernel<", "softmax": r"^softmax$"})
    assert [len(rows) for rows in groups.values()] == [1, 1]
    assert profile.total(groups["gemm"], "dram__bytes.sum") == 1048576.0
    with pytest.raises(ValueError, match="not a number in every launch"):
        profile.total(groups["softmax"], "sm__throughput.avg.pct_of_peak_sustained_elapsed")
    with pytest.raises(ValueError, match=r"launch 1 \(softmax\) matches 0 of the patterns"):
        profile.group_launches(table, {"gemm": "gemm"})
    with pytest.raises(ValueError, match=r"launch 0 .* matches 2 of the patterns \(a, b\)"):
        profile.group_launches(table, {"a": "gemm", "b": "kernel", "softmax": "softmax"})
    with pytest.raises(ValueError, match="no profiled launch matched scan"):
        profile.group_launches(table, {"gemm": "gemm", "softmax": "softmax", "scan": "scan"})


def test_text_table_aligns_columns():
    text = profile.text_table(["kernel", "ms", "GB/s"], [["v1 naive", "34.1", "12"], ["v9", "1.2", "1400"]])
    assert text.splitlines() == ["kernel     ms GB/s", "v1 naive 34.1   12", "v9        1.2 1400"]
    assert profile.text_table(["a", "b", "c"], [["xy", "z", "1"]], left=2).splitlines() == ["a  b c", "xy z 1"]
    with pytest.raises(ValueError, match="every row needs 2 cells"):
        profile.text_table(["a", "b"], [["only one"]])


def test_a_claim_is_judged_from_the_measured_value():
    claim = profile.Claim("v2 reads 4 sectors per request", "sectors per request", "about 2.5",
                          profile.within(2.5, 0.25))
    assert profile.judge(claim, 2.6) == "agrees"
    assert profile.judge(claim, 8.0) == ("does not agree: the counters show 8 (sectors per request), "
                                         "expected about 2.5")
    assert profile.judge(claim, None) == "not measured"
    assert profile.within(0, 0.01)(0.005) and not profile.within(0, 0.01)(0.5)


def test_the_child_loads_the_notebooks_cuda_functions(tmp_path, monkeypatch):
    class Built:  # what the code needs of a CudaFunction: its name and library
        name, library = "twice", tmp_path / "libcell.so"

    code = profile.cuda_functions_code(Built())
    assert f"_Path({str(tmp_path / 'libcell.so')!r})" in code and f"{str(tmp_path / 'cell.cu')!r}" in code
    assert code.splitlines()[-1].startswith("twice = _load_library(")
    Built.name = "not a name"
    with pytest.raises(ValueError, match="is not a Python name"):
        profile.cuda_functions_code(Built())
    from gpu_ml import cuda

    if not cuda.has_nvcc():
        pytest.skip("nvcc not found: the library cannot be built")
    monkeypatch.setenv("GPU_ML_CACHE", str(tmp_path))
    source = 'extern "C" int twice(int n) { return 2 * n; }\n'
    fn = cuda.load_library(cuda.build(source, library=True), source)["twice"]
    namespace = {}
    exec(profile.cuda_functions_code(fn), namespace)  # as the child process would
    assert namespace["twice"].name == "twice" and namespace["twice"].library == fn.library


needs_gpu = pytest.mark.skipif(not has_gpu(), reason="needs a CUDA GPU")
MATMUL = "import torch; a = torch.randn(512, 512, device='cuda'); torch.cuda.synchronize(); (a @ a).sum().item()"


@needs_gpu
@pytest.mark.skipif(shutil.which("ncu") is None, reason="ncu not found")
def test_ncu_measures_a_matmul_on_the_gpu():
    table = profile.by_kernel(profile.ncu(MATMUL, kernel="gemm|Kernel", count=1))
    ((_, kernel), row), = table.items()
    assert row["gpu__time_duration.sum"] > 0 and row["dram__bytes.sum"] > 0, (kernel, row)


@needs_gpu
@pytest.mark.skipif(not sanitize.available(), reason="compute-sanitizer not found")
def test_sanitize_finds_nothing_in_a_clean_run():
    report = sanitize.sanitize(MATMUL)
    assert report.clean, report.output[-2000:]
