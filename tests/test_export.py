"""`gpu-ml export`: gpu_ml/kernels is generated from the lessons' `#| export` cells and kept in sync."""

import os
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from gpu_ml import cli, export


def _lesson(root: Path, rel: str, *sources: str) -> Path:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell("# a lesson")] + [nbformat.v4.new_code_cell(s) for s in sources]
    nbformat.write(nb, path)
    return path


def test_generated_kernels_are_in_sync_with_the_notebooks():
    problems = export.out_of_date()
    assert not problems, "run `uv run gpu-ml export`:\n" + "\n".join(problems)


def test_export_copies_marked_cells_in_order_and_names_the_source(tmp_path):
    _lesson(tmp_path, "triton/01-x/01_a.ipynb", "#| export triton/a.py\nimport math\n", "y = 2  # not exported",
            "#| export triton/a.py\ndef f():\n    return math.pi\n",
            "%%cuda\n//| export cuda/a.cuh\n__device__ int one() { return 1; }\n")
    written = export.export(tmp_path)
    py, cu = tmp_path / "gpu_ml/kernels/triton/a.py", tmp_path / "gpu_ml/kernels/cuda/a.cuh"
    assert written == sorted([cu, py])
    text = py.read_text()
    assert "from triton/01-x/01_a.ipynb\n# (cells 1, 3)." in text and "Do not edit" in text
    assert "import math\n\n\ndef f():" in text and "y = 2" not in text and "#| export" not in text
    namespace: dict = {}
    exec(compile(text, str(py), "exec"), namespace)
    assert namespace["f"]() == pytest.approx(3.14159, abs=1e-5)
    assert cu.read_text().startswith("// GENERATED") and "%%cuda" not in cu.read_text()
    assert export.out_of_date(tmp_path) == []


def test_a_distributed_module_is_exported_beside_the_triton_ones(tmp_path):
    _lesson(tmp_path, "cuda/08-x/01_a.ipynb", "#| export distributed/ring.py\ndef ring():\n    return 2\n")
    assert export.export(tmp_path) == [tmp_path / "gpu_ml/kernels/distributed/ring.py"]
    assert export.out_of_date(tmp_path) == []


def test_out_of_date_reports_edits_missing_and_stale_files(tmp_path):
    lesson = _lesson(tmp_path, "triton/01-x/01_a.ipynb", "#| export triton/a.py\nx = 1\n")
    export.export(tmp_path)
    generated = tmp_path / "gpu_ml/kernels/triton/a.py"
    generated.write_text(generated.read_text() + "# hand edit\n")
    assert export.out_of_date(tmp_path) == ["differs: gpu_ml/kernels/triton/a.py"]
    lesson.unlink()
    _lesson(tmp_path, "triton/01-x/01_b.ipynb", "#| export triton/b.py\nx = 1\n")
    assert sorted(export.out_of_date(tmp_path)) == ["missing: gpu_ml/kernels/triton/b.py",
                                                    "stale: gpu_ml/kernels/triton/a.py"]
    export.export(tmp_path)
    assert not generated.exists() and export.out_of_date(tmp_path) == []


@pytest.mark.parametrize(
    ("source", "message"),
    [
        ("#| export triton/../evil.py\nx = 1", "is not triton/NAME.py"),
        ("#| export cuda/a.py\nx = 1", "is not triton/NAME.py"),
        ("%%cuda\n//| export distributed/a.cuh\nint x;", "is not triton/NAME.py"),
        ("//| export triton/a.py\nx = 1", "write `#| export` for .py"),
        ("%%time\n#| export triton/a.py\nx = 1", "only %%cuda cells"),
    ],
)
def test_bad_directives_are_refused(tmp_path, source, message):
    _lesson(tmp_path, "triton/01-x/01_a.ipynb", source)
    with pytest.raises(export.ExportError, match=message.replace("(", r"\(")):
        export.render(tmp_path)


def test_one_file_comes_from_one_notebook(tmp_path):
    _lesson(tmp_path, "triton/01-x/01_a.ipynb", "#| export triton/a.py\nx = 1\n")
    _lesson(tmp_path, "triton/01-x/02_b.ipynb", "#| export triton/a.py\nx = 2\n")
    with pytest.raises(export.ExportError, match="one file, one notebook"):
        export.render(tmp_path)


def test_cli_check_exits_1_when_out_of_sync(monkeypatch, capsys):
    monkeypatch.setattr(export, "out_of_date", lambda: ["differs: gpu_ml/kernels/triton/a.py"])
    assert cli.main(["export", "--check"]) == 1
    assert "differs" in capsys.readouterr().out
    monkeypatch.setattr(export, "out_of_date", lambda: [])
    assert cli.main(["export", "--check"]) == 0


def test_importing_kernels_without_a_gpu_selects_the_interpreter():
    code = ("import gpu_ml.kernels.triton.activations as a, os; "
            "print(os.environ['TRITON_INTERPRET'], type(a.act_fwd_kernel).__name__)")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"} | {"GPU_ML_FORCE_CPU": "1"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
    assert out.split() == ["1", "InterpretedFunction"]
