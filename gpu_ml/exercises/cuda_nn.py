"""Exercises of cuda/03-nn-components 01-02 (CUDA ones graded like cudalings, on a GPU)."""

from __future__ import annotations

from gpu_ml.exercises.core import CudaExercise, Exercise

EXERCISES: list[Exercise] = []
CUDA_EXERCISES: list[CudaExercise] = []
