"""The notebook harness itself: nbval runs notebooks, fails on errors, skips `gpu` cells on CPU."""

import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
import torch

from gpu_ml import cli

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
        ("import os\nassert os.environ['TRITON_INTERPRET'] == '1'", []),
        ("import torch\ntorch.ones(1, device='cuda')", ["gpu"]),
    )
    proc = _pytest(nb)
    assert proc.returncode == 0, proc.stdout
    assert "1 passed, 1 skipped" in proc.stdout


def test_execute_saves_outputs_and_provenance(tmp_path):
    nb = _notebook(tmp_path / "run.ipynb", ("print(6 * 7)", []))
    cli.main(["execute", str(nb)])
    done = nbformat.read(nb, as_version=4)
    assert done.cells[0].outputs[0]["text"] == "42\n"
    meta = done.metadata["gpu_ml"]
    assert {"gpu", "versions", "date"} <= set(meta) and "torch" in meta["versions"]


def test_execute_stops_on_a_failing_cell(tmp_path):
    import nbclient

    nb = _notebook(tmp_path / "bad.ipynb", ("raise ValueError('boom')", []))
    with pytest.raises(nbclient.exceptions.CellExecutionError, match="boom"):
        cli.main(["execute", str(nb)])
    assert "gpu_ml" not in nbformat.read(nb, as_version=4).metadata
