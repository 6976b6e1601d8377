"""--max-restarts with --checkpoint-every-n-steps: a rank SIGKILLed at any step
restarts the job from its last checkpoint, and training ends with the same
weights as without the failure."""

import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Dict, List

import pytest

from test_torchrun import CLI, evaluate, logged_steps, parent_of, parse, rank_pid, write_csv

MODEL = "mlp:4,64,3"


def fit_args(train: Path, root: Path) -> List[str]:
    # 2 ranks x batch 4 over 2000 samples: 250 steps an epoch, 750 in all.
    return [str(CLI), "fit", "--model", MODEL, "--train", str(train), "--max-epochs", "3",
            "--batch-size", "4", "--seed", "7", "--optimizer", "adam", "--lr", "0.01",
            "--nproc-per-node", "2", "--checkpoint-every-n-steps", "7",
            "--log-every-n-steps", "1", "--progress", "false", "--default-root-dir", str(root)]


def epoch_losses(root: Path) -> Dict[int, str]:
    """Each epoch's train_loss_epoch at its last step, as logged (the last line
    for a step wins)."""
    rows = (root / "metrics.csv").read_text().splitlines()[1:]
    return {int(row.split(",")[1]): row.split(",")[3]
            for row in rows if ",train_loss_epoch," in row and int(row.split(",")[1]) % 250 == 0}


def wait_for_steps(process: subprocess.Popen, root: Path, count: int) -> None:
    deadline = time.monotonic() + 60
    while len(logged_steps(root)) < count:
        assert process.poll() is None, process.communicate()
        assert time.monotonic() < deadline
        time.sleep(0.005)


@pytest.fixture
def start():
    """Starts a job with its output piped as text; one still running when the test ends (a failed
    assertion, a timed-out communicate) is killed, and its ranks die with their launcher."""
    started: List[subprocess.Popen] = []

    def start_job(args: List[str], **kwargs) -> subprocess.Popen:
        job = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               **kwargs)
        started.append(job)
        return job

    yield start_job
    for job in started:
        if job.poll() is None:
            job.kill()
            job.communicate()


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    root = tmp_path_factory.mktemp("uninterrupted")
    train = write_csv(root / "train.csv", rows=2000)
    run = subprocess.run(fit_args(train, root / "logs"), capture_output=True, text=True,
                         timeout=120)
    assert run.returncode == 0, run.stderr
    assert "restarts=" not in run.stdout  # only with max_restarts
    return train, parse(run.stdout), evaluate(parse(run.stdout)["checkpoint"], train, MODEL)


# Kill points: within the first epoch, just before its end (step 250), in the
# second and the third; rank 1, and once rank 0.
@pytest.mark.parametrize("after_steps, rank", [(40, 1), (246, 1), (400, 0), (700, 1)])
def test_a_killed_rank_resumes_to_the_same_weights(start, tmp_path, uninterrupted, after_steps,
                                                    rank):
    train, want, want_metrics = uninterrupted
    root = tmp_path / "logs"
    job = start(fit_args(train, root) + ["--max-restarts", "1"])
    wait_for_steps(job, root, after_steps)
    os.kill(rank_pid(job.pid, rank), signal.SIGKILL)
    out, err = job.communicate(timeout=120)
    assert job.returncode == 0, err
    got = parse(out)
    assert got["restarts"] == "1"
    assert f"ddpspawn: restart 1 of 1: rank {rank} (pid" in err and "SIGKILL" in err, err
    assert f"continuing from {root.resolve()}/checkpoints/last.ckpt" in err, err
    # The line names the checkpoint's step, which the result repeats: one the
    # job checkpointed at (every 7 steps, and each epoch's end).
    resumed = int(got["resumed_step"])
    assert resumed % 7 == 0 or resumed % 250 == 0, resumed
    epoch, batch = resumed // 250 + 1, resumed % 250
    where = (f"step {resumed}, the start of epoch {epoch}" if batch == 0
             else f"step {resumed}, batch {batch} of epoch {epoch}")
    # It says how many steps it re-runs: those the failed attempt finished
    # after the checkpoint.
    rerun = int(got["steps_rerun"])
    assert (f"continuing from {root.resolve()}/checkpoints/last.ckpt ({where}; {rerun} "
            f"step{'' if rerun == 1 else 's'} re-run: the failed attempt reached step "
            f"{resumed + rerun})\n") in err, err
    # It continued from a checkpoint: step 1 ran once, and only the steps
    # after the last checkpoint (every 7 steps and at each epoch's end) ran
    # again: as many as it said (one fewer when the kill came between a step's
    # report and its log line).
    steps = logged_steps(root)
    assert steps.count(1) == 1
    assert 0 <= len(steps) - 750 <= 7, len(steps)
    assert max(rerun - 1, 0) <= len(steps) - 750 <= rerun, (rerun, len(steps))
    assert got["global_step"] == want["global_step"] == "750"
    # Bit-identical weights: their loss on the training set agrees to every
    # digit.
    assert evaluate(got["checkpoint"], train, MODEL) == want_metrics
    # The resumed epoch's loss counts the batches before the checkpoint too.
    assert epoch_losses(root) == epoch_losses(train.parent / "logs")


@pytest.mark.parametrize("stage", ["shard_grad_op", "full_shard"])
def test_sharded_checkpoints_resume_a_killed_rank_to_the_same_weights(start, tmp_path,
                                                                       uninterrupted, stage):
    # --state-dict-type sharded: every checkpoint is a directory each rank
    # writes its shard of, and the restarted ranks each read their rows back.
    # At 2 ranks the sharded strategies' arithmetic is DDP's (the
    # reduce-scatter of two gradients sums them as the all-reduce does), so the
    # weights are the uninterrupted unsharded run's.
    train, want, want_metrics = uninterrupted
    root = tmp_path / "logs"
    job = start(fit_args(train, root) + ["--max-restarts", "1", "--sharding-strategy", stage,
                                         "--state-dict-type", "sharded"])
    wait_for_steps(job, root, 400)
    os.kill(rank_pid(job.pid, 1), signal.SIGKILL)
    out, err = job.communicate(timeout=120)
    assert job.returncode == 0, err
    got = parse(out)
    assert got["restarts"] == "1"
    checkpoint = root.resolve() / "checkpoints" / "last.ckpt"
    assert f"continuing from {checkpoint} (step {got['resumed_step']}, " in err, err
    assert sorted(os.listdir(checkpoint)) == ["common", "shard-0-of-2", "shard-1-of-2"]
    steps = logged_steps(root)
    assert steps.count(1) == 1 and 0 <= len(steps) - 750 <= 7, len(steps)
    assert got["global_step"] == "750"
    assert evaluate(got["checkpoint"], train, MODEL) == want_metrics


def test_forkserver_trains_like_spawn_and_restarts_from_the_same_server(start, tmp_path,
                                                                        uninterrupted):
    # --start-method forkserver: one exec of the CLI forks the ranks, and the
    # restarted ranks too; the weights are those of the spawned, uninterrupted
    # run.
    train, want, want_metrics = uninterrupted
    root = tmp_path / "logs"
    job = start(fit_args(train, root) + ["--start-method", "forkserver", "--max-restarts", "1"])
    wait_for_steps(job, root, 246)
    victim = rank_pid(job.pid, 1)
    server = parent_of(victim)
    assert server != job.pid and parent_of(server) == job.pid
    assert Path(f"/proc/{server}/exe").resolve() == CLI.resolve()  # an exec, not a fork
    os.kill(victim, signal.SIGKILL)
    deadline = time.monotonic() + 60
    restarted = victim
    while restarted == victim:  # the next generation's rank 1
        try:
            restarted = rank_pid(job.pid, 1)
        except AssertionError:
            pass
        assert job.poll() is None and time.monotonic() < deadline
        time.sleep(0.002)
    assert parent_of(restarted) == server
    out, err = job.communicate(timeout=120)
    assert job.returncode == 0, err
    got = parse(out)
    assert got["restarts"] == "1"
    assert f"ddpspawn: restart 1 of 1: rank 1 (pid {victim})" in err, err
    assert got["global_step"] == want["global_step"] == "750"
    assert evaluate(got["checkpoint"], train, MODEL) == want_metrics


def test_exhausted_restarts_end_with_the_last_failure(start, tmp_path, uninterrupted):
    train, _, _ = uninterrupted
    root = tmp_path / "logs"
    job = start(fit_args(train, root) + ["--max-restarts", "1"])
    wait_for_steps(job, root, 30)
    first = rank_pid(job.pid, 1)
    os.kill(first, signal.SIGKILL)
    deadline = time.monotonic() + 60
    while True:  # the restarted ranks, once they train
        try:
            second = rank_pid(job.pid, 1)
        except AssertionError:
            second = first
        if second != first and len(logged_steps(root)) > 60:
            break
        assert job.poll() is None and time.monotonic() < deadline
        time.sleep(0.005)
    os.kill(second, signal.SIGKILL)
    out, err = job.communicate(timeout=120)
    assert job.returncode != 0
    assert "global_step=" not in out
    assert f"rank 1 (pid {second}) was killed by signal SIGKILL" in err, err
    assert "(after 1 restart)" in err


def test_max_restarts_is_refused_where_it_cannot_work(tmp_path):
    train = write_csv(tmp_path / "train.csv", rows=30)
    run = subprocess.run([str(CLI), "test", "--model", MODEL, "--data", str(train),
                          "--max-restarts", "1"], capture_output=True, text=True, timeout=60)
    assert run.returncode != 0
    assert "max_restarts is for fit" in run.stderr


@pytest.mark.parametrize("start_method", ["spawn", "forkserver"])
def test_sigusr1_in_a_slurm_job_checkpoints_and_a_requeued_run_continues(start, tmp_path,
                                                                       uninterrupted,
                                                                       start_method):
    # A SLURM job (SLURM_JOB_ID set; one task, so ddpspawn launches its ranks):
    # SLURM's warning signal reaches the launcher, which passes it to the
    # ranks; fit saves its checkpoint and stops on every rank together.
    train, want, want_metrics = uninterrupted
    root = tmp_path / "logs"
    slurm = dict(os.environ, SLURM_JOB_ID="4242")
    slurm.pop("SLURM_RESTART_COUNT", None)
    job = start(fit_args(train, root) + ["--start-method", start_method], env=slurm)
    wait_for_steps(job, root, 300)
    job.send_signal(signal.SIGUSR1)
    out, err = job.communicate(timeout=120)
    assert job.returncode == 0, err
    first = parse(out)
    assert first["stopped_by"] == "SIGUSR1"
    stopped_at = int(first["global_step"])
    assert 300 <= stopped_at < 750
    # SLURM requeues the job: the same command, SLURM_RESTART_COUNT=1.
    requeued = subprocess.run(fit_args(train, root), capture_output=True, text=True, timeout=120,
                              env=dict(slurm, SLURM_RESTART_COUNT="1"))
    assert requeued.returncode == 0, requeued.stderr
    assert ("ddpspawn: SLURM requeued job 4242 (SLURM_RESTART_COUNT=1): continuing from "
            f"{root.resolve()}/checkpoints/last.ckpt") in requeued.stderr
    got = parse(requeued.stdout)
    assert got["global_step"] == "750" and "stopped_by" not in got
    steps = logged_steps(root)
    assert steps.count(1) == 1 and len(steps) == 750  # no step ran twice
    assert evaluate(got["checkpoint"], train, MODEL) == want_metrics
    # The stopped epoch's loss (at its end, in the requeued run) is the whole
    # epoch's, as in the uninterrupted run.
    assert epoch_losses(root) == epoch_losses(train.parent / "logs")


def test_without_slurm_sigusr1_keeps_its_default_action(start, tmp_path, uninterrupted):
    train, _, _ = uninterrupted
    root = tmp_path / "logs"
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    job = start(fit_args(train, root), env=env)
    wait_for_steps(job, root, 100)
    job.send_signal(signal.SIGUSR1)
    out, err = job.communicate(timeout=120)
    assert job.returncode != 0
    assert "SIGUSR1" in err and "global_step=" not in out, err


def test_python_fit_restarts_its_forked_ranks(start, tmp_path, uninterrupted):
    # ddpspawn_run's path: the ranks are forked from the Python process, and
    # restarted from it.
    train, want, want_metrics = uninterrupted
    root = tmp_path / "logs"
    script = tmp_path / "fit.py"
    script.write_text(
        "import sys, ddpspawn\n"
        f"r = ddpspawn.fit({MODEL!r}, {str(train)!r}, nprocs=2, max_epochs=3, batch_size=4,\n"
        "                 seed=7, optimizer='adam', lr=0.01, checkpoint_every_n_steps=7,\n"
        f"                 log_every_n_steps=1, progress=False, default_root_dir={str(root)!r},\n"
        "                 max_restarts=1)\n"
        "print('global_step=%d' % r.global_step)\n"
        "print('checkpoint=' + r.checkpoint)\n"
        "print('restarts=' + r.values['restarts'])\n")
    import sys
    job = start([sys.executable, str(script)],
                env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)))
    wait_for_steps(job, root, 200)
    # Forked ranks show the environment Python was started with in /proc, so
    # rank 1 is the last child forked (after the run directory's guard and
    # rank 0).
    children = sorted(int(c) for c in
                      Path(f"/proc/{job.pid}/task/{job.pid}/children").read_text().split())
    assert len(children) == 3, children
    os.kill(children[-1], signal.SIGKILL)
    out, err = job.communicate(timeout=120)
    assert job.returncode == 0, err
    got = parse(out)
    assert got["restarts"] == "1" and got["global_step"] == "750"
    assert "ddpspawn: restart 1 of 1: rank 1 (pid" in err, err
    assert logged_steps(root).count(1) == 1
    assert evaluate(got["checkpoint"], train, MODEL) == want_metrics
