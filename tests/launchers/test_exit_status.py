"""The CLI's exit status says what happened, for a script that does not read
the message: 1 a rank failed, 2 the launcher refused the command, and a run
stopped by SIGINT or SIGTERM ends by that signal once its ranks are stopped (a
shell shows 130 and 143)."""

import os
import signal
import subprocess

import pytest

from test_restarts import fit_args, wait_for_steps
from test_torchrun import CLI, rank_pid, write_csv


def test_a_refused_command_exits_2(tmp_path):
    train = write_csv(tmp_path / "train.csv")
    run = subprocess.run([str(CLI), "fit", "--model", "mlp:4,8,3", "--train", str(train),
                          "--lernrate", "0.1"], capture_output=True, text=True, timeout=60)
    assert run.returncode == 2, run.stderr
    assert "unknown option 'lernrate'" in run.stderr


def test_a_failed_rank_exits_1(tmp_path):
    train = write_csv(tmp_path / "train.csv", rows=2000)
    root = tmp_path / "logs"
    job = subprocess.Popen(fit_args(train, root), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True)
    wait_for_steps(job, root, 20)
    os.kill(rank_pid(job.pid, 1), signal.SIGKILL)
    _, err = job.communicate(timeout=120)
    assert job.returncode == 1, err
    assert "rank 1 (pid" in err and "SIGKILL" in err, err


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_an_interrupted_run_ends_by_the_signal_after_stopping_its_ranks(tmp_path, sig):
    train = write_csv(tmp_path / "train.csv", rows=2000)
    root = tmp_path / "logs"
    job = subprocess.Popen(fit_args(train, root), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True)
    wait_for_steps(job, root, 20)
    ranks = [rank_pid(job.pid, rank) for rank in (0, 1)]
    job.send_signal(sig)
    _, err = job.communicate(timeout=120)
    assert job.returncode == -sig, err  # killed by the signal itself, not exit(128 + sig)
    assert f"the launcher received {signal.Signals(sig).name}" in err, err
    for pid in ranks:
        assert not os.path.exists(f"/proc/{pid}"), f"rank pid {pid} outlived the launcher"
