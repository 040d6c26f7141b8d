"""gpu_ml: the small toolkit the notebooks share (setup, checks, benchmarks, %%cuda, data, specs)."""

from gpu_ml.bench import bench, bench_each, bench_pair, gbps, geomean, sweep, tflops
from gpu_ml.check import check, expect_raises
from gpu_ml.env import Env, has_gpu
from gpu_ml.notebook import fits, half_precision, halve_to_fit, keep_fitting, pick, setup

__all__ = ["Env", "bench", "bench_each", "bench_pair", "check", "expect_raises", "fits", "gbps", "geomean",
           "half_precision", "halve_to_fit", "has_gpu", "keep_fitting", "pick", "setup", "sweep", "tflops"]
