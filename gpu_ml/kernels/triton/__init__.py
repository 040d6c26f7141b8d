"""Triton kernels of the Triton track, one module per lesson topic (generated: do not edit)."""
