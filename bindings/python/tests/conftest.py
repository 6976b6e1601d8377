"""pytest setup: import ddpspawn and the test workers from this checkout, find
the C library, and turn skips into failures under DDPSPAWN_REQUIRE_ALL_TESTS=1;
and the `ctx` fixture, a Context of a group of one in this process.

DDPSPAWN_LIBRARY, when set (the Bazel test wrapper sets it), names the library;
otherwise the one Bazel builds in this clone is used.

DDPSPAWN_REQUIRE_ALL_TESTS=1 (tools/test passes it to every Bazel test): a test
that would be skipped (a skip marker, pytest.skip, pytest.importorskip, in a
test or while collecting a module) fails instead, with the skip's reason, so
that CI never passes with tests that did not run. Unset, empty or 0: skips stay
skips. Any other value counts as 1 and says so. An expected failure (xfail) is
not a skip and is left alone.
"""

import os
import sys
from pathlib import Path
from typing import Generator, Optional

import pytest

TESTS_DIR = Path(__file__).resolve().parent
PACKAGE_ROOT = TESTS_DIR.parent  # bindings/python
REPO_ROOT = PACKAGE_ROOT.parent.parent

# The worker helpers must be importable by module name in spawned workers,
# which get the launcher's sys.path.
for path in (str(TESTS_DIR), str(PACKAGE_ROOT)):
    if path not in sys.path:
        sys.path.insert(0, path)

os.environ.setdefault(
    "DDPSPAWN_LIBRARY", str(REPO_ROOT / "bazel-bin" / "capi" / "libddpspawn.so.1")
)

REQUIRE_ALL_TESTS = "DDPSPAWN_REQUIRE_ALL_TESTS"


def skip_failure(reason: str) -> Optional[str]:
    """None when a test that cannot run (for `reason`) may be skipped; else the
    failure message."""
    value = os.environ.get(REQUIRE_ALL_TESTS, "")
    if value in ("", "0"):
        return None
    why = f"this test cannot run here: {reason}"
    if value == "1":
        return f"{why} ({REQUIRE_ALL_TESTS}=1 makes a skip a failure)"
    return f"{why} (and {REQUIRE_ALL_TESTS}={value!r} is neither 0 nor 1; taken as 1)"


def _skip_reason(longrepr: object) -> str:
    # A skip's longrepr is (path, 1-based line, "Skipped: reason").
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        path, line, message = longrepr
        reason = str(message).removeprefix("Skipped: ")
        return f"{reason} ({path}:{line})"
    return str(longrepr)


def _fail_if_required(report: "pytest.TestReport | pytest.CollectReport") -> None:
    if not report.skipped or hasattr(report, "wasxfail"):
        return
    message = skip_failure(_skip_reason(report.longrepr))
    if message is not None:
        report.outcome = "failed"
        report.longrepr = message


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: "pytest.CallInfo[None]"
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    _fail_if_required(report)
    return report


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(
    collector: pytest.Collector,
) -> Generator[None, pytest.CollectReport, pytest.CollectReport]:
    report = yield
    _fail_if_required(report)
    return report


# Variables a cluster environment could be detected from.
_CLUSTER_PREFIXES = ("SLURM_", "TORCHELASTIC_", "PMI_", "OMPI_")
_CLUSTER_NAMES = (
    "MASTER_ADDR",
    "MASTER_PORT",
    "WORLD_SIZE",
    "RANK",
    "LOCAL_RANK",
    "LOCAL_WORLD_SIZE",
    "NODE_RANK",
    "GROUP_RANK",
    "DDPSPAWN_RUN_DIR",
)


@pytest.fixture(scope="module")
def ctx() -> Generator[object, None, None]:
    """A Context of a group of one in this process, joined from an environment
    with none of a launcher's, torchrun's or SLURM's variables."""
    import ddpspawn

    with pytest.MonkeyPatch.context() as patch:
        for name in list(os.environ):
            if name in _CLUSTER_NAMES or name.startswith(_CLUSTER_PREFIXES):
                patch.delenv(name)
        with ddpspawn.Context.from_env(timeout=60) as context:
            yield context
