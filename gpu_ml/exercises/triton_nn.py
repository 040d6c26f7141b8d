"""Exercises of triton/03-nn-components 01-03 (activations, softmax, linear layer)."""

from __future__ import annotations

from gpu_ml.exercises.core import Exercise

EXERCISES: list[Exercise] = []
