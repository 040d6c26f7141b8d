"""Exercises of triton/04-mnist-classifier and triton/05-flash-attention."""

from __future__ import annotations

from gpu_ml.exercises.core import Exercise

EXERCISES: list[Exercise] = []
