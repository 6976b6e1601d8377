"""Tests of failing jobs: a rank that raises, exits non-zero, crashes or hangs,
and arguments rejected before any process starts."""

import pickle
import signal
import threading
import time

import pytest

import ddpspawn
import ddpspawn_test_workers as workers

START_METHODS = ["spawn", "fork", "forkserver"]

# The other ranks of a failing job sleep 60 s (ddpspawn_test_workers.py) or
# more: a failure reported within this bound was reported because the launcher
# stopped them, not because they finished.
FAILURE_BOUND_S = 20


def assert_well_before_the_sleepers(started):
    elapsed = time.monotonic() - started
    assert elapsed < FAILURE_BOUND_S, (
        f"the failure took {elapsed:.1f} s to be reported; the launcher should stop the "
        f"sleeping ranks at once (bound {FAILURE_BOUND_S} s, they sleep 60 s or more)"
    )


@pytest.mark.parametrize("start_method", START_METHODS)
def test_exception_in_rank_one(start_method):
    started = time.monotonic()
    with pytest.raises(ddpspawn.WorkerFailedError) as caught:
        ddpspawn.spawn(
            workers.raise_in_rank,
            args=(1, "the original message"),
            nprocs=2,
            start_method=start_method,
            grace_period=1,
        )
    assert_well_before_the_sleepers(started)
    error = caught.value
    assert error.rank == 1
    assert error.exit_code == 1 and error.signal is None
    assert "rank 1" in str(error)
    for text in (str(error), error.traceback_text):
        assert "RuntimeError: the original message" in text
        assert "Traceback (most recent call last)" in text
        assert "_inner_failure" in text  # the frame that raised
        assert "ddpspawn_test_workers.py" in text


@pytest.mark.parametrize("start_method", START_METHODS)
def test_a_reported_error_heads_the_message_though_the_launcher_ended_the_rank(start_method):
    started = time.monotonic()
    with pytest.raises(ddpspawn.WorkerFailedError) as caught:
        ddpspawn.spawn(
            workers.report_then_hang,
            args=(0, "the error rank 0 reported"),
            nprocs=2,
            start_method=start_method,
            grace_period=1,
        )
    assert_well_before_the_sleepers(started)
    error = caught.value
    assert error.rank == 0
    assert error.traceback_text == "the error rank 0 reported"
    assert error.message.startswith("rank 0 (pid "), error.message
    assert ") failed: the error rank 0 reported\n" in error.message, error.message
    assert "was killed by signal" not in error.message, error.message


def test_worker_failed_error_pickles():
    error = ddpspawn.WorkerFailedError(2, "rank 2 failed", "Traceback ...", exit_code=1)
    copy = pickle.loads(pickle.dumps(error))
    assert (copy.rank, copy.message, copy.traceback_text, copy.exit_code) == (
        2,
        "rank 2 failed",
        "Traceback ...",
        1,
    )
    assert str(copy) == str(error)


@pytest.mark.parametrize("start_method", START_METHODS)
def test_exit_code(start_method):
    started = time.monotonic()
    with pytest.raises(ddpspawn.WorkerFailedError, match="exit(ed with)? code 3") as caught:
        ddpspawn.spawn(
            workers.exit_in_rank, args=(1, 3), nprocs=2, start_method=start_method
        )
    assert_well_before_the_sleepers(started)
    assert caught.value.rank == 1
    assert caught.value.exit_code == 3
    assert caught.value.traceback_text == ""


@pytest.mark.parametrize("start_method", START_METHODS)
def test_killed_by_sigsegv(start_method):
    started = time.monotonic()
    with pytest.raises(ddpspawn.WorkerFailedError, match="SIGSEGV") as caught:
        ddpspawn.spawn(
            workers.segfault_in_rank, args=(0,), nprocs=2, start_method=start_method
        )
    assert_well_before_the_sleepers(started)
    assert caught.value.rank == 0
    assert caught.value.signal == signal.SIGSEGV
    assert caught.value.exit_code is None


@pytest.mark.parametrize("start_method", START_METHODS)
def test_timeout(start_method):
    started = time.monotonic()
    with pytest.raises(ddpspawn.DdpspawnTimeoutError) as caught:
        ddpspawn.spawn(
            workers.hang, nprocs=2, start_method=start_method, timeout=3, grace_period=1
        )
    assert isinstance(caught.value, TimeoutError)
    assert "timeout" in str(caught.value)
    # The job is stopped at the deadline, not when the workers (600 s) would finish.
    assert_well_before_the_sleepers(started)


def test_other_threads_run_while_waiting():
    ticks = []
    stop = threading.Event()

    def tick():
        while not stop.is_set():
            ticks.append(1)
            time.sleep(0.01)

    thread = threading.Thread(target=tick)
    thread.start()
    started = time.monotonic()
    try:
        with pytest.raises(ddpspawn.DdpspawnTimeoutError):
            ddpspawn.spawn(workers.hang, start_method="fork", timeout=1, grace_period=0)
    finally:
        stop.set()
        thread.join()
    assert_well_before_the_sleepers(started)  # the workers hang for 600 s
    assert len(ticks) > 10


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"nprocs": 0}, "nprocs"),
        ({"nprocs": -2}, "nprocs"),
        ({"nprocs": 2.0}, "nprocs"),
        ({"nprocs": True}, "nprocs"),
        ({"start_method": "bogus"}, "start_method"),
        ({"timeout": 0}, "timeout"),
        ({"grace_period": -1}, "grace_period"),
        ({"env": {"A=B": "x"}}, "environment"),
        ({"env": {"RANK": "5"}}, "RANK"),  # the launcher sets it for each rank
    ],
)
@pytest.mark.parametrize("start_method", START_METHODS)
def test_bad_arguments_fail_before_launch(tmp_path, kwargs, match, start_method):
    marker = tmp_path / "ran"
    kwargs = {"start_method": start_method, **kwargs}
    with pytest.raises(ddpspawn.InvalidArgumentError, match=match):
        ddpspawn.spawn(workers.write_marker, args=(str(marker),), **kwargs)
    assert not marker.exists()


def test_lambda_is_rejected_for_spawn():
    with pytest.raises(ddpspawn.InvalidArgumentError, match="lambda"):
        ddpspawn.spawn(lambda ctx: None, start_method="spawn")


def test_nested_function_is_rejected_for_spawn():
    def nested(ctx):
        return None

    with pytest.raises(ValueError, match="nested function"):
        ddpspawn.spawn(nested)


def test_unpicklable_args_are_rejected_for_spawn():
    with pytest.raises(ddpspawn.InvalidArgumentError, match="pickle"):
        ddpspawn.spawn(workers.return_value, args=(threading.Lock(),))
