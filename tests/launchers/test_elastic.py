"""--min-ranks (elastic fit): a rank SIGKILLed mid-training is dropped, the
others form a new group, continue from their last in-memory commit on fewer
ranks (no process restarts, nothing read from disk) and end with the weights of
a clean run that followed the same membership schedule; with --max-restarts the
launcher starts the lost rank again, and it rejoins at a commit. Below
--min-ranks the job fails naming every rank it lost, and the first survivor
writes the last commit to disk, which --resume-from continues."""

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import List, Tuple

import pytest

from test_restarts import logged_steps
from test_torchrun import CLI, children, evaluate, parse, rank_pid, write_csv

MODEL = "mlp:4,64,3"
COMMIT_EVERY = 10


def fit_args(train: Path, root: Path, nproc: int = 4) -> List[str]:
    # 4 ranks x batch 4 over 2000 samples: 125 steps an epoch.
    return [str(CLI), "fit", "--model", MODEL, "--train", str(train), "--max-epochs", "2",
            "--batch-size", "4", "--seed", "7", "--optimizer", "adam", "--lr", "0.01",
            "--nproc-per-node", str(nproc), "--log-every-n-steps", "1", "--progress", "false",
            "--default-root-dir", str(root)]


def elastic(train: Path, root: Path, min_ranks: int, nproc: int = 4,
            extra: Tuple[str, ...] = ()) -> subprocess.Popen:
    return subprocess.Popen(
        fit_args(train, root, nproc) + list(extra) + ["--min-ranks", str(min_ranks),
                                        "--elastic-commit-every-n-steps", str(COMMIT_EVERY),
                                        # Should the survivors' new group not form, a failure
                                        # within the test's time, not a hang.
                                        "--timeout", "30"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def stop(process: subprocess.Popen) -> str:
    """Stops a job the test gives up on with SIGTERM, which the launcher
    passes to its ranks before it removes its run directory and shared
    memory (a job left running would be SIGKILLed whole when Bazel's sandbox
    ends, leaving them behind); returns its stderr."""
    process.terminate()
    return process.communicate(timeout=60)[1]


def finish(process: subprocess.Popen, timeout: float = 180):
    try:
        return process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        pytest.fail(f"the job did not end within {timeout} s:\n{stop(process)[-3000:]}")


def wait_for_steps(process: subprocess.Popen, root: Path, count: int) -> None:
    deadline = time.monotonic() + 90
    while len(logged_steps(root)) < count:
        assert process.poll() is None, process.communicate()
        if time.monotonic() >= deadline:
            pytest.fail(f"{len(logged_steps(root))} steps logged:\n{stop(process)[-3000:]}")
        time.sleep(0.005)


@pytest.fixture(scope="module")
def train(tmp_path_factory) -> Path:
    return write_csv(tmp_path_factory.mktemp("data") / "train.csv", rows=2000)


@pytest.mark.parametrize("rank", [2, 0])
def test_a_killed_rank_is_dropped_and_the_rest_end_as_a_clean_run_of_that_schedule(
        tmp_path, train, rank):
    root = tmp_path / "elastic"
    job = elastic(train, root, min_ranks=2)
    wait_for_steps(job, root, 45)
    victim = rank_pid(job.pid, rank)
    os.kill(victim, signal.SIGKILL)
    out, err = finish(job)
    assert job.returncode == 0, err
    got = parse(out)
    assert (got["elastic.world_size"], got["elastic.changes"]) == ("3", "1"), out
    assert (got["elastic.change1.left"], got["elastic.change1.world_size"]) == (str(rank), "3")
    resumed = int(got["elastic.change1.resumed_step"])
    rerun = int(got["elastic.change1.steps_rerun"])
    # The last commit, and at most one commit interval of steps lost.
    assert resumed >= 40 and resumed % COMMIT_EVERY == 0, resumed
    assert 0 <= rerun <= COMMIT_EVERY, rerun
    assert f"ddpspawn: lost rank {rank} (pid {victim}) was killed by signal SIGKILL" in err, err
    assert "3 of 4 ranks go on (min_ranks 2)" in err, err
    assert (f"ddpspawn: elastic change 1: 3 ranks go on from the in-memory commit of step "
            f"{resumed} ({rerun} steps re-run)") in err, err
    # The steps after the commit that were lost were logged twice: by the 4
    # ranks, then by the 3 (none when the kill came right after a commit).
    steps = logged_steps(root)
    assert steps.count(1) == 1, steps[:5]
    assert steps.count(resumed + 1) == (2 if rerun > 0 else 1), steps[resumed - 2:resumed + 3]

    # The clean run of the same schedule: 4 ranks to step `resumed` (a
    # checkpoint), then 3 ranks from it, which deal the rest of the epoch.
    reference = tmp_path / "reference"
    first = subprocess.run(fit_args(train, reference) + ["--max-steps", str(resumed)],
                           capture_output=True, text=True, timeout=120)
    assert first.returncode == 0, first.stderr
    second = subprocess.run(
        fit_args(train, reference, nproc=3) + ["--resume-from", parse(first.stdout)["checkpoint"]],
        capture_output=True, text=True, timeout=120)
    assert second.returncode == 0, second.stderr
    want = parse(second.stdout)
    # 125 steps of 4 ranks an epoch; after the change the rest of the first
    # epoch on 3, then a second epoch of 167.
    assert got["global_step"] == want["global_step"]
    assert int(got["global_step"]) > 250
    # Bit-identical weights: their loss on the training set agrees to every
    # digit.
    assert evaluate(got["checkpoint"], train, MODEL) == evaluate(want["checkpoint"], train, MODEL)


def run_fit(args: List[str]) -> dict:
    run = subprocess.run(args, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    return parse(run.stdout)


def changes(got: dict) -> List[dict]:
    """The result's elastic.changeK.* keys, one dict a change, in order."""
    found = sorted({int(key.split(".")[1][len("change"):]) for key in got
                    if key.startswith("elastic.change") and key.count(".") == 2})
    return [{field: got[f"elastic.change{k}.{field}"] for field in
             ("left", "joined", "world_size", "resumed_step", "steps_rerun")} for k in found]


def test_a_lost_rank_started_again_rejoins_at_a_commit_as_a_clean_run_of_that_schedule(
        tmp_path, train):
    root = tmp_path / "elastic"
    job = elastic(train, root, min_ranks=2, extra=("--max-restarts", "1"))
    wait_for_steps(job, root, 45)
    victim = rank_pid(job.pid, 1)
    os.kill(victim, signal.SIGKILL)
    out, err = finish(job)
    assert job.returncode == 0, err
    got = parse(out)
    assert (got["elastic.world_size"], got["elastic.changes"]) == ("4", "2"), out + err
    taken = changes(got)
    # Either the survivors went on on 3 ranks and took the replacement in at
    # a later commit, or (the replacement ready before they had re-formed)
    # they took the loss and the replacement in one change.
    if len(taken) == 2:
        assert [(c["left"], c["joined"], c["world_size"]) for c in taken] == [
            ("1", "", "3"), ("", "1", "4")], out
        assert taken[1]["steps_rerun"] == "0", out
        lost_at, back_at = int(taken[0]["resumed_step"]), int(taken[1]["resumed_step"])
        # Taken in at a commit after the one the 3 ranks resumed from.
        assert back_at > lost_at and back_at % COMMIT_EVERY == 0, (lost_at, back_at)
    else:
        assert [(c["left"], c["joined"], c["world_size"]) for c in taken] == [("1", "1", "4")], out
    replacement = re.search(r"ddpspawn: started rank 1 again \(pid (\d+); replacement 1 of "
                            r"max_restarts 1\); it joins the others at their next commit", err)
    assert replacement, err
    assert int(replacement.group(1)) != victim
    assert (f"ddpspawn: rank 1 (pid {replacement.group(1)}) is ready; 4 of 4 ranks go on from "
            "the next commit") in err, err
    assert (f"4 ranks with rank 1 started again go on from the in-memory commit of step "
            f"{taken[-1]['resumed_step']} ({taken[-1]['steps_rerun']} steps re-run)") in err, err

    # The clean run of the same schedule: 4 ranks to the first change's
    # commit, then each change's ranks from the commit before to the next,
    # each resuming the one before.
    schedule = [(4, int(taken[0]["resumed_step"]))] + [
        (int(c["world_size"]), int(n["resumed_step"])) for c, n in zip(taken, taken[1:])]
    checkpoint = None
    for i, (nproc, until) in enumerate(schedule):
        resume = ["--resume-from", checkpoint] if checkpoint else []
        checkpoint = run_fit(fit_args(train, tmp_path / f"r{i}", nproc=nproc) + resume +
                             ["--max-steps", str(until)])["checkpoint"]
    want = run_fit(fit_args(train, tmp_path / "last") + ["--resume-from", checkpoint])
    assert got["global_step"] == want["global_step"]
    assert evaluate(got["checkpoint"], train, MODEL) == evaluate(want["checkpoint"], train, MODEL)


SENTINEL = 77.0  # no feature of write_csv's rows (all in [0, 1)) is this


def spinning_model(path: Path) -> Path:
    """A TorchScript classifier for write_csv's data whose training step spins
    for good, outside any collective, on a batch holding two SENTINEL rows."""
    torch = pytest.importorskip("torch")
    from typing import List

    class SpinsOnTwoSentinels(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.net = torch.nn.Sequential(torch.nn.Linear(4, 64), torch.nn.ReLU(),
                                           torch.nn.Linear(64, 3))

        def forward(self, x):
            return self.net(x)

        @torch.jit.export
        def training_step(self, batch: List[torch.Tensor], batch_idx: int) -> torch.Tensor:
            x = batch[0]
            if int((x[:, 0] == 77.0).sum()) >= 2:
                spins = 0
                while spins >= 0:  # int64: 9e18 rounds
                    spins += 1
            return torch.nn.functional.cross_entropy(self.forward(x), batch[1].reshape(-1).long())

    torch.manual_seed(0)
    torch.jit.script(SpinsOnTwoSentinels()).save(str(path))
    return path


def test_a_rank_that_runs_but_never_arrives_is_dropped_after_the_timeout(tmp_path):
    # Rank 2 spins in its own training step (running, not stopped: a bug or
    # a deadlock of its own): the others' collective times out, they ask the
    # launcher, which finds it outside any collective while they waited in
    # one, kills it and drops it. The two rows that make it spin are its
    # batch of step 45 on 4 ranks (positions q and q + 4 of the epoch's
    # order); dealt again on 3 ranks from the commit at step 40 on, they go
    # to two ranks (4 positions apart is 1 apart modulo 3), so nobody spins
    # again.
    torch = pytest.importorskip("torch")
    order = list(torch.utils.data.DistributedSampler(range(2000), num_replicas=1, rank=0,
                                                     shuffle=True, seed=7))
    q = 16 * 45 + 2
    train = write_csv(tmp_path / "train.csv", rows=2000)
    rows = train.read_text().splitlines()
    for index in (order[q], order[q + 4]):
        rows[index] = ",".join([f"{SENTINEL:.6f}"] + rows[index].split(",")[1:])
    train.write_text("\n".join(rows) + "\n")
    args = fit_args(train, tmp_path / "elastic")
    args[args.index("--model") + 1] = str(spinning_model(tmp_path / "spins.pt"))
    job = subprocess.Popen(
        args + ["--min-ranks", "2", "--elastic-commit-every-n-steps", str(COMMIT_EVERY),
                "--timeout", "2"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out, err = finish(job)
    assert job.returncode == 0, err
    got = parse(out)
    assert (got["elastic.world_size"], got["elastic.change1.left"]) == ("3", "2"), out
    lost = next(line for line in err.splitlines() if line.startswith("ddpspawn: lost rank"))
    assert lost.startswith("ddpspawn: lost rank 2 (pid "), err
    assert "never reached call #" in lost and "running outside any collective" in lost, err
    assert lost.endswith("the launcher killed it; 3 of 4 ranks go on (min_ranks 2)"), err


def test_a_stopped_rank_is_named_killed_and_dropped_after_the_timeout(tmp_path, train):
    # SIGSTOP: nothing ends, the others wait in their collective until
    # --timeout, then ask the launcher, which finds the rank they wait for
    # (its process is stopped), kills it and drops it.
    root = tmp_path / "elastic"
    job = subprocess.Popen(
        fit_args(train, root) + ["--min-ranks", "2", "--timeout", "2"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    wait_for_steps(job, root, 45)
    victim = rank_pid(job.pid, 1)
    os.kill(victim, signal.SIGSTOP)
    out, err = finish(job)
    assert job.returncode == 0, err
    got = parse(out)
    assert (got["elastic.world_size"], got["elastic.change1.left"]) == ("3", "1"), out
    # Named as stopped, or as the one that never reached the call the others
    # waited in (which it also was), whichever the launcher saw first.
    lost = next(line for line in err.splitlines() if line.startswith("ddpspawn: lost rank"))
    assert lost.startswith(f"ddpspawn: lost rank 1 (pid {victim}) "), err
    assert "when the others' collective timed out" in lost and "stopped (SIGSTOP" in lost, err
    assert lost.endswith("the launcher killed it; 3 of 4 ranks go on (min_ranks 2)"), err


def test_below_min_ranks_the_job_fails_naming_every_rank_it_lost(tmp_path, train):
    root = tmp_path / "elastic"
    job = elastic(train, root, min_ranks=3)
    wait_for_steps(job, root, 25)
    first, second = rank_pid(job.pid, 3), rank_pid(job.pid, 1)
    os.kill(first, signal.SIGKILL)
    # The others went on without it: more steps logged after the change.
    logged = len(logged_steps(root))
    wait_for_steps(job, root, logged + 30)
    os.kill(second, signal.SIGKILL)
    out, err = finish(job)
    assert job.returncode != 0, out
    assert "3 of 4 ranks go on (min_ranks 3)" in err, err
    assert (f"(min_ranks 3: the job lost, in order: rank 3 (pid {first}) was killed by signal "
            f"SIGKILL (Killed); rank 1 (pid {second}) was killed by signal SIGKILL") in err, err
    # The first survivor wrote the last commit, which --resume-from continues.
    last = root / "checkpoints" / "last_commit.ckpt"
    written = re.search(r"rank 0 wrote the last commit \(step (\d+)\) to (\S+): --resume-from "
                        r"\S+ continues the fit", err)
    assert written and written.group(2) == str(last), err
    step = int(written.group(1))
    resumed = re.search(r"elastic change 1: 3 ranks go on from the in-memory commit of step "
                        r"(\d+)", err)
    assert resumed, err
    # Taken on 3 ranks after the change, at a commit.
    assert step > int(resumed.group(1)) and step % COMMIT_EVERY == 0, (step, resumed.group(1))
    # The same weights as a clean run of that schedule to that step: 4 ranks
    # to the change's commit, then 3.
    first_part = run_fit(fit_args(train, tmp_path / "r0") + ["--max-steps", resumed.group(1)])
    want = run_fit(fit_args(train, tmp_path / "r1", nproc=3) +
                   ["--resume-from", first_part["checkpoint"], "--max-steps", str(step)])
    assert evaluate(str(last), train, MODEL) == evaluate(want["checkpoint"], train, MODEL)
    # And it goes on from there, on as many ranks as are at hand.
    went_on = run_fit(fit_args(train, tmp_path / "r2", nproc=2) +
                      ["--resume-from", str(last), "--max-steps", str(step + 3)])
    assert went_on["global_step"] == str(step + 3)


def test_a_stop_signal_ends_the_wait_for_the_last_commit(tmp_path, train):
    # Below min_ranks the launcher waits (up to 60 s) for the first survivor
    # to write its last commit. Here it cannot (stopped); SIGINT to the
    # launcher ends that wait at once, and the job's error says so.
    root = tmp_path / "elastic"
    job = elastic(train, root, min_ranks=3, extra=("--start-method", "spawn"))
    wait_for_steps(job, root, 25)
    writer = rank_pid(job.pid, 0)
    environ = Path(f"/proc/{writer}/environ").read_bytes().split(b"\0")
    run_dir = next(v for v in environ if v.startswith(b"DDPSPAWN_RUN_DIR="))
    membership = Path(run_dir.split(b"=", 1)[1].decode()) / "membership"
    os.kill(writer, signal.SIGSTOP)
    for rank in (2, 3):
        os.kill(rank_pid(job.pid, rank), signal.SIGKILL)
    deadline = time.monotonic() + 30
    # The launcher published the change that ends the job: it now waits.
    while "ends_job=1" not in (membership.read_text() if membership.exists() else ""):
        assert time.monotonic() < deadline and job.poll() is None, stop(job)[-3000:]
        time.sleep(0.01)
    job.send_signal(signal.SIGINT)
    out, err = finish(job, timeout=60)
    assert job.returncode != 0, out
    assert ("rank 0 did not write the last commit before the launcher received SIGINT "
            "(Interrupt), which ended the wait") in err, err


def test_a_rank_lost_while_the_survivors_form_their_group_is_dropped_in_turn(tmp_path, train):
    # Rank 2 is killed as soon as the launcher has published rank 1's loss:
    # the survivors are forming (or about to form) a group that counts rank
    # 2 in. The launcher's word that the group lost a member stops them
    # waiting for it; without it they would wait out --timeout (far past the
    # test's limit) before taking the next change.
    root = tmp_path / "elastic"
    err_path = tmp_path / "err.txt"
    with open(err_path, "w") as err_file:
        job = subprocess.Popen(
            fit_args(train, root) + ["--min-ranks", "2", "--elastic-commit-every-n-steps",
                                     str(COMMIT_EVERY), "--timeout", "900"],
            stdout=subprocess.PIPE, stderr=err_file, text=True)
    wait_for_steps(job, root, 45)
    first, second = rank_pid(job.pid, 1), rank_pid(job.pid, 2)
    os.kill(first, signal.SIGKILL)
    deadline = time.monotonic() + 60
    while "ddpspawn: lost rank 1" not in err_path.read_text():
        assert time.monotonic() < deadline and job.poll() is None, err_path.read_text()
        time.sleep(0.001)
    os.kill(second, signal.SIGKILL)
    out, _ = finish(job, timeout=120)
    err = err_path.read_text()
    assert job.returncode == 0, err
    got = parse(out)
    assert (got["elastic.world_size"], got["elastic.changes"]) == ("2", "2"), out + err
    # Ranks 1 and 2 left, in two changes or (the first group abandoned before
    # it formed) in one.
    left = [r for c in changes(got) for r in c["left"].split(",") if r]
    assert sorted(left) == ["1", "2"], out


@pytest.mark.parametrize("fault", ["every rank", "the forkserver"])
def test_losing_every_rank_at_once_fails_the_job_naming_the_cause(tmp_path, train, fault):
    # Every rank gone within the loss window, or the forkserver that took
    # them all along: no survivor to go on, and the job must not end as if
    # it had succeeded.
    root = tmp_path / "elastic"
    job = elastic(train, root, min_ranks=2)
    wait_for_steps(job, root, 45)
    server = next(child for child in children(job.pid) if children(child))
    if fault == "every rank":
        for rank in children(server):
            os.kill(rank, signal.SIGKILL)
    else:
        os.kill(server, signal.SIGKILL)
    out, err = finish(job)
    assert job.returncode == 1, out + err
    if fault == "every rank":
        assert "(min_ranks 2: the job lost, in order: rank " in err, err
    else:
        assert (f"ddpspawn: error: the forkserver that started the ranks (pid {server}) died, "
                "and took them with it") in err, err


@pytest.mark.parametrize("flags, message", [
    (["--min-ranks", "5"], "min_ranks 5 is more than the job's nproc_per_node 4"),
    (["--min-ranks", "2", "--sharding-strategy", "shard_grad_op"],
     "min_ranks (elastic fit) does not go with sharded training"),
    (["--min-ranks", "2", "--limit-train-batches", "5"],
     "min_ranks (elastic fit) does not go with limit_train_batches"),
    (["--elastic-commit-every-n-steps", "5"],
     "elastic_commit_every_n_steps is for an elastic fit; set min_ranks too"),
])
def test_what_elastic_fit_cannot_do_yet_is_refused_before_any_rank_starts(
        tmp_path, train, flags, message):
    run = subprocess.run(fit_args(train, tmp_path) + flags, capture_output=True, text=True,
                         timeout=60)
    assert run.returncode != 0
    assert message in run.stderr, run.stderr


PYTHON_FIT = """
import sys, ddpspawn
result = ddpspawn.fit("{model}", sys.argv[1], nprocs=4, max_epochs=2, batch_size=4, seed=7,
                      optimizer="adam", lr=0.01, log_every_n_steps=1, progress=False,
                      default_root_dir=sys.argv[2], min_ranks=2, timeout=30,
                      max_restarts={max_restarts})
print("global_step=%d" % result.global_step)
for key, value in result.values.items():
    if key.startswith("elastic."):
        print("%s=%s" % (key, value))
"""


@pytest.mark.parametrize("max_restarts", [0, 1])
def test_python_fit_goes_on_without_a_killed_rank(tmp_path, train, max_restarts):
    # ddpspawn.fit forks its ranks from the Python process (ddpspawn_run):
    # the same option, the same survivors; with max_restarts the launcher
    # forks the lost rank again from there, and it rejoins.
    root = tmp_path / "python"
    env = dict(os.environ, PYTHONPATH=str(Path.cwd() / "bindings" / "python"))
    job = subprocess.Popen(
        [sys.executable, "-c", PYTHON_FIT.format(model=MODEL, max_restarts=max_restarts),
         str(train), str(root)], env=env,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    wait_for_steps(job, root, 45)
    ranks = sorted(int(pid) for pid in
                   Path(f"/proc/{job.pid}/task/{job.pid}/children").read_text().split())
    # Forked in rank order after the run directory's guardian: the last is rank 3.
    os.kill(ranks[-1], signal.SIGKILL)
    out, err = finish(job)
    assert job.returncode == 0, err
    got = parse(out)
    # Rank 3 left (and, started again, joined) in some change: the survivors
    # may take its loss and its return in one.
    taken = changes(got)
    left = [c["left"] for c in taken]
    joined = [c["joined"] for c in taken]
    want = ("3", ["3"], []) if max_restarts == 0 else ("4", ["3"], ["3"])
    assert (got["elastic.world_size"], [x for x in left if x],
            [x for x in joined if x]) == want, out + err
    # 125 steps of 4 ranks an epoch: a stretch on 3 ranks deals the rest of
    # the epoch in more steps; a loss and return taken in one change re-runs
    # the steps since the commit on 4 ranks, so none are added.
    on_three = any(c["world_size"] == "3" for c in taken)
    assert (int(got["global_step"]) > 250) == on_three, out + err
    assert int(got["global_step"]) >= 250, out + err
    assert f"ddpspawn: lost rank 3 (pid {ranks[-1]}) was killed by signal SIGKILL" in err, err
