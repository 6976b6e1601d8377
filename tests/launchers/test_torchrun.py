"""ddpspawn started by torchrun (torch 2.11's): the CLI and Python's fit join
torchrun's job as its ranks instead of launching trainings of their own, refuse
a shape that disagrees with it, and a restarted attempt forms its group; a fit
that torchrun restarts continues from the checkpoint its first attempt wrote
(and not from an older job's)."""

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, List, Optional

import pytest

REPO = Path.cwd()
CLI = REPO / "tools" / "ddpspawn"
TEST_WORKER = REPO / "tests" / "core" / "test_worker"
TORCHRUN = [sys.executable, "-m", "torch.distributed.run"]


def children(pid: int) -> List[int]:
    try:
        return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:  # gone meanwhile
        return []


def parent_of(pid: int) -> int:
    stat = Path(f"/proc/{pid}/stat").read_text()
    return int(stat[stat.rindex(")") + 2:].split()[1])


def rank_pid(launcher: int, rank: int, local_rank: Optional[int] = None) -> int:
    """The pid of RANK `rank` (local rank `local_rank`, default `rank`) of a ddpspawn launcher."""
    for child in children(launcher):  # spawned ranks
        try:
            if f"\0RANK={rank}\0".encode() in Path(f"/proc/{child}/environ").read_bytes():
                return child
        except OSError:  # gone meanwhile
            continue
    # A forkserver's ranks show the server's environment in /proc (it set
    # theirs after the fork); they are its children, forked in rank order.
    for child in children(launcher):
        ranks = sorted(children(child))
        local = rank if local_rank is None else local_rank
        if len(ranks) > local:
            return ranks[local]
    raise AssertionError(f"no rank {rank} under launcher {launcher}")


def write_csv(path: Path, rows: int = 96) -> Path:
    """Four features and a class label in {0, 1, 2} that the first feature
    decides, the same every time."""
    lines = []
    for i in range(rows):
        features = [((i * 7 + j * 13) % 17) / 17.0 for j in range(4)]
        lines.append(",".join(f"{x:.6f}" for x in features) + f",{int(features[0] * 3)}")
    path.write_text("\n".join(lines) + "\n")
    return path


def torchrun(*args: str, nproc: int = 2, extra: List[str] = [], timeout: float = 120):
    """torchrun --nproc-per-node nproc on a free port of its own."""
    command = TORCHRUN + [
        "--nproc-per-node", str(nproc), "--rdzv-backend", "c10d",
        "--rdzv-endpoint", "127.0.0.1:0", *extra, *args,
    ]
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout)


def parse(text: str) -> Dict[str, str]:
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line)


FIT = ["fit", "--model", "mlp:4,8,3", "--max-epochs", "2", "--batch-size", "8", "--seed", "3",
       "--lr", "0.3"]


def test_cli_under_torchrun_trains_one_job_like_its_own_launcher(tmp_path):
    train = write_csv(tmp_path / "train.csv")
    own = subprocess.run(
        [str(CLI), *FIT, "--train", str(train), "--nproc-per-node", "2",
         "--default-root-dir", str(tmp_path / "own")],
        capture_output=True, text=True, timeout=120)
    assert own.returncode == 0, own.stderr
    joined = torchrun("--no-python", str(CLI), *FIT, "--train", str(train),
                      "--default-root-dir", str(tmp_path / "torchrun"))
    assert joined.returncode == 0, joined.stderr
    # One result, printed once (by rank 0): two ranks of one job, not two
    # 1-rank trainings (which took 24 steps each instead of 12).
    assert joined.stdout.count("global_step=") == 1, joined.stdout
    got, want = parse(joined.stdout), parse(own.stdout)
    assert got["global_step"] == want["global_step"] == "12"
    for key in ("metric.train_loss", "metric.train_loss_epoch"):
        assert got[key] == want[key], (key, got[key], want[key])
    # The same weights: their loss on the training set agrees to every digit
    # (checkpoint bytes differ run to run: torch's archive has a random id).
    assert evaluate(got["checkpoint"], train) == evaluate(want["checkpoint"], train)


def evaluate(checkpoint: str, data: Path, model: str = "mlp:4,8,3") -> Dict[str, str]:
    """`model`'s test metrics on `data` with the checkpoint's weights."""
    run = subprocess.run(
        [str(CLI), "test", "--model", model, "--checkpoint", checkpoint, "--data", str(data)],
        capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    return parse(run.stdout)


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--nproc-per-node", "3"],
         "job with 2 processes on this node (LOCAL_WORLD_SIZE), but 3 devices/processes"),
        (["--nnodes", "2"], "option nnodes: this process is rank"),
        (["--master-port", "1234"], "option master_port: this process is rank"),
    ],
)
def test_cli_refuses_a_shape_torchrun_did_not_start(tmp_path, flags, message):
    train = write_csv(tmp_path / "train.csv")
    run = torchrun("--no-python", str(CLI), *FIT, "--train", str(train),
                   "--default-root-dir", str(tmp_path), *flags)
    assert run.returncode != 0
    assert message in run.stderr, run.stderr
    # Refused before any rank ran: no checkpoint where fit writes it
    # (<default_root_dir>/checkpoints/last.ckpt, checkpoint_connector.cc LastCheckpointPath),
    # and nothing else of a run (metrics.csv, checkpoints/) beside the data.
    assert not (tmp_path / "checkpoints" / "last.ckpt").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["train.csv"]


def test_python_fit_under_torchrun_joins_and_returns_rank0s_result(tmp_path):
    train = write_csv(tmp_path / "train.csv")
    script = tmp_path / "fit.py"
    script.write_text(
        "import os, sys, ddpspawn\n"
        f"r = ddpspawn.fit('mlp:4,8,3', {str(train)!r}, max_epochs=2, batch_size=8, seed=3, lr=0.3,\n"
        f"                 default_root_dir={str(tmp_path / 'py')!r})\n"
        f"with open({str(tmp_path)!r} + '/rank' + os.environ['RANK'], 'w') as out:\n"
        "    out.write(f\"{r.global_step} {r.metrics['train_loss_epoch']}\")\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    command = TORCHRUN + ["--nproc-per-node", "2", "--rdzv-backend", "c10d",
                          "--rdzv-endpoint", "127.0.0.1:0", str(script)]
    joined = subprocess.run(command, capture_output=True, text=True, timeout=120, env=env)
    assert joined.returncode == 0, joined.stderr
    import ddpspawn

    own = ddpspawn.fit("mlp:4,8,3", train, max_epochs=2, batch_size=8, seed=3, lr=0.3, nprocs=2,
                       default_root_dir=tmp_path / "own")
    want = f"{own.global_step} {own.metrics['train_loss_epoch']}"
    for rank in (0, 1):
        assert (tmp_path / f"rank{rank}").read_text() == want, joined.stdout


def test_a_restarted_attempt_forms_its_group_every_time():
    # Rank 1 exits after the group formed; torchrun restarts both ranks, whose
    # store (torchrun's agent's) still holds the first attempt's keys.
    for run in range(5):
        result = torchrun("--no-python", str(TEST_WORKER), "elastic", "1",
                          extra=["--max-restarts", "1"])
        assert result.returncode == 0, f"run {run}: {result.stderr[-3000:]}"
        assert sorted(result.stdout.split("\n")[:2]) == [
            "attempt 1 rank 0 sum 6", "attempt 1 rank 1 sum 6"], result.stdout


def logged_steps(root: Path) -> List[int]:
    """The steps of the train_loss rows of the fit's metrics.csv, as logged."""
    try:
        rows = (root / "metrics.csv").read_text().splitlines()[1:]
    except FileNotFoundError:
        return []
    return [int(row.split(",")[1]) for row in rows if ",train_loss," in row]


# 2 ranks x batch 4 over 2000 rows: 250 steps an epoch, 500 in all.
RESTARTED_FIT = ["fit", "--model", "mlp:4,64,3", "--max-epochs", "2", "--batch-size", "4",
                 "--seed", "7", "--optimizer", "adam", "--lr", "0.01", "--log-every-n-steps", "1",
                 "--progress", "false"]


def torchrun_killed_once(train: Path, root: Path, extra: List[str]):
    """torchrun --max-restarts 1 of RESTARTED_FIT; its rank 1 SIGKILLed once 40
    steps are logged. Returns (returncode, stdout, stderr)."""
    command = TORCHRUN + ["--nproc-per-node", "2", "--rdzv-backend", "c10d", "--rdzv-endpoint",
                          "127.0.0.1:0", "--max-restarts", "1", "--no-python", str(CLI),
                          *RESTARTED_FIT, "--train", str(train), "--default-root-dir", str(root),
                          *extra]
    job = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 90
    while len(logged_steps(root)) < 40:
        assert job.poll() is None and time.monotonic() < deadline, job.communicate()
        time.sleep(0.005)
    workers = [pid for pid in children(job.pid)
               if b"\0RANK=1\0" in Path(f"/proc/{pid}/environ").read_bytes()]
    assert len(workers) == 1, workers
    os.kill(workers[0], signal.SIGKILL)
    out, err = job.communicate(timeout=180)
    return job.returncode, out, err


def test_a_fit_torchrun_restarts_continues_from_the_checkpoint_its_first_attempt_wrote(tmp_path):
    train = write_csv(tmp_path / "train.csv", rows=2000)
    root = tmp_path / "torchrun"
    code, out, err = torchrun_killed_once(train, root, ["--checkpoint-every-n-steps", "10"])
    assert code == 0, err[-3000:]
    last = root / "checkpoints" / "last.ckpt"
    continued = re.search(r"ddpspawn: torchrun restarted its workers \(TORCHELASTIC_RESTART_COUNT"
                          r"=1\): continuing from (\S+)", err)
    assert continued and continued.group(1) == str(last), err[-3000:]
    steps = logged_steps(root)
    # Resumed, not started over: step 1 ran once, and at most a checkpoint
    # interval of steps ran twice.
    assert steps.count(1) == 1 and len(steps) - len(set(steps)) <= 10, steps
    want = subprocess.run([str(CLI), *RESTARTED_FIT, "--train", str(train), "--nproc-per-node",
                           "2", "--default-root-dir", str(tmp_path / "own")],
                          capture_output=True, text=True, timeout=120)
    assert want.returncode == 0, want.stderr
    got = parse(out)
    assert got["global_step"] == parse(want.stdout)["global_step"] == "500"
    assert (evaluate(got["checkpoint"], train, "mlp:4,64,3") ==
            evaluate(parse(want.stdout)["checkpoint"], train, "mlp:4,64,3"))


def test_a_torchrun_restart_does_not_continue_from_an_older_jobs_checkpoint(tmp_path):
    # The root holds last.ckpt of a job that ended before this torchrun
    # started; this job's first attempt is killed before it wrote one (no
    # --checkpoint-every-n-steps, killed before the first epoch's end).
    train = write_csv(tmp_path / "train.csv", rows=2000)
    root = tmp_path / "shared_root"
    # Another job: another seed, one epoch.
    older = subprocess.run([str(CLI), *RESTARTED_FIT, "--train", str(train), "--nproc-per-node",
                            "2", "--max-epochs", "1", "--seed", "99", "--default-root-dir",
                            str(root)], capture_output=True, text=True, timeout=120)
    assert older.returncode == 0, older.stderr
    (root / "metrics.csv").unlink()
    time.sleep(1.1)  # the agent's start time is known to the second
    code, out, err = torchrun_killed_once(train, root, [])
    assert code == 0, err[-3000:]
    assert "continuing from" not in err, err[-3000:]
    # Started over: the weights of a clean run of this job, which the older
    # job's checkpoint (another seed) would not give.
    want = subprocess.run([str(CLI), *RESTARTED_FIT, "--train", str(train), "--nproc-per-node",
                           "2", "--default-root-dir", str(tmp_path / "own")],
                          capture_output=True, text=True, timeout=120)
    assert want.returncode == 0, want.stderr
    got = parse(out)
    assert got["global_step"] == "500"
    assert (evaluate(got["checkpoint"], train, "mlp:4,64,3") ==
            evaluate(parse(want.stdout)["checkpoint"], train, "mlp:4,64,3"))
