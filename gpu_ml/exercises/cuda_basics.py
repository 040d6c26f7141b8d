"""Exercises of cuda/01-basics: CUDA ones (graded like cudalings, on a GPU) and Python ones."""

from __future__ import annotations

from gpu_ml.exercises.core import CudaExercise, Exercise

EXERCISES: list[Exercise] = []
CUDA_EXERCISES: list[CudaExercise] = []
