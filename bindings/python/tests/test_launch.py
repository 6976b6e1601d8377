"""Tests of ddpspawn.spawn on success: results, rank layout, environment, and
workers defined in a launcher's main script."""

import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy
import pytest

import ddpspawn
import ddpspawn_test_workers as workers

START_METHODS = ["spawn", "fork", "forkserver"]
TESTS_DIR = Path(__file__).resolve().parent
PACKAGE_ROOT = TESTS_DIR.parent


@pytest.mark.parametrize("start_method", START_METHODS)
def test_rank_zero_return_value_comes_back(start_method):
    value = {"nested": [1, 2.5, "three"], "array": numpy.arange(4.0)}
    result = ddpspawn.spawn(
        workers.return_value, args=(value,), nprocs=2, start_method=start_method
    )
    assert result["nested"] == value["nested"]
    assert result["array"].tolist() == [0.0, 1.0, 2.0, 3.0]


@pytest.mark.parametrize("start_method", START_METHODS)
def test_none_comes_back_as_none(start_method):
    assert ddpspawn.spawn(workers.return_nothing, start_method=start_method) is None


@pytest.mark.parametrize("start_method", START_METHODS)
def test_each_rank_sees_its_place_and_environment(start_method):
    seen = ddpspawn.spawn(
        workers.describe,
        args=("payload",),
        nprocs=3,
        start_method=start_method,
        env={"DDPSPAWN_TEST_VAR": "from the launcher"},
    )
    for rank, info in enumerate(seen):
        assert info == {
            "rank": rank,
            "world_size": 3,
            "local_rank": rank,
            "local_world_size": 3,
            "node_rank": 0,
            "environment": "ddpspawn",
            "is_worker": True,
            "env_rank": str(rank),
            "extra_env": "from the launcher",
            "value": "payload",
        }


@pytest.mark.parametrize("start_method", START_METHODS)
def test_ranks_handle_signals_as_a_fresh_interpreter_does(start_method):
    facts = ddpspawn.spawn(workers.process_facts, nprocs=2, start_method=start_method)
    assert facts["keyboard_interrupt"] and facts["sigpipe_ignored"]


def test_forkserver_ranks_come_from_one_server_that_later_calls_reuse():
    first = ddpspawn.spawn(workers.process_facts, nprocs=2, start_method="forkserver")
    second = ddpspawn.spawn(workers.process_facts, nprocs=2, start_method="forkserver")
    server = first["parent"]
    assert server != os.getpid() and second["parent"] == server
    # An interpreter of its own (exec'd, not a fork of this one) that serves.
    command = Path(f"/proc/{server}/cmdline").read_bytes().split(b"\0")
    assert command[1] == b"-c" and b"_worker.serve" in command[2]
    assert Path(f"/proc/{server}/exe").resolve() == Path(sys.executable).resolve()


def test_fork_takes_any_callable():
    offset = 41
    assert ddpspawn.spawn(lambda ctx: ctx.rank + offset, nprocs=2, start_method="fork") == 41


def test_launcher_keeps_its_own_environment():
    before = dict(os.environ)
    ddpspawn.spawn(workers.return_nothing, nprocs=2, start_method="fork")
    assert dict(os.environ) == before


def run_script(tmp_path, source):
    """Starts a launcher script in a fresh interpreter that can import
    ddpspawn and the test workers."""
    script = tmp_path / "launcher.py"
    script.write_text(textwrap.dedent(source))
    pythonpath = os.pathsep.join([str(PACKAGE_ROOT), str(TESTS_DIR)])
    return subprocess.Popen(
        [sys.executable, str(script)],
        cwd=tmp_path,
        env=dict(os.environ, PYTHONPATH=pythonpath),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


@pytest.mark.parametrize("start_method", START_METHODS)
def test_worker_defined_in_the_main_script(tmp_path, start_method):
    launcher = run_script(
        tmp_path,
        f"""
        import ddpspawn

        class Point:
            def __init__(self, x, y):
                self.x, self.y = x, y

        def work(ctx, point):
            total = ctx.all_reduce([point.x + ctx.rank])
            return Point(total[0], __name__)

        if __name__ == "__main__":
            result = ddpspawn.spawn(
                work, args=(Point(10, 0),), nprocs=2, start_method={start_method!r}
            )
            print(type(result).__name__, result.x, result.y)
        """,
    )
    out, err = launcher.communicate(timeout=120)
    assert launcher.returncode == 0, err
    main_name = "__main__" if start_method == "fork" else "__mp_main__"
    assert out.split() == ["Point", "21", main_name]


@pytest.mark.parametrize("start_method", START_METHODS)
def test_args_of_a_class_of_the_main_script_reach_a_worker_of_a_module(tmp_path, start_method):
    # fn from a module, args holding an object of a class the main script defines (a user's
    # LightningModule given to a Trainer, say): the worker loads the main script to unpickle it.
    launcher = run_script(
        tmp_path,
        f"""
        import ddpspawn
        import ddpspawn_test_workers as workers

        class Tagged(str):
            pass

        if __name__ == "__main__":
            print(ddpspawn.spawn(workers.return_value, args=(Tagged("made in main"),), nprocs=2,
                                 start_method={start_method!r}))
        """,
    )
    out, err = launcher.communicate(timeout=120)
    assert launcher.returncode == 0, err
    assert out.strip() == "made in main"


def test_forkserver_loads_the_main_script_once_for_every_later_launch(tmp_path):
    # The server loads the main script (and so its imports) before it serves,
    # hiding its socket from the script; its ranks, forked from it, do not
    # load it again.
    launcher = run_script(
        tmp_path,
        """
        import os, ddpspawn
        with open("loads.txt", "a") as loads:
            loads.write(__name__ + " " + os.environ.get("DDPSPAWN_FORKSERVER_FD", "-") + "\\n")

        def work(ctx):
            return os.getppid()

        if __name__ == "__main__":
            first = ddpspawn.spawn(work, nprocs=2, start_method="forkserver")
            second = ddpspawn.spawn(work, nprocs=2, start_method="forkserver")
            print(first == second)
        """,
    )
    out, err = launcher.communicate(timeout=120)
    assert launcher.returncode == 0, err
    assert out.split() == ["True"]
    assert (tmp_path / "loads.txt").read_text().split("\n") == ["__main__ -", "__mp_main__ -", ""]


def test_forkserver_ranks_start_with_what_torch_optim_imports(tmp_path):
    # A main script that imports torch: its server also imports torch._dynamo,
    # which torch.optim's first optimizer would import in every rank (0.8 s
    # here). Each rank finds it loaded on entry, with no CUDA initialized and
    # no Python thread but its own, and its first optimizer takes milliseconds
    # (printed, not asserted).
    launcher = run_script(
        tmp_path,
        """
        import os, sys, time, threading
        import torch
        import ddpspawn

        def work(ctx):
            loaded = "torch._dynamo" in sys.modules
            start = time.perf_counter()
            torch.optim.SGD([torch.zeros(2, requires_grad=True)], lr=0.1)
            return ctx.all_gather_object((loaded, torch.cuda.is_initialized(),
                                          threading.active_count(),
                                          time.perf_counter() - start))

        if __name__ == "__main__":
            for rank in ddpspawn.spawn(work, nprocs=2, start_method="forkserver"):
                print(*rank)
        """,
    )
    out, err = launcher.communicate(timeout=180)
    assert launcher.returncode == 0, err
    for line in out.splitlines():
        loaded, cuda, threads, seconds = line.split()
        assert (loaded, cuda, threads) == ("True", "False", "1"), out
        print(f"a forkserver rank's first torch.optim.SGD: {float(seconds) * 1e3:.1f} ms")


@pytest.mark.parametrize("start_method", START_METHODS)
def test_two_launchers_run_one_job_of_two_nodes(tmp_path, start_method):
    # Two launchers on this host, as two nodes would run them: one job of 4
    # ranks whose rank 0's value every launcher returns.
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    launchers = []
    for node in range(2):
        directory = tmp_path / f"node{node}"
        directory.mkdir()
        launchers.append(run_script(
            directory,
            f"""
            import ddpspawn
            import ddpspawn_test_workers as workers

            if __name__ == "__main__":
                seen = ddpspawn.spawn(
                    workers.describe, nprocs=2, start_method={start_method!r}, nnodes=2,
                    node_rank={node}, master_addr="127.0.0.1", master_port={port}
                )
                print(sorted((s["rank"], s["node_rank"], s["local_rank"], s["world_size"])
                             for s in seen))
            """,
        ))
    outputs = []
    for launcher in launchers:
        out, err = launcher.communicate(timeout=120)
        assert launcher.returncode == 0, err
        outputs.append(out.strip())
    want = "[(0, 0, 0, 4), (1, 0, 1, 4), (2, 1, 0, 4), (3, 1, 1, 4)]"
    assert outputs == [want, want]


def test_node_options_are_checked_before_any_process_starts():
    with pytest.raises(ddpspawn.InvalidArgumentError, match=r"node_rank must be an int"):
        ddpspawn.spawn(workers.return_nothing, nprocs=2, nnodes=2, node_rank=2**32)
    # The library's own check: several nodes need node 0's address and port.
    with pytest.raises(ddpspawn.InvalidArgumentError, match="nnodes > 1 needs master_addr"):
        ddpspawn.spawn(workers.return_nothing, nprocs=2, nnodes=2, node_rank=1)


@pytest.mark.parametrize("start_method", ["spawn", "forkserver"])
def test_main_script_without_name_guard_is_explained(tmp_path, start_method):
    launcher = run_script(
        tmp_path,
        f"""
        import ddpspawn

        def work(ctx):
            return ctx.rank

        try:
            ddpspawn.spawn(work, nprocs=1, start_method={start_method!r})
        except ddpspawn.WorkerFailedError as error:
            print(error)
        """,
    )
    out, err = launcher.communicate(timeout=120)
    assert launcher.returncode == 0, err
    assert "if __name__ == \"__main__\":" in out


def test_sigint_to_the_launcher_raises_keyboard_interrupt(tmp_path):
    launcher = run_script(
        tmp_path,
        f"""
        import ddpspawn, ddpspawn_test_workers as workers
        try:
            ddpspawn.spawn(workers.touch_and_hang, args=({str(tmp_path)!r},), nprocs=2)
        except KeyboardInterrupt as error:
            print("KeyboardInterrupt:", error)
        """,
    )
    try:
        deadline = time.monotonic() + 120
        while len(list(tmp_path.glob("rank*.started"))) < 2:
            assert launcher.poll() is None, launcher.communicate()
            assert time.monotonic() < deadline, "workers did not start"
            time.sleep(0.05)
        launcher.send_signal(signal.SIGINT)
        out, err = launcher.communicate(timeout=60)
    finally:
        launcher.kill()
    assert launcher.returncode == 0, err
    assert out.startswith("KeyboardInterrupt:")
    assert "SIGINT" in out


@pytest.mark.parametrize("start_method", ["spawn", "forkserver"])
def test_max_restarts_starts_the_ranks_again(start_method, capfd):
    result = ddpspawn.spawn(workers.fail_first_start, args=(1,), nprocs=2,
                            start_method=start_method, max_restarts=1)
    assert result == {"generation": 1, "world": 2}
    assert "ddpspawn: restart 1 of 1: " in capfd.readouterr().err
    # Without a restart left, the first start's failure is the job's.
    with pytest.raises(ddpspawn.WorkerFailedError, match="rank 1 fails in start 0"):
        ddpspawn.spawn(workers.fail_first_start, args=(1,), nprocs=2,
                       start_method=start_method)
    with pytest.raises(ddpspawn.InvalidArgumentError, match="start_method='fork'"):
        ddpspawn.spawn(workers.fail_first_start, args=(1,), nprocs=2, start_method="fork",
                       max_restarts=1)
