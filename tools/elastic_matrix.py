#!/usr/bin/env python3
"""Measures what an elastic fit (--min-ranks) survives and prints docs/reliability.md's elastic rows.

Every row is one fault injected into real runs of the CLI: 4 ranks (forkserver), mlp:4,64,3 on
2000 generated rows, batch 4 per rank, Adam, 4 epochs (500 steps on 4 ranks), a step logged each
step, a commit every 10 steps (--elastic-commit-every-n-steps 10), --min-ranks 2, the fault at
step 45. For each row, over --trials runs: the launcher's exit, the ranks it ended with and the
membership changes (the result's elastic.* keys), the time from the fault to the first step the
survivors logged after rank 0 announced the change (min / median / max), the steps re-run (the
sum of the result's steps_rerun), and what was left: the job's /dev/shm segments, run directories
in the row's private TMPDIR and processes of the job alive after the launcher. The last row is
today's restart path on the same run (--max-restarts 1 --checkpoint-every-n-steps 10 without
--min-ranks), for comparison.

How to run (from a clone, after `bazel build //tools:ddpspawn`; about 2 minutes on 2 cores):

    tools/elastic_matrix.py > elastic.md     # the Markdown table on stdout, progress on stderr
    tools/elastic_matrix.py --only 1,5 --trials 1

DDPSPAWN_BIN overrides the binary (default: bazel-bin/tools/ddpspawn of this clone).
"""

import argparse
import os
import random
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

from fault_matrix import BIN, alive, descendants, is_forkserver, shm_names

FAULT_STEP = 45
COMMIT_EVERY = 10
WAIT_S = 120.0  # a run still going this long after its start is stopped and counted as hung


def log(*args):
    print("elastic_matrix:", *args, file=sys.stderr, flush=True)


def write_data(path):
    rng = random.Random(7)
    with open(path, "w") as f:
        for _ in range(2000):
            x = [rng.uniform(-1, 1) for _ in range(4)]
            s = x[0] + x[1]
            f.write(",".join(f"{v:.5f}" for v in x) + f",{0 if s < -0.3 else 1 if s < 0.3 else 2}\n")


class Run:
    """One `ddpspawn fit` of the row's fault, in a private TMPDIR."""

    def __init__(self, work, data, extra):
        self.dir = tempfile.mkdtemp(dir=work)
        self.tmp = os.path.join(self.dir, "tmp")
        os.mkdir(self.tmp)
        self.root = os.path.join(self.dir, "root")
        self.err_path = os.path.join(self.dir, "err.txt")
        self.shm_before = shm_names()
        args = [BIN, "fit", "--model", "mlp:4,64,3", "--train", data, "--max-epochs", "4",
                "--batch-size", "4", "--seed", "7", "--optimizer", "adam", "--lr", "0.01",
                "--nproc-per-node", "4", "--log-every-n-steps", "1", "--progress", "false",
                "--default-root-dir", self.root] + extra
        self.out = open(os.path.join(self.dir, "out.txt"), "w+")
        self.err = open(self.err_path, "w")
        self.proc = subprocess.Popen(args, stdout=self.out, stderr=self.err,
                                     env=dict(os.environ, TMPDIR=self.tmp))
        self.seen = {}  # pid -> starttime of every process of the job seen

    def steps(self):
        try:
            with open(os.path.join(self.root, "metrics.csv")) as f:
                return sum(1 for line in f if ",train_loss," in line)
        except OSError:
            return 0

    def stderr(self):
        with open(self.err_path) as f:
            return f.read()

    def processes(self):
        found = descendants(self.proc.pid)
        for pid, (start, _, _) in found.items():
            self.seen[pid] = start
        return found

    def rank_pids(self, rank):
        """[the pid of `rank` as launched]: the forkserver's children, forked in rank order (their
        /proc environment is the server's, so it cannot tell)."""
        server = self.forkserver()
        ranks = sorted(pid for pid, (_, ppid, _) in self.processes().items() if ppid == server)
        return ranks[rank:rank + 1]

    def forkserver(self):
        return next((pid for pid in self.processes() if is_forkserver(pid)), None)

    def wait_for(self, done, what):
        deadline = time.monotonic() + WAIT_S
        while not done():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"{what}: not seen\n{self.stderr()[-2000:]}")
            self.processes()
            time.sleep(0.001)

    def next_step_after(self, announced):
        """Seconds from now to the first step logged once stderr holds `announced`."""
        start = time.monotonic()
        self.wait_for(lambda: announced in self.stderr(), announced)
        logged = self.steps()
        self.wait_for(lambda: self.steps() > logged, "a step after " + announced)
        return time.monotonic() - start

    def finish(self):
        try:
            self.proc.wait(timeout=WAIT_S)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            return "hung", {}, "hung"
        time.sleep(1.0)  # what the launcher's exit leaves takes a moment to go
        left = []
        shm = [n for n in shm_names() - self.shm_before if n.startswith("ddpspawn")]
        if shm:
            left.append(f"{len(shm)} /dev/shm segments")
        if os.listdir(self.tmp):
            left.append(f"{len(os.listdir(self.tmp))} run directories")
        alive_now = [pid for pid, start in self.seen.items() if alive(pid, start)]
        if alive_now:
            left.append(f"{len(alive_now)} processes")
        self.out.seek(0)
        result = dict(line.split("=", 1) for line in self.out.read().splitlines() if "=" in line)
        exit_text = "0" if self.proc.returncode == 0 else f"{self.proc.returncode}"
        return exit_text, result, ", ".join(left) or "nothing"


ELASTIC = ["--min-ranks", "2", "--elastic-commit-every-n-steps", str(COMMIT_EVERY)]


def kill_one(run):
    victim = run.rank_pids(1)[0]
    os.kill(victim, signal.SIGKILL)
    return run.next_step_after("ddpspawn: elastic change 1:")


def stop_one(run):
    os.kill(run.rank_pids(1)[0], signal.SIGSTOP)
    return run.next_step_after("ddpspawn: elastic change 1:")


def kill_two(run):
    first, second = run.rank_pids(1)[0], run.rank_pids(2)[0]
    os.kill(first, signal.SIGKILL)
    os.kill(second, signal.SIGKILL)
    return run.next_step_after("ddpspawn: elastic change 1:")


def kill_during_recovery(run):
    first, second = run.rank_pids(1)[0], run.rank_pids(2)[0]
    start = time.monotonic()
    os.kill(first, signal.SIGKILL)
    run.wait_for(lambda: "ddpspawn: lost rank 1" in run.stderr(), "the first loss")
    os.kill(second, signal.SIGKILL)
    return time.monotonic() - start + run.next_step_after("ddpspawn: elastic change 2:")


def replacement_rejoins(run):
    victim = run.rank_pids(1)[0]
    start = time.monotonic()
    os.kill(victim, signal.SIGKILL)
    run.next_step_after("ddpspawn: elastic change 1:")
    run.wait_for(lambda: "ddpspawn: elastic change 2:" in run.stderr(), "the rejoin")
    return time.monotonic() - start


def kill_joining_replacement(run):
    os.kill(run.rank_pids(1)[0], signal.SIGKILL)
    run.wait_for(lambda: "is ready; 4 of 4" in run.stderr(), "the replacement ready")
    replacement = re.search(r"rank 1 \(pid (\d+)\) is ready", run.stderr()).group(1)
    logged = run.steps()
    start = time.monotonic()
    os.kill(int(replacement), signal.SIGKILL)
    run.wait_for(lambda: run.steps() > logged + 1, "a step after the second kill")
    return time.monotonic() - start


def kill_forkserver(run):
    os.kill(run.forkserver(), signal.SIGKILL)
    return None


def kill_below_min_ranks(run):
    victims = [run.rank_pids(r)[0] for r in (1, 2, 3)]
    start = time.monotonic()
    for victim in victims:
        os.kill(victim, signal.SIGKILL)
    deadline = start + WAIT_S
    while run.proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.001)
    took = time.monotonic() - start
    if "rank 0 wrote the last commit" not in run.stderr():
        raise RuntimeError(f"no last commit written:\n{run.stderr()[-2000:]}")
    return took


def restart_kill_one(run):
    os.kill(run.rank_pids(1)[0], signal.SIGKILL)
    return run.next_step_after("ddpspawn: continuing from")


ROWS = [
    (1, "SIGKILL rank 1 of 4", ELASTIC + ["--timeout", "30"], kill_one,
     "fault → the survivors' next step"),
    (2, "SIGSTOP rank 1 of 4, `--timeout 2`", ELASTIC + ["--timeout", "2"], stop_one,
     "fault → the survivors' next step"),
    (3, "SIGKILL ranks 1 and 2 at once", ELASTIC + ["--timeout", "30"], kill_two,
     "fault → the survivors' next step"),
    (4, "SIGKILL rank 1, then rank 2 once the launcher dropped rank 1 (during the recovery)",
     ELASTIC + ["--timeout", "30"], kill_during_recovery, "first fault → the survivors' next step"),
    (5, "SIGKILL rank 1 with `--max-restarts 1`: started again, it rejoins",
     ELASTIC + ["--max-restarts", "1", "--timeout", "30"], replacement_rejoins,
     "fault → 4 ranks again"),
    (6, "SIGKILL rank 1 with `--max-restarts 1`, then its replacement once it is ready",
     ELASTIC + ["--max-restarts", "1", "--timeout", "30"], kill_joining_replacement,
     "second kill → the next step"),
    (7, "SIGKILL the forkserver", ELASTIC + ["--timeout", "30"], kill_forkserver, ""),
    (8, "today's restart: `--max-restarts 1 --checkpoint-every-n-steps 10`, SIGKILL rank 1",
     ["--max-restarts", "1", "--checkpoint-every-n-steps", "10", "--timeout", "30"],
     restart_kill_one, "fault → the restarted ranks' next step"),
    (9, "SIGKILL ranks 1, 2 and 3 at once: below `--min-ranks 2`, rank 0 writes its last commit",
     ELASTIC + ["--timeout", "30"], kill_below_min_ranks,
     "fault → the job's exit, the commit written"),
]


def seconds(values):
    if not values:
        return ""
    values = sorted(values)
    if len(values) == 1:
        return f"{values[0]:.2f} s"
    return f"{values[0]:.2f} / {statistics.median(values):.2f} / {values[-1]:.2f} s"


def summary(results, key):
    seen = sorted({r.get(key, "—") for r in results})
    return ", ".join(seen)


def rerun(result):
    return sum(int(v) for k, v in result.items() if k.endswith(".steps_rerun") or k == "steps_rerun")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="", help="row numbers, comma-separated")
    parser.add_argument("--trials", type=int, default=3)
    args = parser.parse_args()
    only = {int(n) for n in args.only.split(",") if n}
    work = tempfile.mkdtemp(prefix="elastic_matrix.")
    data = os.path.join(work, "train.csv")
    write_data(data)
    print("| # | fault | exit | ranks at the end, changes | time (min / median / max) | "
          "steps re-run | left behind |")
    print("|---|---|---|---|---|---|---|")
    try:
        for number, fault, extra, inject, measured in ROWS:
            if only and number not in only:
                continue
            times, results, exits, lefts = [], [], set(), set()
            for trial in range(args.trials):
                log(f"row {number}, trial {trial + 1}")
                run = Run(work, data, extra)
                try:
                    run.wait_for(lambda: run.steps() >= FAULT_STEP, f"step {FAULT_STEP}")
                    took = inject(run)
                    if took is not None:
                        times.append(took)
                except RuntimeError as e:
                    log(f"row {number}: {e}")
                exit_text, result, left = run.finish()
                exits.add(exit_text)
                results.append(result)
                lefts.add(left)
                if exit_text != "0":
                    log(f"row {number}: exit {exit_text}: {run.stderr()[-600:]}")
            ranks = f"{summary(results, 'elastic.world_size')}, {summary(results, 'elastic.changes')}"
            reruns = sorted({rerun(r) for r in results if r})
            time_text = f"{measured}: {seconds(times)}" if measured else "—"
            print(f"| {number} | {fault} | {', '.join(sorted(exits))} | {ranks} | {time_text} | "
                  f"{', '.join(map(str, reruns)) or '—'} | {', '.join(sorted(lefts))} |",
                  flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
