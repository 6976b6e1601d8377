"""conftest.py's DDPSPAWN_REQUIRE_ALL_TESTS hook: a small suite of skips, run
by a separate pytest with this directory's conftest, skips them when the
variable is unset and fails each (naming its reason) when it is 1."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REQUIRE_ALL_TESTS

SKIPPING_SUITE = '''
import pytest

@pytest.mark.skipif(True, reason="a marker's reason")
def test_marked():
    pass

def test_inside():
    pytest.skip("a reason given inside")

@pytest.mark.xfail(reason="expected to fail", strict=True)
def test_expected_failure():
    assert False

def test_passes():
    pass
'''

SKIPPED_MODULE = '''
import pytest
pytest.importorskip("ddpspawn_no_such_module")

def test_never_collected():
    pass
'''


def run_suite(tmp_path: Path, value: "str | None") -> "subprocess.CompletedProcess[str]":
    shutil.copy(Path(__file__).with_name("conftest.py"), tmp_path / "conftest.py")
    (tmp_path / "test_suite.py").write_text(SKIPPING_SUITE)
    (tmp_path / "test_skipped_module.py").write_text(SKIPPED_MODULE)
    env = dict(os.environ)
    env.pop(REQUIRE_ALL_TESTS, None)
    if value is not None:
        env[REQUIRE_ALL_TESTS] = value
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rA", "-p", "no:cacheprovider",
         "--continue-on-collection-errors", str(tmp_path)],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
    )


@pytest.mark.parametrize("value", [None, "", "0"])
def test_skips_are_skips_without_the_variable(tmp_path, value):
    run = run_suite(tmp_path, value)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "1 passed, 3 skipped, 1 xfailed" in run.stdout, run.stdout


@pytest.mark.parametrize("value", ["1", "yes"])
def test_skips_fail_with_the_variable(tmp_path, value):
    run = run_suite(tmp_path, value)
    assert run.returncode != 0, run.stdout + run.stderr
    # The skip inside a test fails it; the marker's skip (at setup) and the
    # skipped module (at collection) are errors; the expected failure and the
    # passing test are untouched.
    assert "1 failed, 1 passed, 1 xfailed, 2 errors" in run.stdout, run.stdout
    for reason in ("a marker's reason", "a reason given inside", "ddpspawn_no_such_module"):
        assert reason in run.stdout, run.stdout
    if value == "1":
        assert f"{REQUIRE_ALL_TESTS}=1 makes a skip a failure" in run.stdout
    else:
        assert "'yes' is neither 0 nor 1" in run.stdout
