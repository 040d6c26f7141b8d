"""`gpu_ml.memviz`: a launch traced in Triton's interpreter, every load and store counted per element."""

import matplotlib
import pytest
import torch
import triton.language as tl
from triton.runtime.interpreter import InterpretedFunction
from triton.runtime.jit import JITFunction

import triton
from gpu_ml import memviz

matplotlib.use("Agg")


def add_one(x_ptr, z_ptr, N, B: tl.constexpr, MASKED: tl.constexpr):
    offs = tl.program_id(0) * B + tl.arange(0, B)
    mask = offs < N if MASKED else offs < 2**30
    tl.store(z_ptr + offs, tl.load(x_ptr + offs, mask=mask) + 1, mask=mask)


def column_sum(x_ptr, out_ptr, R, C, B: tl.constexpr):
    """Every program adds its rows into out: out's elements are written by several programs (a race)."""
    cols = tl.arange(0, B)
    row = tl.program_id(0)
    v = tl.load(x_ptr + row * C + cols, mask=cols < C)
    tl.store(out_ptr + cols, v + tl.load(out_ptr + cols, mask=cols < C), mask=cols < C)


def _twice(v):
    return v * 2


TWICE = JITFunction(_twice)  # a device function compiled for the GPU, as tl.sum is outside interpreter mode


def add_twice(x_ptr, z_ptr, N, B: tl.constexpr):
    offs = tl.program_id(0) * B + tl.arange(0, B)
    tl.store(z_ptr + offs, TWICE(tl.load(x_ptr + offs, mask=offs < N)), mask=offs < N)


@pytest.fixture(params=["interpreted", "jit"])
def wrap(request):
    """Both ways a kernel reaches trace(): already interpreted (CPU mode) or compiled-for-GPU (traced anyway)."""
    return InterpretedFunction if request.param == "interpreted" else JITFunction


def test_masked_launch_reads_and_writes_each_element_once(wrap):
    x, z = torch.arange(10.0), torch.zeros(10)
    t = memviz.trace(wrap(add_one), (3,), x, z, 10, 4, True)
    assert (t.tensors["x_ptr"].reads == 1).all() and (t.tensors["x_ptr"].writes == 0).all()
    assert (t.tensors["z_ptr"].writes == 1).all() and not t.out_of_bounds
    assert t.tensors["z_ptr"].written_by.tolist() == [0, 0, 0, 0, 1, 1, 1, 1, 2, 2]
    assert (z == 0).all(), "the caller's tensors are not modified"
    assert "no out-of-bounds access" in t.summary()


def test_out_of_bounds_accesses_are_reported_and_suppressed(wrap):
    t = memviz.trace(wrap(add_one), (3,), torch.arange(10.0), torch.zeros(10), 10, 4, False)
    assert len(t.out_of_bounds) == 2  # program 2 reads x[10:12] and writes z[10:12]
    assert "program (2, 0, 0) reads 2 address(es)" in t.out_of_bounds[0]
    assert "offset 10 of x_ptr, which has 10 elements" in t.out_of_bounds[0]
    assert "2 out-of-bounds accesses (suppressed)" in t.summary()
    assert (t.tensors["z_ptr"].writes == 1).all()


def test_a_jit_device_function_inside_is_interpreted_too(wrap):
    """A kernel compiled for the GPU calls other @triton.jit functions (tl.sum, tl.max); tracing runs them too."""
    z = torch.zeros(10)
    t = memviz.trace(wrap(add_twice), (3,), torch.arange(10.0), z, 10, 4)
    assert not t.out_of_bounds and (t.tensors["z_ptr"].writes == 1).all()
    with pytest.raises(RuntimeError, match="outside of the scope of a kernel"):
        TWICE(1.0)  # the patch is gone after the trace


def row_total(x_ptr, z_ptr, N, B: tl.constexpr):
    """A loop over a scalar argument: `range` takes the index of N."""
    acc = tl.zeros((B,), dtype=tl.float32)
    for start in range(0, N, B):
        offs = start + tl.arange(0, B)
        acc += tl.load(x_ptr + offs, mask=offs < N, other=0.0)
    tl.store(z_ptr, tl.sum(acc, axis=0))


def test_a_loop_over_a_scalar_argument_runs_with_triton_36s_interpreter(wrap, monkeypatch):
    """Triton 3.6 takes int() of the argument's 1-element array, which recent NumPy refuses; trace() copes."""
    from triton.runtime import interpreter

    patch_tensor = interpreter._patch_lang_tensor

    def as_in_triton_36(tensor, scope):
        patch_tensor(tensor, scope)
        scope.set_attr(tensor, "__index__", lambda self: int(self.handle.data))

    monkeypatch.setattr(interpreter, "_patch_lang_tensor", as_in_triton_36)
    t = memviz.trace(wrap(row_total), (1,), torch.arange(10.0), torch.zeros(1), 10, 4)
    assert (t.tensors["x_ptr"].reads == 1).all() and t.tensors["z_ptr"].writes.tolist() == [1]


def test_a_trace_undoes_every_patch_of_triton_language(wrap, monkeypatch):
    """Triton's interpreter patches triton.language for each device-function call and never undoes it; after a
    trace on a GPU, kernels compiled in the same process would be built with those patches (on the H200,
    `gpu-ml exercises` then graded solved puzzles as unsolved). Every patch a trace makes is undone."""
    from triton.runtime import interpreter

    scopes, patch = [], interpreter._patch_lang

    def recorded(fn):
        scopes.append(patch(fn))
        return scopes[-1]

    monkeypatch.setattr(interpreter, "_patch_lang", recorded)
    memviz.trace(wrap(add_twice), (3,), torch.arange(10.0), torch.zeros(10), 10, 4)  # calls TWICE, a jit function
    assert len(scopes) >= 2 and not any(scope._changes for scope in scopes)


def test_elements_written_by_several_programs_are_counted():
    t = memviz.trace(triton.jit(column_sum), (3,), torch.ones(3, 5), torch.zeros(5), 3, 5, 8)
    out = t.tensors["out_ptr"]
    assert out.writes.tolist() == [3] * 5 and out.reads.tolist() == [3] * 5
    assert "5 written more than once" in t.summary()
    assert t.tensors["x_ptr"].grid(t.tensors["x_ptr"].read_by).tolist() == [[0] * 5, [1] * 5, [2] * 5]


def copy_rows(x_ptr, z_ptr, C, stride, B: tl.constexpr):
    cols = tl.arange(0, B)
    row = tl.program_id(0)
    tl.store(z_ptr + row * C + cols, tl.load(x_ptr + row * stride + cols, mask=cols < C), mask=cols < C)


def test_a_row_slice_is_drawn_with_its_pitch():
    """x is 3 rows of 4 inside a 3 x 10 matrix: the picture shows the 6 columns between its rows, unread."""
    wide = torch.arange(30.0).view(3, 10)
    x, z = wide[:, :4], torch.zeros(3, 4)
    t = memviz.trace(InterpretedFunction(copy_rows), (3,), x, z, 4, 10, 4)
    reads = t.tensors["x_ptr"].grid(t.tensors["x_ptr"].reads)
    assert reads.shape == (3, 10) and (reads[:, :4] == 1).all() and (reads[:, 4:] == 0).all()
    assert not t.out_of_bounds and (t.tensors["z_ptr"].writes == 1).all()


def test_draw_makes_one_row_per_tensor():
    t = memviz.trace(InterpretedFunction(add_one), (3,), torch.arange(10.0), torch.zeros(10), 10, 4, False)
    fig = memviz.draw(t)
    assert len(fig.axes) == 4 and "out-of-bounds" in fig._suptitle.get_text()


def test_refusals():
    kernel = InterpretedFunction(add_one)
    with pytest.raises(ValueError, match="grid must be a tuple"):
        memviz.trace(kernel, 3, torch.zeros(4), torch.zeros(4), 4, 4, True)
    with pytest.raises(TypeError, match="needs a @triton.jit kernel"):
        memviz.trace(add_one, (1,), torch.zeros(4), torch.zeros(4), 4, 4, True)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_a_traced_kernel_still_compiles_for_the_gpu():
    """Tracing patches triton.language while the interpreter runs; a native launch afterwards must still work."""
    kernel = JITFunction(add_one)
    memviz.trace(kernel, (3,), torch.arange(10.0), torch.zeros(10), 10, 4, True)
    x = torch.arange(10.0, device="cuda")
    z = torch.zeros_like(x)
    kernel[(3,)](x, z, 10, 4, True)
    assert torch.equal(z, x + 1)
