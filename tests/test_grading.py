"""`gpu_ml.grading.grade`: PASS on a right answer; on a wrong, unfinished or crashing one a verdict that
names the case and the first wrong element, printed and returned, never raised."""

import pytest
import torch

from gpu_ml.check import check
from gpu_ml.grading import grade

CASES = {"3 x 5": (torch.arange(15.0).view(3, 5),), "one element": (torch.tensor([[2.0]]),)}


def test_a_right_answer_passes(capsys):
    verdict = grade("double", lambda x: x + x, lambda x: 2 * x, CASES)
    assert verdict and verdict.passed and "double: PASS (2 cases)" in capsys.readouterr().out


def test_a_wrong_answer_names_the_case_and_the_element(capsys):
    def wrong(x):
        y = 2 * x
        y[-1, -1] += 1  # one wrong element, in the first case
        return y

    verdict = grade("double", wrong, lambda x: 2 * x, CASES)
    assert not verdict
    assert "not solved yet: case '3 x 5'" in verdict.message and "(2, 4)" in verdict.message
    assert "got 29, expected 28" in verdict.message and verdict.message in capsys.readouterr().out


def test_the_stub_a_crash_and_a_wrong_shape_are_reported_not_raised():
    def stub(x):
        raise NotImplementedError

    assert "the stub raises NotImplementedError" in grade("double", stub, lambda x: 2 * x, CASES).message
    crashed = grade("double", lambda x: x @ x, lambda x: 2 * x, CASES, quiet=True)
    assert not crashed and "on case '3 x 5' the attempt raised RuntimeError" in crashed.message
    shape = grade("double", lambda x: (2 * x).t(), lambda x: 2 * x, CASES, quiet=True)
    assert not shape and "shape (5, 3) != expected (3, 5)" in shape.message
    returned = grade("double", lambda x: 2.0, lambda x: 2 * x, CASES, quiet=True)
    assert not returned and "returned float, not a tensor" in returned.message


def test_tuples_tolerances_and_dtypes():
    ref = lambda x: (2 * x, x.sum())  # noqa: E731
    assert grade("pair", lambda x: (x + x, x.sum()), ref, CASES, quiet=True)
    count = grade("pair", lambda x: (x + x,), ref, CASES, quiet=True)
    assert not count and "returned 1 tensors, expected 2" in count.message
    near = lambda x: 2 * x + 1e-3  # noqa: E731
    assert not grade("near", near, lambda x: 2 * x, CASES, quiet=True)
    assert grade("near", near, lambda x: 2 * x, CASES, atol=1e-2, quiet=True)
    # a float64 reference is compared in the attempt's dtype, with that dtype's tolerances
    assert grade("fp32 vs fp64", lambda x: (x / 3).float(), lambda x: x.double() / 3, CASES, quiet=True)


def test_tolerances_per_dtype():
    """{dtype: tolerance} applies to outputs of that dtype; others keep check's defaults."""
    cases = {"fp32": (torch.ones(4),), "fp16": (torch.ones(4, dtype=torch.float16),)}
    off = lambda x: 2 * x + 1e-2  # noqa: E731, within fp16's default tolerance, not fp32's
    ref = lambda x: 2 * x  # noqa: E731
    assert not grade("off", off, ref, cases, quiet=True)
    assert grade("off", off, ref, cases, atol={torch.float32: 0.1}, quiet=True)
    strict = grade("off", off, ref, cases, atol={torch.float32: 0.1, torch.float16: 0.0},
                   rtol={torch.float16: 0.0}, quiet=True)
    assert not strict and "case 'fp16'" in strict.message


def test_grade_runs_the_reference_on_copies_first_and_needs_cases():
    """An attempt that works in place cannot change what it is graded against; no cases is no verdict."""
    x = torch.tensor([-1.0, 2.0, -3.0])
    verdict = grade("relu", lambda x: x.abs_(), torch.relu, {"mixed signs": (x,)}, quiet=True)
    assert not verdict.passed and "not solved yet" in verdict.message
    with pytest.raises(ValueError, match="no cases"):
        grade("relu", torch.relu, torch.relu, {})


def test_inputs_sit_in_nan_guard_bands_and_must_come_back_unchanged():
    """A read past either end of a floating input gets NaN (the answer is poisoned); an attempt that changes an input
    (in place, where it should not) fails even when what it returns is right."""
    x = torch.arange(6.0)

    def seen(t):
        assert t.is_contiguous() and torch.equal(t, x) and t.data_ptr() != x.data_ptr()
        return 2 * t

    assert grade("double", seen, lambda t: 2 * t, {"6": (x,)}, quiet=True)
    past = lambda t: 2 * t + 0 * torch.as_strided(t, (1,), (1,), t.storage_offset() + t.numel())  # noqa: E731
    before = lambda t: 2 * t + 0 * torch.as_strided(t, (1,), (1,), t.storage_offset() - 1)  # noqa: E731
    for attempt in (past, before):
        verdict = grade("double", attempt, lambda t: 2 * t, {"6": (x,)}, quiet=True)
        assert not verdict and "got nan" in verdict.message
    changed = grade("double", lambda t: 2 * t.mul_(1.0).add_(0.5) - 1, lambda t: 2 * t, {"6": (x,)}, quiet=True)
    assert not changed and "the attempt changed its input 0" in changed.message
    assert torch.equal(x, torch.arange(6.0))  # the case's own tensor is never handed over


def test_an_attempt_may_not_pass_on_a_looser_dtype():
    """bfloat16's tolerance would pass a 1.5% error on float32 inputs: a less precise output fails. A reference that
    computes fp16 inputs in float32 still takes an fp16 answer, and a float64 reference a float32 one."""
    x = torch.linspace(-3, 3, 50)
    cheat = grade("scale", lambda t: (3 * t * 1.015).bfloat16(), lambda t: 3 * t, {"50": (x,)}, quiet=True)
    assert not cheat and "has dtype torch.bfloat16, less precise than the torch.float32 expected" in cheat.message
    assert grade("scale", lambda t: 3 * t, lambda t: 3 * t.float(), {"50": (x.half(),)}, quiet=True)
    assert grade("scale", lambda t: 3 * t, lambda t: 3 * t.double(), {"50": (x,)}, quiet=True)
    assert grade("count", lambda t: t.float(), lambda t: t.double(), {"ints": (torch.arange(5),)}, quiet=True)


def test_check_fails_a_number_where_nan_is_expected_and_refuses_bad_tolerances():
    nan = torch.tensor([float("nan")])
    with pytest.raises(AssertionError, match="1 of 1 elements differ"):
        check(torch.tensor([1.0]), nan)
    check(nan.clone(), nan, quiet=True)  # NaN where NaN is expected is right
    for atol, rtol in ((float("nan"), 0.0), (-1.0, 0.0), (0.0, -1e-3)):
        with pytest.raises(ValueError, match="tolerances must be >= 0"):
            check(torch.ones(2), torch.ones(2), atol=atol, rtol=rtol)
    with pytest.raises(AssertionError, match="differ"):
        check(torch.tensor([1 + 1j]), torch.tensor([1 + 5j]))  # the imaginary parts count too
    with pytest.raises(TypeError, match="complex"):
        check(torch.tensor([1.0]), torch.tensor([1 + 0j]))
