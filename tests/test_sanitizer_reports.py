"""gpu_ml.sanitize.findings: compute-sanitizer's error records read into kind, kernel and source lines, from recorded
outputs in its layouts old and new; and the arguments sanitize_program passes to the program (a stand-in tool)."""

from __future__ import annotations

import stat

import pytest

from gpu_ml import profile, sanitize

pytestmark = pytest.mark.cpu_only

MEMCHECK = """========= COMPUTE-SANITIZER
buggy: 0 of 1000 elements wrong
========= Invalid __global__ read of size 4 bytes
=========     at saxpy_off_by_one(int, float, const float *, float *)+0x90 in /root/.cache/gpu_ml/cuda/ab12/cell.cu:10
=========     by thread (232,0,0) in block (3,0,0)
=========     Access to 0x7f5a3e000fa0 is out of bounds
=========     and is 1 bytes after the nearest allocation at 0x7f5a3e000000 of size 4,000 bytes
=========     Saved host backtrace up to driver entry point at kernel launch time
=========         Host Frame: main in /root/.cache/gpu_ml/cuda/ab12/cell.cu:33 [0x2b1c] in cell
=========
========= Program hit cudaErrorLaunchFailure (error 719) due to "unspecified launch failure" on CUDA API call to \
cudaMemcpy.
=========     Saved host backtrace up to driver entry point at error
=========         Host Frame: main [0x2b60] in /root/.cache/gpu_ml/cuda/ab12/cell
=========
cell.cu:36: cudaMemcpy(...) failed: cudaErrorLaunchFailure (unspecified launch failure)
========= Target application returned an error
========= ERROR SUMMARY: 2 errors
"""

WRAPPED = """========= Invalid __global__ write of size 2 bytes
=========     at void scale<(int)8>(__half *, float)+0x1d0
=========         in /tmp/build/scale.cu:42
=========     by thread (3,0,0) in block (17,0,0)
========= ERROR SUMMARY: 1 error
"""

RACE = """========= COMPUTE-SANITIZER
========= Error: Race reported between Write access at
=========     reverse_blocks_racy(const float *, float *)+0xb0 in cell.cu:14
=========     and Read access at
=========     reverse_blocks_racy(const float *, float *)+0xc0 in cell.cu:16
=========     [16128 hazards]
=========
========= Warning: Race reported between Read access at reverse_blocks_racy(const float *, float *)+0xc0 in cell.cu:16
=========     and Write access at reverse_blocks_racy(const float *, float *)+0xb0 in cell.cu:14 [96 hazards]
=========
========= RACECHECK SUMMARY: 2 hazards displayed (1 error, 1 warning)
"""

OLD = """========= CUDA-MEMCHECK
========= Barrier error detected. Divergent thread(s) in block
=========     at 0x000008f0 in /home/u/sync.cu:20:globFunction(int*)
=========     by thread (63,0,0) in block (0,0,0)
=========     Device Frame:/home/u/sync.cu:20:globFunction(int*) (globFunction(int*) : 0x8f0)
=========     Saved host backtrace up to driver entry point at kernel launch time
=========     Host Frame:/lib64/libcuda.so.1 (cuLaunchKernel + 0x2b8) [0x222dc8]
=========
========= WARN: Race reported between Read access at 0x00000170 in ./race.cu:4:test(int*, int*)
=========     and Write access at 0x00000148 in ./race.cu:3:test(int*, int*) [4 hazards]
=========
========= ERROR SUMMARY: 2 errors
"""

NO_LINE_INFO = """========= Uninitialized __global__ memory read of size 4 bytes
=========     at column_sums(const float *, float *, int, int)+0x110
=========     by thread (40,0,0) in block (0,0,0)
========= ERROR SUMMARY: 1 error
"""


def test_memcheck_records_name_kind_kernel_and_line_but_api_errors_no_line():
    found = sanitize.findings(MEMCHECK)
    assert [(f.kind, f.kernel, f.locations) for f in found] == [
        ("Invalid __global__ read of size 4 bytes", "saxpy_off_by_one", (("cell.cu", 10),)),
        ('Program hit cudaErrorLaunchFailure (error 719) due to "unspecified launch failure" on CUDA API call to '
         "cudaMemcpy", None, ())]
    assert found[0].line == 10 and found[0].lines == (10,) and found[1].line is None
    assert "by thread (232,0,0) in block (3,0,0)" in found[0].text and "Host Frame" not in found[0].text


def test_newer_and_older_layouts_and_races_are_read():
    (wrapped,) = sanitize.findings(WRAPPED)
    assert (wrapped.kind, wrapped.kernel, wrapped.locations) == (
        "Invalid __global__ write of size 2 bytes", "scale", (("scale.cu", 42),))
    error, warning = sanitize.findings(RACE)
    assert error.kind == "Race reported between Write access and Read access" and error.lines == (14, 16)
    assert warning.kind == "Race reported between Read access and Write access" and warning.lines == (16, 14)
    assert error.kernel == warning.kernel == "reverse_blocks_racy"
    barrier, race = sanitize.findings(OLD)
    assert (barrier.kind, barrier.kernel, barrier.locations) == (
        "Barrier error detected. Divergent thread(s) in block", "globFunction", (("sync.cu", 20),))
    assert (race.kind, race.kernel, race.lines) == ("Race reported between Read access and Write access", "test",
                                                    (4, 3))
    (uninitialized,) = sanitize.findings(NO_LINE_INFO)
    assert uninitialized.kernel == "column_sums" and uninitialized.line is None  # built without -lineinfo
    assert sanitize.findings("all good\n========= ERROR SUMMARY: 0 errors\n") == []


def test_kernel_names_lose_parameters_and_template_arguments():
    assert sanitize.kernel_name("saxpy(int, float, const float *, float *)") == "saxpy"
    assert sanitize.kernel_name("void reverse<(int)256>(float *)") == "reverse"
    assert sanitize.kernel_name("ns::k(int)") == "ns::k"


def test_a_report_knows_its_findings_and_the_program_gets_its_arguments(tmp_path, monkeypatch):
    monkeypatch.setattr(profile, "has_gpu", lambda: True)
    monkeypatch.setenv("PATH", f"{tmp_path}:/usr/bin:/bin")
    (tmp_path / "report.txt").write_text(MEMCHECK)
    tool = tmp_path / "compute-sanitizer"
    tool.write_text(f'#!/bin/sh\necho "$@" > {tmp_path}/args\ncat {tmp_path}/report.txt\nexit 1\n')
    tool.chmod(tool.stat().st_mode | stat.S_IEXEC)
    report = sanitize.sanitize_program(tmp_path / "cell", tool="memcheck", args=["buggy", 3])
    assert (tmp_path / "args").read_text().split() == ["--tool", "memcheck", str(tmp_path / "cell"), "buggy", "3"]
    assert report.errors == 2 and report.returncode == 1 and not report.clean
    assert [f.line for f in report.findings] == [10, None]
