"""Triton kernels of the Triton track, one module per lesson topic (generated: do not edit).

Importing them on a machine without a GPU switches Triton to its interpreter first, as `setup()`
does, so that the kernels defined below run on the CPU.
"""

import os

from gpu_ml.env import has_gpu

if not has_gpu():
    os.environ["TRITON_INTERPRET"] = "1"
