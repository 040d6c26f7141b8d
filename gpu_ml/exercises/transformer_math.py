"""Exercises of transformer-math/01-05."""

from __future__ import annotations

from gpu_ml.exercises.core import Exercise

EXERCISES: list[Exercise] = []
