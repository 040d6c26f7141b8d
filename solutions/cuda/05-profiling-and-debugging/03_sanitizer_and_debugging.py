"""Solutions to the exercises of cuda/05-profiling-and-debugging/03_sanitizer_and_debugging.ipynb (graded by
gpu_ml.exercises)."""

import re

import triton.language as tl

import triton

# "at KERNEL+0x90 in FILE:LINE" (compute-sanitizer), or "at 0x00000090 in FILE:LINE:KERNEL" (cuda-memcheck)
_LOCATION = re.compile(r"\+0x[0-9a-f]+\s+in\s+\S+?:(\d+)\b|\bat\s+0x[0-9a-f]+\s+in\s+\S+?:(\d+):")


# Exercise 1: split the output into records (a margin line with one space before its text starts one; indented lines
# continue it), drop each record's host backtrace (from "Saved host backtrace" on: host frames name host code), join
# what is left, which also joins a location printed over two lines, and take the first kernel location found.
def bug_line(report):
    records, in_backtrace = [], False
    for raw in report.splitlines():
        if not raw.startswith("========="):
            continue  # the program's own output
        body = raw.lstrip("=")
        if not body.strip():
            continue
        if not body[1:2].isspace():  # "========= TEXT": a new record
            records.append([body.strip()])
            in_backtrace = False
        elif records and not in_backtrace:
            in_backtrace = body.strip().startswith(("Saved host backtrace", "Host Frame"))
            if not in_backtrace:
                records[-1].append(body.strip())
    for record in records:
        match = _LOCATION.search(" ".join(record))
        if match:
            return int(match.group(1) or match.group(2))
    raise ValueError("no record of the report names a source line")


# Exercise 2: the lanes of the block past n_cols load nothing, and count 0 in the sum.
@triton.jit
def row_sums_kernel(x_ptr, out_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * n_cols + cols, mask=cols < n_cols, other=0.0)
    tl.store(out_ptr + row, tl.sum(x, axis=0))


# Exercise 3: sweep the spans in order of their start, extending the current run of overlapping spans; a span that
# starts after the run's end closes it (its length is busy time) and leaves a gap before it.
def idle_time(spans):
    ordered = sorted((start, start + duration) for start, duration in spans)
    busy = 0.0
    run_start, run_end = ordered[0]
    for start, end in ordered[1:]:
        if start > run_end:
            busy += run_end - run_start
            run_start, run_end = start, end
        else:
            run_end = max(run_end, end)
    busy += run_end - run_start
    return busy, (run_end - ordered[0][0]) - busy
