"""Each pytest-xdist worker runs torch with the cores shared among the workers; a run without xdist, and
``--hfexport-worker-threads=keep``, leave torch's own choice; a number sets it; a bad value is a usage error."""

import json
import subprocess
import sys

import pytest

from pytest_hfexport.worker_threads import AUTO, KEEP, parse, threads_for, usable_cores

TEST = """
    import json, os, torch

    def test_threads():
        with open(f"threads-{os.environ.get('PYTEST_XDIST_WORKER', 'main')}.json", "w") as f:
            json.dump(torch.get_num_threads(), f)
"""


def torch_default_threads() -> int:
    code = "import torch; print(torch.get_num_threads())"
    return int(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout)


def threads_seen(pytester, *args) -> dict[str, int]:
    """Process name (xdist worker id, or main) -> torch threads its test saw. The outer run's worker id, when
    this file itself runs under xdist, is not passed down."""
    with pytest.MonkeyPatch.context() as env:
        for name in ("PYTEST_XDIST_WORKER", "PYTEST_XDIST_WORKER_COUNT"):
            env.delenv(name, raising=False)
        return _threads_seen(pytester, *args)


def _threads_seen(pytester, *args) -> dict[str, int]:
    pytester.makepyfile(TEST)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--hfexport-backend=dynamo", *args)
    result.assert_outcomes(passed=1)
    return {p.stem.split("-", 1)[1]: json.loads(p.read_text()) for p in pytester.path.glob("threads-*.json")}


@pytest.mark.parametrize(
    "setting, workers, cores, expected",
    [(AUTO, 2, 2, 1), (AUTO, 4, 2, 1), (AUTO, 2, 8, 4), (AUTO, 1, 8, 8), (AUTO, None, 8, None),
     (KEEP, 2, 2, None), (3, 2, 2, 3), (3, None, 2, 3)],
)
def test_threads_per_process(setting, workers, cores, expected):
    assert threads_for(setting, workers, cores) == expected


@pytest.mark.parametrize("value", ["0", "-2", "many", "1.5"])
def test_a_bad_value_says_what_to_pass(value):
    with pytest.raises(pytest.UsageError, match="auto .* keep .* positive number"):
        parse(value)


def test_an_xdist_worker_gets_its_share_of_the_cores(pytester):
    ((process, threads),) = threads_seen(pytester, "-n", "2").items()
    assert process.startswith("gw") and threads == max(1, usable_cores() // 2)


def test_without_xdist_or_with_keep_torch_chooses(pytester):
    default = torch_default_threads()
    assert threads_seen(pytester) == {"main": default}
    assert set(threads_seen(pytester, "-n", "2", "--hfexport-worker-threads=keep").values()) == {default}


def test_a_number_is_used_as_given(pytester):
    assert threads_seen(pytester, "--hfexport-worker-threads=3") == {"main": 3}


def test_a_bad_option_value_is_a_usage_error(pytester):
    pytester.makepyfile(TEST)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--hfexport-worker-threads=0")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--hfexport-worker-threads=0: use auto*"])
