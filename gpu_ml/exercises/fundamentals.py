"""Exercises of 00-prerequisites/00_gpu_fundamentals."""

from __future__ import annotations

from gpu_ml.exercises.core import Exercise

EXERCISES: list[Exercise] = []
