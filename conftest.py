"""Test harness: every notebook runs through nbval; without a GPU, cells tagged `gpu` skip themselves
in the kernel (their first line is `#| gpu`) and are reported as skipped, and Triton kernels run in
its interpreter."""

from __future__ import annotations

import os

import pytest

from gpu_ml.env import has_gpu
from gpu_ml.notebook import patch_interpreter

HAS_GPU = has_gpu()
if not HAS_GPU:
    # The notebook kernels inherit this, so kernels defined before setup() still interpret.
    os.environ["TRITON_INTERPRET"] = "1"
    patch_interpreter()  # as setup() does


@pytest.fixture(autouse=True)
def _seeded() -> None:
    """Every test starts from the same random state, whatever ran before it: a draw that fails, fails
    every time (an unseeded suite once failed on a 1-in-200 LayerNorm input and then passed again)."""
    import torch

    torch.manual_seed(0)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "gpu: needs a CUDA GPU (skipped without one)")
    config.addinivalue_line("markers", "cpu_only: a test file that never touches a GPU (gpu-ml test runs it beside "
                            "the notebooks)")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if HAS_GPU:
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        cell = getattr(item, "cell", None)  # nbval's notebook-cell items carry the cell
        if cell is not None and "gpu" in cell.metadata.get("tags", []):
            _run_then_skip(item)
        elif item.get_closest_marker("gpu"):
            item.add_marker(skip)


def _run_then_skip(item: pytest.Item) -> None:
    """A `gpu` cell is still sent to the kernel, as "Run All" in Jupyter would send it: its first line,
    `#| gpu`, makes it skip itself there (gpu_ml.notebook.gpu_cell), which an error would disprove;
    then it is reported as skipped."""
    run = item.runtest

    def runtest() -> None:
        run()
        pytest.skip("needs a CUDA GPU (sent to the kernel as in Jupyter's Run All: it skipped itself)")

    item.runtest = runtest
