import os
import sys
import types

import numpy as np
import pytest
import torch
import triton.language as tl

import gpu_ml
import triton
from gpu_ml import check, expect_raises, pick
from gpu_ml.env import Env


def test_pick_and_setup_follow_the_machine():
    env = gpu_ml.setup(quiet=True)
    assert env.gpu == torch.cuda.is_available()
    assert pick(gpu="big", cpu="small") == ("big" if env.gpu else "small")
    assert "torch" in env.versions and env.summary()


@pytest.mark.skipif(torch.cuda.is_available(), reason="CPU behaviour")
def test_setup_on_cpu_switches_triton_to_the_interpreter(monkeypatch):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    env = gpu_ml.setup(quiet=True)
    assert env.mode == "cpu" and env.arch is None
    assert os.environ["TRITON_INTERPRET"] == "1"


def test_setup_on_colab_installs_only_what_colab_lacks_and_elsewhere_nothing(monkeypatch, capsys):
    from gpu_ml import notebook

    calls = []
    monkeypatch.setattr(notebook.subprocess, "run", lambda cmd, check: calls.append(cmd))
    real_find_spec = notebook.importlib.util.find_spec
    monkeypatch.setattr(notebook.importlib.util, "find_spec",
                        lambda name: None if name in ("tqdm", "ipywidgets") else real_find_spec(name))
    gpu_ml.setup(quiet=True)  # not Colab: nothing installed
    assert calls == []
    monkeypatch.setitem(sys.modules, "google.colab", types.ModuleType("google.colab"))  # a faked Colab
    gpu_ml.setup(quiet=True)
    assert calls == [[sys.executable, "-m", "pip", "install", "-q", "tqdm", "ipywidgets"]]
    assert "Colab: installing tqdm, ipywidgets" in capsys.readouterr().out


@pytest.mark.skipif(torch.cuda.is_available(), reason="CPU behaviour")
def test_setup_after_a_compiled_kernel_is_refused(monkeypatch):
    from triton.runtime.jit import JITFunction

    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    main = types.ModuleType("__main__")
    main.my_kernel = object.__new__(JITFunction)
    monkeypatch.setitem(sys.modules, "__main__", main)
    with pytest.raises(RuntimeError, match="my_kernel"):
        gpu_ml.setup(quiet=True)


@triton.jit
def _sum_in_steps(x_ptr, z_ptr, N, B: tl.constexpr):
    acc = tl.zeros((B,), dtype=tl.float32)
    for start in range(0, N, B):  # a loop over a scalar argument
        offs = start + tl.arange(0, B)
        acc += tl.load(x_ptr + offs, mask=offs < N, other=0.0)
    tl.store(z_ptr, tl.sum(acc, axis=0))


@pytest.mark.skipif(tuple(int(p) for p in triton.__version__.split(".")[:2]) < (3, 9),
                    reason="simulates Triton 3.6 on 3.9+; on 3.6 itself test_arch_matrix runs the real thing")
def test_patch_interpreter_lets_a_loop_over_a_scalar_argument_run_as_in_triton_39(monkeypatch):
    """Triton 3.6's interpreter takes int() of the argument's 1-element array, which NumPy 2.4 refuses."""
    from triton.runtime import interpreter

    unpatched = getattr(interpreter._patch_lang, "__wrapped__", interpreter._patch_lang)
    monkeypatch.setattr(interpreter, "_patch_lang", unpatched)  # restored after the test
    patch_tensor = interpreter._patch_lang_tensor

    def as_in_triton_36(tensor, scope):
        patch_tensor(tensor, scope)
        scope.set_attr(tensor, "__index__", lambda self: int(self.handle.data))

    monkeypatch.setattr(interpreter, "_patch_lang_tensor", as_in_triton_36)
    kernel, x, z = interpreter.InterpretedFunction(_sum_in_steps.fn), torch.arange(10.0), torch.zeros(1)
    if np.lib.NumpyVersion(np.__version__) >= "2.4.0":
        with pytest.raises(interpreter.InterpreterError, match="0-dimensional"):
            kernel[(1,)](x, z, 10, 4)
    gpu_ml.notebook.patch_interpreter()
    gpu_ml.notebook.patch_interpreter()  # a second call changes nothing
    assert interpreter._patch_lang.__wrapped__ is unpatched
    kernel[(1,)](x, z, 10, 4)
    assert z.item() == 45.0


@triton.jit
def _sum_int32(x_ptr, z_ptr, B: tl.constexpr):
    tl.store(z_ptr, tl.sum(tl.load(x_ptr + tl.arange(0, B)), axis=0))


@pytest.mark.skipif(tuple(int(p) for p in triton.__version__.split(".")[:2]) < (3, 9),
                    reason="simulates Triton 3.6 on 3.9+; on 3.6 itself test_arch_matrix runs the real thing")
def test_patch_interpreter_wraps_an_overflowing_integer_sum_as_compiled_kernels_do(monkeypatch):
    """Triton 3.6's interpreter gives a scalar reduction its dtype with np.array(..., dtype), which NumPy 2 refuses
    for an int32 sum that overflows; compiled kernels (and 3.9's interpreter) wrap."""
    from triton.runtime import interpreter

    reductions = interpreter.ReduceScanOpInterface
    fixed = getattr(reductions.to_tensor, "__wrapped__", reductions.to_tensor)

    def as_in_triton_36(self, ret, dtype):
        np_dtype = interpreter._get_np_dtype(dtype)
        if hasattr(ret, "shape") and ret.shape:
            return fixed(self, ret, dtype)
        return tl.core.tensor(interpreter.TensorHandle(np.array([ret], dtype=np_dtype), dtype.scalar), dtype)

    monkeypatch.setattr(reductions, "to_tensor", as_in_triton_36)  # restored after the test
    kernel = interpreter.InterpretedFunction(_sum_int32.fn)
    x, z = torch.full((4,), 2**30, dtype=torch.int32), torch.zeros(1, dtype=torch.int32)
    if np.lib.NumpyVersion(np.__version__) >= "2.0.0":
        with pytest.raises(interpreter.InterpreterError, match="out of bounds for int32"):
            kernel[(1,)](x, z, 4)
    gpu_ml.notebook.patch_interpreter()
    gpu_ml.notebook.patch_interpreter()  # a second call changes nothing
    assert reductions.to_tensor.__wrapped__ is as_in_triton_36
    kernel[(1,)](x, z, 4)
    assert z.item() == 0  # 4 * 2**30 wraps to 0 in int32


def test_env_arch():
    assert Env("gpu", "NVIDIA H200", (9, 0), 132).arch == "sm_90a"
    assert Env("gpu", "NVIDIA A100", (8, 0), 108).arch == "sm_80"


def test_check_passes_and_prints(capsys):
    check(torch.tensor([1.0, 2.0]), torch.tensor([1.0, 2.000001]), name="y")
    assert "y: close" in capsys.readouterr().out
    check(torch.tensor([float("nan"), float("inf")]), torch.tensor([float("nan"), float("inf")]))


def test_check_uses_dtype_tolerance():
    check(torch.tensor([1.0], dtype=torch.float16), torch.tensor([1.001], dtype=torch.float16), quiet=True)
    with pytest.raises(AssertionError):
        check(torch.tensor([1.0]), torch.tensor([1.001]), quiet=True)


def test_check_mismatch_names_the_worst_element():
    expected = torch.zeros(3, 4)
    actual = expected.clone()
    actual[2, 1] = 5.0
    with pytest.raises(AssertionError, match=r"1 of 12 elements differ.*worst at \(2, 1\): got 5"):
        check(actual, expected, quiet=True)


def test_check_refuses_shape_mismatch_nan_and_non_tensors():
    with pytest.raises(AssertionError, match="shape"):
        check(torch.zeros(3), torch.zeros(4))
    with pytest.raises(AssertionError):
        check(torch.tensor([float("nan")]), torch.tensor([0.0]), quiet=True)
    with pytest.raises(TypeError):
        check([1.0], torch.zeros(1))


@pytest.mark.parametrize("got", [1e30, float("-inf"), float("nan")])
def test_check_an_infinite_expected_value_needs_the_same_infinity(got):
    with pytest.raises(AssertionError, match="1 of 2 elements differ"):
        check(torch.tensor([got, 1.0]), torch.tensor([float("inf"), 1.0]), quiet=True)


def test_expect_raises():
    assert expect_raises(lambda: int("x"), ValueError, "invalid literal") is None  # nothing for a cell to echo
    with pytest.raises(AssertionError, match="nothing was raised"):
        expect_raises(lambda: 1, ValueError, "x")
    with pytest.raises(AssertionError, match="lacks"):
        expect_raises(lambda: int("x"), ValueError, "other words")
    with pytest.raises(KeyError):
        expect_raises(lambda: {}["k"], ValueError, "k")  # another error type propagates


def test_force_cpu(monkeypatch):
    monkeypatch.setenv("GPU_ML_FORCE_CPU", "1")
    assert not gpu_ml.has_gpu()
    assert pick(gpu="big", cpu="small") == "small"


def test_gpu_cells_skip_themselves_without_a_gpu(monkeypatch):
    from gpu_ml.notebook import SKIPPED, gpu_cell

    cell = ["#| gpu\n", "torch.ones(1, device='cuda')\n"]
    monkeypatch.setenv("GPU_ML_FORCE_CPU", "1")
    assert gpu_cell(cell) == [f"print({SKIPPED!r})\n"]
    assert gpu_cell(["x = 1\n"]) == ["x = 1\n"] and gpu_cell([]) == []
    assert gpu_cell(["# | gpu\n", "x\n"]) == ["# | gpu\n", "x\n"]  # only the exact marker
    assert gpu_cell(["#| gpu sm_80\n", "x\n"]) == [f"print({SKIPPED!r})\n"]
    monkeypatch.setattr("gpu_ml.notebook.has_gpu", lambda: True)
    assert gpu_cell(cell) == cell  # with a GPU the marker is a comment and the cell runs as written
    ampere = ["#| gpu sm_80\n", "x\n"]
    monkeypatch.setattr("gpu_ml.notebook.capability", lambda: (7, 5))  # a T4: skipped, saying why
    assert "needs a GPU of compute capability 8.0 or newer" in gpu_cell(ampere)[0] and "7.5" in gpu_cell(ampere)[0]
    monkeypatch.setattr("gpu_ml.notebook.capability", lambda: (9, 0))
    assert gpu_cell(ampere) == ampere


def test_emulated_profiles_report_their_capability(monkeypatch):
    from gpu_ml import cuda, env

    monkeypatch.setenv("GPU_ML_EMULATE", "t4")
    monkeypatch.setattr(env, "has_gpu", lambda: True)
    assert env.emulated() == ("Tesla T4", (7, 5), 15.0) and env.capability() == (7, 5)
    assert cuda.default_arch() == "sm_75"  # built for the T4; the driver JIT-compiles its PTX on a newer GPU
    monkeypatch.setenv("GPU_ML_EMULATE", "a100")
    assert env.capability() == (8, 0) and cuda.default_arch() == "sm_80"
    monkeypatch.setenv("GPU_ML_EMULATE", "v100")
    with pytest.raises(ValueError, match="the profiles are t4, a100"):
        env.capability()
    monkeypatch.setattr(env, "has_gpu", lambda: False)
    assert env.capability() is None  # no GPU: nothing to emulate on


def test_detect_under_emulation_builds_extensions_for_the_profile(monkeypatch):
    """A PyTorch extension (CUDA 3.4) is built for the emulated GPU, with PTX for the real one's driver to compile,
    even where the machine named its own GPU in TORCH_CUDA_ARCH_LIST."""
    from gpu_ml import env

    monkeypatch.setattr(env, "has_gpu", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda i: types.SimpleNamespace(
        name="NVIDIA H200", total_memory=141 * 2**30, multi_processor_count=132))
    monkeypatch.setattr(torch.cuda, "set_per_process_memory_fraction", lambda fraction: None)
    monkeypatch.setenv("TORCH_CUDA_ARCH_LIST", "9.0a")
    monkeypatch.setenv("GPU_ML_EMULATE", "t4")
    assert env.detect().device == "Tesla T4 (emulated)" and os.environ["TORCH_CUDA_ARCH_LIST"] == "7.5+PTX"
    monkeypatch.setenv("GPU_ML_EMULATE", "a100")
    env.detect()
    assert os.environ["TORCH_CUDA_ARCH_LIST"] == "8.0+PTX"


def test_env_bf16_needs_ampere():
    assert Env("gpu", "NVIDIA H200", (9, 0)).bf16 and Env("gpu", "NVIDIA A100", (8, 0)).bf16
    assert not Env("gpu", "Tesla T4", (7, 5)).bf16 and not Env("cpu", "CPU").bf16


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_detect_under_emulation_caps_memory(monkeypatch):
    from gpu_ml import env

    monkeypatch.setenv("GPU_ML_EMULATE", "t4")
    try:
        found = env.detect()
        assert found.device == "Tesla T4 (emulated)" and found.capability == (7, 5) and not found.bf16
        total = torch.cuda.get_device_properties(0).total_memory
        with pytest.raises(torch.OutOfMemoryError):
            torch.empty(int(min(total, 16 * 2**30)), dtype=torch.uint8, device="cuda")  # over the T4's 15 GB
    finally:
        torch.cuda.set_per_process_memory_fraction(1.0)


def test_check_relative_error_ignores_expected_values_near_zero(capsys):
    expected = torch.tensor([1e-30, 2.0, 0.0], dtype=torch.float64)
    check(expected + torch.tensor([1e-7, 2e-6, 3e-7], dtype=torch.float64), expected, atol=1e-5, rtol=1e-5,
          name="near zero")
    out = capsys.readouterr().out
    assert "max abs err 2e-06, max rel err 1e-06" in out  # 2e-6 / 2.0; not 1e-7 / 1e-30 = 1e+23


def test_fits_compares_with_the_memory_this_process_may_still_allocate(monkeypatch):
    from gpu_ml import env, notebook

    monkeypatch.delenv("GPU_ML_EMULATE", raising=False)  # set below: the memory it fakes, then the profile's
    monkeypatch.setattr(notebook, "free_memory", lambda: 10 * 2**30)
    assert notebook.fits(9 * 2**30) and not notebook.fits(9.5 * 2**30) and notebook.fits(9.5 * 2**30, share=1.0)
    monkeypatch.setattr(notebook, "free_memory", lambda: None)  # no GPU: nothing fits
    assert not notebook.fits(1)
    monkeypatch.setattr(env, "has_gpu", lambda: True)
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda: (100 * 2**30, 141 * 2**30))
    monkeypatch.setattr(torch.cuda, "memory_reserved", lambda: 6 * 2**30)
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda: 2 * 2**30)
    assert env.free_memory() == 104 * 2**30  # free, plus what torch's cache holds unused
    monkeypatch.setenv("GPU_ML_EMULATE", "t4")
    assert env.free_memory() == 13 * 2**30  # the profile's 15 GB less what torch has allocated


def test_halve_to_fit_keeps_what_fits_and_halves_the_rest(monkeypatch, capsys):
    from gpu_ml import notebook

    monkeypatch.setattr(notebook, "has_gpu", lambda: True)
    monkeypatch.setattr(notebook, "free_memory", lambda: 10 * 2**30)
    assert notebook.halve_to_fit(2**28, 16, what="elements") == 2**28 and capsys.readouterr().out == ""
    assert notebook.halve_to_fit(2**28, 64, what="elements") == 2**27  # 16 GiB does not fit in 0.9 x 10, 8 GiB does
    assert "elements: 134217728 instead of 268435456, to fit in the 10.0 GiB" in capsys.readouterr().out
    assert notebook.halve_to_fit(8, 2**40, what="rows", at_least=4) == 4  # never below at_least
    monkeypatch.setattr(notebook, "has_gpu", lambda: False)
    assert notebook.halve_to_fit(2**28, 2**40, what="elements") == 2**28  # CPU runs pick their own sizes


def test_keep_fitting_leaves_out_what_does_not_fit(monkeypatch, capsys):
    from gpu_ml import notebook

    monkeypatch.setattr(notebook, "has_gpu", lambda: True)
    monkeypatch.setattr(notebook, "free_memory", lambda: 10 * 2**30)
    assert notebook.keep_fitting([2**20, 2**28, 3 * 2**28], 64) == [2**20]  # 16 and 48 GiB do not fit in 9
    assert "left out, more than the free GPU memory holds: 2^28, 805306368" in capsys.readouterr().out
    assert notebook.keep_fitting([2**20], 24) == [2**20] and capsys.readouterr().out == ""
    monkeypatch.setattr(notebook, "has_gpu", lambda: False)
    assert notebook.keep_fitting([2**40], 24) == [2**40]


def test_half_precision_is_bf16_from_8_0_and_fp16_below(capsys):
    from gpu_ml import Env, half_precision

    assert half_precision(Env(mode="gpu", device="H200", capability=(9, 0))) == ("bf16", torch.bfloat16)
    assert capsys.readouterr().out == ""
    assert half_precision(Env(mode="gpu", device="T4", capability=(7, 5))) == ("fp16", torch.float16)
    assert "bf16 needs compute capability 8.0+ (this GPU has 7.5): fp16 here" in capsys.readouterr().out
    assert half_precision(Env(mode="cpu", device="CPU")) == ("fp16", torch.float16)  # the interpreter has no bf16
