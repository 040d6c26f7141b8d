"""Exercises of triton/03-nn-components 04-05 (LayerNorm, cross-entropy)."""

from __future__ import annotations

from gpu_ml.exercises.core import Exercise

EXERCISES: list[Exercise] = []
