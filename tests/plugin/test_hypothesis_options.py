"""--hfexport-max-examples and --hfexport-hypothesis-profile (a derandomized CI profile)."""

import pytest

COUNTING = """
    import torch
    from pytest_hfexport import ModelCase, parametrize_with_checks
    from pytest_hfexport.pipeline import Harness

    CALLS = []

    class Tiny(torch.nn.Module):
        def forward(self, x):
            CALLS.append(tuple(x.shape))
            return {"y": x + 1}

    def make(model, batch, seq):
        return {"x": torch.ones(batch, seq)}

    @parametrize_with_checks([ModelCase("tiny", Tiny, make, checks=("shapes",))])
    def test_model(check):
        check()

    def test_count(pytestconfig):
        # one sample run for export + one per drawn example (eager only: the runner is the program)
        drawn = len(CALLS) - 2
        assert drawn == int(pytestconfig.getoption("hfexport_max_examples")), CALLS
"""


def test_max_examples_bounds_the_shape_check(pytester):
    pytester.makepyfile(COUNTING)
    result = pytester.runpytest_inprocess("--hfexport-backend=dynamo", "--hfexport-max-examples=3",
                                          "-p", "no:randomly")
    result.assert_outcomes(passed=2)


def test_ci_profile_is_derandomized(pytester):
    pytester.makepyfile("""
        from hypothesis import settings

        def test_profile():
            current = settings()
            assert current.derandomize and current.deadline is None and current.database is None
    """)
    result = pytester.runpytest_inprocess("--hfexport-hypothesis-profile=hfexport-ci")
    result.assert_outcomes(passed=1)


def test_bad_values_are_usage_errors(pytester):
    pytester.makepyfile("def test_x(): pass")
    assert pytester.runpytest_inprocess("--hfexport-max-examples=0").ret == pytest.ExitCode.USAGE_ERROR
    assert pytester.runpytest_inprocess("--hfexport-hypothesis-profile=nope").ret == pytest.ExitCode.USAGE_ERROR
