"""Kernels as the lessons teach them, generated from their `#| export` cells (`gpu-ml export`).

`gpu_ml.kernels.triton.<topic>` holds Triton kernels and their wrappers.
"""
