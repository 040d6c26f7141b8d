"""Exercises of cuda/03-nn-components 03-04 and cuda/04-mnist-classifier (CUDA ones graded like cudalings)."""

from __future__ import annotations

from gpu_ml.exercises.core import CudaExercise, Exercise

EXERCISES: list[Exercise] = []
CUDA_EXERCISES: list[CudaExercise] = []
