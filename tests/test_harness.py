"""The notebook harness itself: nbval runs notebooks, fails on errors, skips `gpu` cells on CPU."""

import re
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
import torch

from gpu_ml import cli
from gpu_ml.bench import SHARED_GPU_LOCK
from gpu_ml.notebook import GPU_LINE

ROOT = Path(__file__).resolve().parents[1]


def _notebook(path: Path, *cells) -> Path:
    nb = nbformat.v4.new_notebook()
    for source, tags in cells:
        nb.cells.append(nbformat.v4.new_code_cell(source, metadata={"tags": tags}))
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, path)
    return path


def _pytest(path: Path) -> subprocess.CompletedProcess:
    # Run from the project root so its conftest.py and pytest options apply, as in `uv run pytest`.
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-c", str(ROOT / "pyproject.toml"), "-p", "conftest", str(path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_failing_cell_fails_the_harness(tmp_path):
    nb = _notebook(tmp_path / "bad.ipynb", ("x = 1", []), ("assert x == 2, 'wrong on purpose'", []))
    proc = _pytest(nb)
    assert proc.returncode == 1, proc.stdout
    assert "wrong on purpose" in proc.stdout and "1 failed" in proc.stdout


@pytest.mark.skipif(torch.cuda.is_available(), reason="CPU behaviour")
def test_gpu_cells_are_skipped_on_cpu_and_interpreter_is_on(tmp_path):
    nb = _notebook(
        tmp_path / "ok.ipynb",
        ("import os\nfrom gpu_ml import setup\nsetup()\nassert os.environ['TRITON_INTERPRET'] == '1'", []),
        ("#| gpu\nimport torch\ntorch.ones(1, device='cuda')", ["gpu"]),
    )
    proc = _pytest(nb)
    assert proc.returncode == 0, proc.stdout
    assert "1 passed, 1 skipped" in proc.stdout


@pytest.mark.skipif(torch.cuda.is_available(), reason="CPU behaviour")
def test_a_gpu_cell_that_does_not_skip_itself_fails_on_cpu(tmp_path):
    """Tagged but without its `#| gpu` first line, the cell runs in the kernel, as it would in Jupyter, and fails."""
    nb = _notebook(
        tmp_path / "unmarked.ipynb",
        ("from gpu_ml import setup\nsetup()", []),
        ("import torch\ntorch.ones(1, device='cuda')", ["gpu"]),
    )
    proc = _pytest(nb)
    assert proc.returncode == 1 and "1 failed" in proc.stdout, proc.stdout


def test_execute_saves_outputs_and_provenance(tmp_path, monkeypatch):
    monkeypatch.delenv(SHARED_GPU_LOCK, raising=False)  # as when no other notebook shares the GPU
    nb = _notebook(tmp_path / "run.ipynb", ("print(6 * 7)", []))
    cli.main(["execute", str(nb)])
    done = nbformat.read(nb, as_version=4)
    assert done.cells[0].outputs[0]["text"] == "42\n"
    meta = done.metadata["gpu_ml"]
    assert {"gpu", "versions", "date"} <= set(meta) and "torch" in meta["versions"]
    assert len(done.cells) == 1 and meta["peak_gpu_memory_gib"] is None  # no CUDA used; the probe cells removed
    assert meta["gpu_alone_s"] == 0.0  # gpu_ml.bench never imported
    assert done.cells[0].execution_count == 1
    assert meta["side_by_side"] is False


def test_execute_talks_to_its_kernel_over_unix_sockets(tmp_path):
    """Not TCP ports, which two kernels started at once by gpu-ml test can both be given."""
    nb = _notebook(tmp_path / "ipc.ipynb", ("from ipykernel.connect import get_connection_info\n"
                                            "print(get_connection_info(unpack=True)['transport'])", []))
    cli.main(["execute", str(nb)])
    assert nbformat.read(nb, as_version=4).cells[0].outputs[0]["text"] == "ipc\n"


def test_nbval_kernels_talk_over_unix_sockets_too(tmp_path):
    """conftest.py gives nbval (`uv run pytest`, gpu-ml test without --save) the same kernels as `execute`."""
    nb = _notebook(tmp_path / "ipc.ipynb", ("from ipykernel.connect import get_connection_info\n"
                                            "assert get_connection_info(unpack=True)['transport'] == 'ipc'", []))
    proc = _pytest(nb)
    assert proc.returncode == 0 and "1 passed" in proc.stdout, proc.stdout


def test_kernel_manager_removes_its_socket_folder(tmp_path):
    km = cli.kernel_manager(kernel_name="python3")
    folder = Path(km.ip).parent
    assert km.transport == "ipc" and folder.is_dir() and folder.name.startswith("gpu_ml_kernel_")
    del km
    assert not folder.exists()
    assert cli.kernel_manager(transport="tcp").transport == "tcp"  # asked for: left as asked


def test_execute_records_the_time_the_notebook_had_the_gpu_alone(tmp_path):
    """Nested blocks count once; what lies outside them, not at all."""
    cell = ("import time\nfrom gpu_ml.bench import gpu_alone\nwith gpu_alone():\n    with gpu_alone():\n"
            "        time.sleep(0.4)\n    time.sleep(0.2)\ntime.sleep(0.5)")
    nb = _notebook(tmp_path / "alone.ipynb", (cell, []))
    cli.main(["execute", str(nb)])
    assert 0.6 <= nbformat.read(nb, as_version=4).metadata["gpu_ml"]["gpu_alone_s"] < 1.0


def test_execute_records_a_run_beside_other_notebooks(tmp_path, monkeypatch):
    monkeypatch.setenv(SHARED_GPU_LOCK, str(tmp_path / "gpu.lock"))  # what `gpu-ml test` sets when sharing
    nb = _notebook(tmp_path / "shared.ipynb", ("print(1)", []))
    cli.main(["execute", str(nb)])
    assert nbformat.read(nb, as_version=4).metadata["gpu_ml"]["side_by_side"] is True


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_execute_records_the_peak_gpu_memory(tmp_path):
    cell = "import torch\nx = torch.empty(2**30, device='cuda', dtype=torch.uint8)\ndel x"
    nb = _notebook(tmp_path / "big.ipynb", (cell, []))
    cli.main(["execute", str(nb)])
    assert 1.0 <= nbformat.read(nb, as_version=4).metadata["gpu_ml"]["peak_gpu_memory_gib"] < 1.1


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_the_recorded_peak_includes_what_came_before_a_reset_of_the_statistics(tmp_path):
    big = "import torch\nx = torch.empty(2**30, device='cuda', dtype=torch.uint8)\ndel x\ntorch.cuda.empty_cache()"
    reset = "torch.cuda.reset_peak_memory_stats()\ny = torch.empty(2**20, device='cuda')"
    nb = _notebook(tmp_path / "reset.ipynb", (big, []), (reset, []))
    cli.main(["execute", str(nb)])
    assert 1.0 <= nbformat.read(nb, as_version=4).metadata["gpu_ml"]["peak_gpu_memory_gib"] < 1.1


def test_execute_stops_on_a_failing_cell(tmp_path):
    import nbclient

    nb = _notebook(tmp_path / "bad.ipynb", ("raise ValueError('boom')", []))
    with pytest.raises(nbclient.exceptions.CellExecutionError, match="boom"):
        cli.main(["execute", str(nb)])
    assert "gpu_ml" not in nbformat.read(nb, as_version=4).metadata


def test_run_all_in_a_plain_kernel_skips_gpu_cells_there(tmp_path, monkeypatch):
    """"Run All" in Jupyter, without pytest: after setup(), a cell whose first line is `#| gpu` skips
    itself on a machine without a GPU and says why, and the cells after it still run."""
    monkeypatch.setenv("GPU_ML_FORCE_CPU", "1")  # the kernel inherits it: a CPU machine, also on a GPU one
    nb = _notebook(
        tmp_path / "run_all.ipynb",
        ("from gpu_ml import setup\nenv = setup(quiet=True)", []),
        ("#| gpu\nraise RuntimeError('a GPU cell ran on a CPU')", ["gpu"]),
        ("print('after')", []),
    )
    cli.main(["execute", str(nb)])  # nbclient, no skipping: raises on the first failing cell
    done = nbformat.read(nb, as_version=4)
    assert done.cells[1].outputs[0]["text"].startswith("skipped: this cell needs a CUDA GPU")
    assert done.cells[2].outputs[0]["text"] == "after\n"


def test_every_gpu_cell_says_so_in_its_first_line():
    """The tag `gpu` (read by the test harness) and the first line `#| gpu` (read by the kernel in Jupyter)
    go together, so that what pytest skips is exactly what skips itself in a learner's "Run All"."""
    wrong = []
    for path in sorted(ROOT.glob("*/**/*.ipynb")):
        if any(part.startswith(".") for part in path.relative_to(ROOT).parts):
            continue
        for i, cell in enumerate(nbformat.read(path, as_version=4).cells):
            if cell.cell_type != "code":
                continue
            tagged = "gpu" in cell.metadata.get("tags", [])
            marked = GPU_LINE.fullmatch(cell.source.split("\n", 1)[0].strip()) is not None  # or `#| gpu sm_80`
            if tagged != marked:
                wrong.append(f"{path.relative_to(ROOT)} cell {i}: tag gpu {tagged}, first line #| gpu {marked}")
    assert not wrong, "\n".join(wrong)


def test_the_gpu_memory_a_notebook_states_covers_its_recorded_peak():
    """Where a notebook's first cell says how much GPU memory it needs in GiB, that figure is at least the peak its
    latest GPU run recorded (`metadata.gpu_ml.peak_gpu_memory_gib`, written by `gpu-ml execute`)."""
    wrong = []
    for path in sorted(ROOT.glob("*/**/*.ipynb")):
        if any(part.startswith(".") for part in path.relative_to(ROOT).parts):
            continue
        nb = nbformat.read(path, as_version=4)
        peak = nb.metadata.get("gpu_ml", {}).get("peak_gpu_memory_gib")
        stated = [float(x) for x in re.findall(r"(\d+(?:\.\d+)?)\s+GiB", nb.cells[0].source.replace("\n", " "))]
        if peak is not None and stated and max(stated) + 0.05 < peak:
            wrong.append(f"{path.relative_to(ROOT)}: says up to {max(stated)} GiB, its latest run peaked at {peak}")
    assert not wrong, "\n".join(wrong)


MINIMUM = re.compile(r"\*\*Minimum:\*\* (?:no GPU|compute capability (\d)\.(\d))[^\n]*?\d+(?:\.\d+)? GiB")
CELL_ARCH = re.compile(r"^(?:#\| gpu sm_|%%cuda.*--(?:min-)?arch[ =]sm_)(\d)(\d)", re.M)


def test_every_notebook_states_its_minimum_gpu():
    """Each notebook's first cell has a `**Minimum:**` paragraph: "no GPU" (everything runs on a CPU) or the oldest
    compute capability it runs on, and the GPU memory in GiB (checked against the recorded peak by the test above).
    Every newer architecture that a cell declares (`#| gpu sm_XY`, `%%cuda --min-arch/--arch sm_XY`) is named there
    as X.Y: the cells that skip themselves below it."""
    wrong = []
    for path in sorted(ROOT.glob("*/**/*.ipynb")):
        rel = path.relative_to(ROOT)
        if any(part.startswith(".") for part in rel.parts):
            continue
        nb = nbformat.read(path, as_version=4)
        start = nb.cells[0].source.find("**Minimum:**")
        paragraph = nb.cells[0].source[start:].split("\n\n")[0].replace("\n", " ") if start >= 0 else ""
        found = MINIMUM.match(paragraph)
        if found is None:
            wrong.append(f"{rel}: no '**Minimum:** compute capability X.Y ... N GiB' (or 'no GPU ... N GiB') in cell 0")
            continue
        least = (int(found.group(1)), int(found.group(2))) if found.group(1) else (0, 0)
        declared = {(int(a), int(b)) for cell in nb.cells for a, b in CELL_ARCH.findall(cell.source)}
        for major, minor in sorted(declared):
            if (major, minor) > least and f"{major}.{minor}" not in paragraph:
                wrong.append(f"{rel}: a cell needs sm_{major}{minor}, which the Minimum paragraph does not name")
    assert not wrong, "\n".join(wrong)
