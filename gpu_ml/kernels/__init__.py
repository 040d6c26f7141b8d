"""Kernels as the lessons teach them, generated from their `#| export` cells (`gpu-ml export`).

`gpu_ml.kernels.triton.<topic>` holds Triton kernels and their wrappers; import a module only after
`gpu_ml.setup()`, which on a CPU switches Triton to its interpreter before any kernel is defined.
"""
