#!/usr/bin/env python3
"""Measures how `ddpspawn fit` behaves under faults and prints docs/reliability.md's table.

Every cell is one fault injected into a real run of the CLI (2 ranks, mlp:4,16,3 on a small
generated CSV, --progress false), with the spawn, fork and forkserver start methods where the fault
applies: a rank SIGKILLed, a rank SIGSTOPped (--timeout 5), the launcher SIGKILLed, SIGINTed
or SIGTERMed, a rank that raises, the launcher SIGKILLed while checkpoints are being written
(10 kills, each after a random wait, at the first sight of a rank holding a checkpoint's
temporary file open), a
corrupt or truncated checkpoint, non-finite training, bad inputs, and a hostile local user (as
`nobody`: names pre-created in a shared sticky directory, /dev/shm and the run directory
watched during a run). For each cell it measures the launcher's exit status,
the time from the fault to the launcher's exit, the first line(s) of its error, and what was
left behind: run directories (ddpspawn-*) in the cell's private TMPDIR, the job's /dev/shm
segments, processes still alive after the launcher (ranks, the run directory's guardian), and
*.tmp.* files next to the outputs. A cell still running 60 s after its fault counts as hung.

How to run (from a clone, after `bazel build //tools:ddpspawn`; about 4 minutes on 2 cores):

    tools/fault_matrix.py > matrix.md     # the Markdown table on stdout, progress on stderr
    tools/fault_matrix.py --only 1,3,7    # some faults only (numbers as in the table)

DDPSPAWN_BIN overrides the binary (default: bazel-bin/tools/ddpspawn of this clone);
DDPSPAWN_PYTHON is a Python with torch (default: tools/setup's, $DDPSPAWN_VENV/bin/python3),
needed only to script fault 5's TorchScript model. Fault 10 needs root (it acts as `nobody`); without root
its rows say so. Paste the output into docs/reliability.md.
"""

import argparse
import datetime
import glob
import hashlib
import json
import os
import platform
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from typing import Any

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.environ.get("DDPSPAWN_BIN") or os.path.join(REPO, "bazel-bin", "tools", "ddpspawn")
PYTHON = os.environ.get("DDPSPAWN_PYTHON") or os.path.join(
    os.environ.get("DDPSPAWN_VENV") or "/opt/ddpspawn/venv", "bin", "python3")
HANG_S = 60.0  # a launcher still running this long after its fault is a hung cell
SETTLE_S = 5.0  # how long leftovers may take to go after the launcher's exit
METHODS = ("spawn", "fork", "forkserver")


def log(*args):
    print("fault_matrix:", *args, file=sys.stderr, flush=True)


# ---------------------------------------------------------------- processes, via /proc


def proc_stat(pid):
    """(ppid, pgid, state, starttime) of `pid`, or None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            line = f.read()
    except OSError:
        return None
    fields = line[line.rfind(")") + 2:].split()
    return int(fields[1]), int(fields[2]), fields[0], int(fields[19])


def alive(pid, start):
    """True while `pid` is the process that started at `start` and is not a zombie."""
    st = proc_stat(pid)
    return st is not None and st[3] == start and st[2] not in ("Z", "X")


def descendants(root):
    """{pid: (starttime, ppid, pgid)} of every live descendant of `root`."""
    children: dict[int, list[tuple[int, tuple[int, int, str, int]]]] = {}  # by ppid
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        st = proc_stat(int(name))
        if st is not None and st[2] not in ("Z", "X"):
            children.setdefault(st[0], []).append((int(name), st))
    found, todo = {}, [root]
    while todo:
        for pid, st in children.get(todo.pop(), []):
            found[pid] = (st[3], st[0], st[1])
            todo.append(pid)
    return found


def rank_of(pid):
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            for entry in f.read().split(b"\0"):
                if entry.startswith(b"RANK="):
                    return int(entry[5:])
    except (OSError, ValueError):
        pass
    return None


def is_forkserver(pid):
    """A forkserver: an exec of the CLI whose environment names its socket."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return b"\0DDPSPAWN_FORKSERVER_FD=" in b"\0" + f.read()
    except OSError:
        return False


def shm_names():
    try:
        return set(os.listdir("/dev/shm"))
    except OSError:
        return set()


# ---------------------------------------------------------------- one launcher run


class Launch:
    """One `ddpspawn` command started in a cell's private TMPDIR."""

    def __init__(self, cell, args, stdin=subprocess.DEVNULL):
        self.cell = cell
        self.shm_before = shm_names()
        self.out_path = os.path.join(cell.dir, f"out{cell.runs}.txt")
        self.err_path = os.path.join(cell.dir, f"err{cell.runs}.txt")
        cell.runs += 1
        env = dict(os.environ, TMPDIR=cell.tmp)
        with open(self.out_path, "wb") as out, open(self.err_path, "wb") as err:
            self.start = time.monotonic()
            self.start_wall = time.time()
            self.proc = subprocess.Popen([BIN] + args, env=env, stdin=stdin, stdout=out,
                                         stderr=err, start_new_session=True)
        self.pid = self.proc.pid
        LAUNCHES.append(self)
        self.seen = {}  # pid -> (starttime, role)
        self.run_dirs = set()
        self.fault_at = None
        self.exit_at = None

    def snapshot(self):
        """Records the launcher's processes and run directories seen now."""
        for pid, (start, ppid, pgid) in descendants(self.pid).items():
            # Settled: a rank that has exec'd (spawn) or is in its own group. A fresh child
            # may not have its own process group yet: look again next time.
            if pid in self.seen and self.seen[pid][1] not in ("guardian", "rank"):
                continue
            under_server = self.seen.get(ppid, (0, ""))[1] == "forkserver"
            if ppid == self.pid and is_forkserver(pid):
                self.seen[pid] = (start, "forkserver")
            elif (ppid == self.pid or under_server) and pgid == pid:
                rank = rank_of(pid)
                self.seen[pid] = (start, "rank" if rank is None else f"rank {rank}")
            elif ppid == self.pid:
                self.seen[pid] = (start, "guardian")
            else:
                self.seen[pid] = (start, f"child of {ppid}")
        for path in glob.glob(os.path.join(self.cell.tmp, "ddpspawn-*")):
            self.run_dirs.add(os.path.basename(path))

    def ranks(self):
        """Rank pids in rank order: by RANK in /proc/PID/environ once every rank has exec'd
        (spawn); fork-mode and forkserver ranks carry no RANK there (they got theirs after the
        fork), so by start (rank 0 forks first)."""
        for pid, (start, role) in list(self.seen.items()):
            if role == "rank" and alive(pid, start):  # seen before its exec: look again
                rank = rank_of(pid)
                if rank is not None:
                    self.seen[pid] = (start, f"rank {rank}")
        ranks = [(pid, s) for pid, s in self.seen.items() if s[1].startswith("rank")]
        if all(" " in role for _, (_, role) in ranks):
            ranks.sort(key=lambda r: int(r[1][1].split()[1]))
        else:
            ranks.sort(key=lambda r: (r[1][0], r[0]))
        return [pid for pid, _ in ranks]

    def wait_for(self, condition, timeout=120.0):
        """Snapshots until `condition()` holds; False if the launcher exits or time runs out."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            self.snapshot()
            if self.proc.poll() is not None:
                self.exit_at = self.exit_at or time.monotonic()
                return False
            if condition():
                return True
            time.sleep(0.02)
        return False

    def training(self, root, nranks=2):
        """Waits until both ranks run and this run wrote a checkpoint, then a little more."""
        ckpt = os.path.join(root, "checkpoints", "last.ckpt")

        def written():
            try:
                return os.stat(ckpt).st_mtime >= self.start_wall
            except OSError:
                return False

        ok = self.wait_for(lambda: len(self.ranks()) >= nranks and written())
        if ok:
            time.sleep(0.3)
            self.snapshot()
        return ok

    def fault(self, pid, sig):
        self.snapshot()
        self.fault_at = time.monotonic()
        os.kill(pid, sig)

    def wait_exit(self, watch=None):
        """Waits for the launcher's exit (HANG_S after the fault at most). With `watch` (pids),
        the fault's time is when the first of them is gone."""
        end = (self.fault_at or time.monotonic()) + HANG_S
        while True:
            now = time.monotonic()
            if watch and self.fault_at is None:
                if any(not alive(p, self.seen[p][0]) for p in watch):
                    self.fault_at = now
                    end = now + HANG_S
                else:
                    end = max(end, now + 1)  # the fault has not happened yet
                    if now - self.start > 600:
                        end = now
            rc = self.proc.poll()
            if rc is not None:
                self.exit_at = self.exit_at or now
                return rc
            if now >= end:
                return None
            time.sleep(0.005)

    def stderr(self):
        with open(self.err_path, errors="replace") as f:
            return f.read()

    def stdout(self):
        with open(self.out_path, errors="replace") as f:
            return f.read()

    def kill_all(self):
        """After a hang: SIGKILL the launcher and everything it started."""
        for pid, (start, _) in list(self.seen.items()) + [(self.pid, (None, ""))]:
            if start is None or alive(pid, start):
                try:
                    os.kill(pid, signal.SIGCONT)
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
        self.proc.wait()

    def leftovers(self, root=None, ignore=()):
        """What is left SETTLE_S after the launcher's exit at most: (text, seconds to settle).
        `ignore`: names in TMPDIR that are not the job's."""
        start = time.monotonic()
        while True:
            found = []
            for pid, (st, role) in sorted(self.seen.items()):
                if alive(pid, st):
                    state = proc_stat(pid)[2]
                    found.append(f"{role} (pid {pid}, state {state}) alive")
            dirs = [os.path.basename(d) for d in glob.glob(os.path.join(self.cell.tmp,
                                                                        "ddpspawn-*"))]
            found += [f"run dir {d}" for d in dirs if d not in ignore]
            prefixes = tuple(d + "-" for d in self.run_dirs if d not in ignore)
            new_shm = shm_names() - self.shm_before
            if prefixes:
                shm = [n for n in shm_names() if n.startswith(prefixes)]
            else:  # the run directory was never seen: any new ddpspawn segment
                shm = [n for n in new_shm if n.startswith("ddpspawn-")]
            found += [f"/dev/shm/{n}" for n in sorted(shm)]
            if root:
                tmps = glob.glob(os.path.join(root, "*.tmp.*"))
                tmps += glob.glob(os.path.join(root, "checkpoints", "*.tmp.*"))
                found += [f"{os.path.relpath(t, root)}" for t in sorted(tmps)]
            waited = time.monotonic() - start
            if not found or waited >= SETTLE_S:
                return ("none" if not found else "; ".join(found)), waited
            time.sleep(0.01)


# ---------------------------------------------------------------- cells and the table


class Cell:
    def __init__(self, work, name):
        self.dir = tempfile.mkdtemp(prefix=name + ".", dir=work)
        self.tmp = os.path.join(self.dir, "tmp")  # the cell's private TMPDIR
        os.mkdir(self.tmp)
        self.root = os.path.join(self.tmp, "root")  # --default-root-dir
        self.runs = 0


ROWS: list = []
LAUNCHES: list = []  # every launcher started, so that an interrupted run leaves none behind
WORK = None  # the work directory, written $WORK in the table


def writing_temp_file(directory):
    """Whether a process has a temporary file of an atomic write in `directory` open: an
    unnamed one (O_TMPFILE: /proc shows `directory/#<inode> (deleted)`) or a named
    `*.tmp.*`."""
    prefix = directory.rstrip("/") + "/"
    for fd_dir in glob.glob("/proc/[0-9]*/fd"):
        try:
            names = os.listdir(fd_dir)
        except OSError:
            continue
        for name in names:
            try:
                target = os.readlink(os.path.join(fd_dir, name))
            except OSError:
                continue
            if target.startswith(prefix) and (target[len(prefix):].startswith("#") or
                                              ".tmp." in target[len(prefix):]):
                return True
    return False


def row(num, fault, method, exit_text, seconds, message, leftovers):
    ROWS.append((num, fault, method, exit_text, seconds, message, leftovers))
    log(f"{num} {fault} [{method}]: exit {exit_text}, {seconds}, {message[:150]} | {leftovers}")


def exit_text(rc):
    if rc is None:
        return "**hung** (no exit in 60 s)"
    if rc < 0:
        return f"killed ({signal.Signals(-rc).name})"
    return str(rc)


def first_lines(text, n=2, also=None):
    """The first `n` non-empty lines of `text`, plus the first line containing `also`."""
    lines = [l.strip() for l in text.splitlines() if l.strip()]
    picked = lines[:n]
    if also:
        picked += [l for l in lines[n:] if also in l][:1]
    return " / ".join(picked) if picked else "(nothing on stderr)"


def cut(text, limit=260):
    if WORK:
        text = text.replace(WORK, "$WORK")
    return text if len(text) <= limit else text[:limit - 1] + "…"


def md(text):
    return text.replace("|", "\\|").replace("\n", " ")


def code(text):
    return "`" + md(text).replace("`", "'") + "`"


def seconds(t):
    return f"{t:.2f} s"


def fit_args(cell, method, data, *extra, model="mlp:4,16,3", epochs="100000"):
    return ["fit", "--model", model, "--train", data, "--nproc-per-node", "2",
            "--progress", "false", "--default-root-dir", cell.root, "--start-method", method,
            "--max-epochs", epochs, *extra]


def run_to_end(cell, args, timeout=HANG_S):
    """Runs a command that is expected to end by itself: (rc or None, seconds, Launch)."""
    launch = Launch(cell, args)
    launch.wait_for(lambda: False, timeout=timeout)
    rc = launch.proc.poll()
    if rc is None:
        launch.kill_all()
    return rc, time.monotonic() - launch.start, launch


def sha256(path):
    try:
        with open(path, "rb") as f:
            return hashlib.sha256(f.read()).hexdigest()
    except OSError:
        return None


# ---------------------------------------------------------------- data


def write_data(work):
    rng = random.Random(12)
    cls, reg, sentinel, huge = (os.path.join(work, n) for n in
                                ("cls.csv", "reg.csv", "sentinel.csv", "huge.csv"))
    rows = []
    for _ in range(400):
        x = [rng.uniform(-1, 1) for _ in range(4)]
        rows.append(x)
    with open(cls, "w") as f:
        for x in rows:
            s = x[0] + x[1]
            label = 0 if s < -0.3 else 1 if s < 0.3 else 2
            f.write(",".join(f"{v:.5f}" for v in x) + f",{label}\n")
    with open(reg, "w") as f:  # a float label: one output regresses
        for x in rows:
            f.write(",".join(f"{v:.5f}" for v in x) + f",{x[0] - 2 * x[2] + 0.25:.5f}\n")
    with open(cls) as f:
        lines = f.read().splitlines()
    # Row 301 (odd: rank 1's with --shuffle false) carries fault 5's sentinel.
    fields = lines[301].split(",")
    with open(sentinel, "w") as f:
        f.write("\n".join(lines[:301] + [",".join(["999.0"] + fields[1:])] + lines[302:]) + "\n")
    fields = lines[200].split(",")
    with open(huge, "w") as f:
        f.write("\n".join(lines[:200] + [",".join(fields[:2] + ["1e400"] + fields[3:])] +
                          lines[201:]) + "\n")
    return cls, reg, sentinel, huge


RAISING_MODEL = r'''
import sys, torch
from typing import List
class Net(torch.nn.Module):
    steps: int
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 3)
        self.steps = 0
    def forward(self, x):
        return self.fc(x)
    @torch.jit.export
    def training_step(self, batch: List[torch.Tensor], batch_idx: int) -> torch.Tensor:
        self.steps += 1
        if self.steps > 30 and bool((batch[0][:, 0] > 100.0).any()):
            raise RuntimeError("fault_matrix: injected failure at step " + str(self.steps))
        return torch.nn.functional.cross_entropy(self.fc(batch[0]), batch[1])
torch.jit.script(Net()).save(sys.argv[1])
'''


# ---------------------------------------------------------------- the faults


def fault_kill_rank(work, data):
    for method in METHODS:
        cell = Cell(work, f"f1-{method}")
        launch = Launch(cell, fit_args(cell, method, data["cls"]))
        if not launch.training(cell.root):
            row(1, "rank 1 SIGKILLed mid-training", method, "-", "-", "never reached training: " +
                cut(first_lines(launch.stderr())), "-")
            launch.kill_all()
            continue
        victim = launch.ranks()[1]
        launch.fault(victim, signal.SIGKILL)
        rc = launch.wait_exit()
        if rc is None:
            launch.kill_all()
        left, _ = launch.leftovers(cell.root)
        err = launch.stderr()
        row(1, "rank 1 SIGKILLed mid-training", method, exit_text(rc),
            seconds(launch.exit_at - launch.fault_at) if rc is not None else "> 60 s",
            code(cut(first_lines(err))) +
            ("" if f"(pid {victim})" in err else f" (the pid killed was {victim})"), left)


def fault_stop_rank(work, data, tries):
    for method in METHODS:
        results = []
        for attempt in range(tries):
            cell = Cell(work, f"f2-{method}")
            launch = Launch(cell, fit_args(cell, method, data["cls"], "--timeout", "5"))
            if not launch.training(cell.root):
                results.append((None, None, "never reached training: " +
                                first_lines(launch.stderr()), "-", False))
                launch.kill_all()
                continue
            rank1 = launch.ranks()[1]
            launch.fault(rank1, signal.SIGSTOP)
            rc = launch.wait_exit()
            if rc is None:
                launch.kill_all()
            err = launch.stderr()
            rank1_lines = [l.strip() for l in err.splitlines() if l.strip().startswith("rank 1:")]
            named_stopped = any("is stopped" in l for l in rank1_lines)
            message = first_lines(err, 2)
            if rank1_lines:
                message += " / " + rank1_lines[0]
            left, _ = launch.leftovers(cell.root)
            took = launch.exit_at - launch.fault_at if rc is not None else None
            results.append((rc, took, message, left, named_stopped))
        rcs = sorted({exit_text(r[0]) for r in results})
        times = [r[1] for r in results if r[1] is not None]
        span = (f"{min(times):.1f}–{max(times):.1f} s" if times else "") + (
            "; hung > 60 s" if any(r[1] is None and r[0] is None for r in results) else "")
        stopped = sum(r[4] for r in results)
        # Show one message where the stop was named and one where it was not, if both occurred.
        shown = []
        for want in (True, False):
            for r in results:
                if r[4] == want:
                    shown.append(code(cut(r[2], 330)))
                    break
        lefts = sorted({r[3] for r in results})
        row(2, "rank 1 SIGSTOPped mid-training, `--timeout 5`", method, ", ".join(rcs), span,
            f"rank 1 named as stopped in {stopped}/{len(results)} tries. " + " — ".join(shown),
            "; ".join(lefts))


def fault_kill_launcher(work, data):
    for method in METHODS:
        cell = Cell(work, f"f3-{method}")
        launch = Launch(cell, fit_args(cell, method, data["cls"]))
        if not launch.training(cell.root):
            row(3, "launcher SIGKILLed mid-training", method, "-", "-", "never reached training: " +
                code(cut(first_lines(launch.stderr()))), "-")
            launch.kill_all()
            continue
        launch.fault(launch.pid, signal.SIGKILL)
        rc = launch.wait_exit()
        left, waited = launch.leftovers(cell.root)
        if left == "none":
            left = f"none (all gone {waited:.2f} s after the launcher)"
        roles = sorted(r for _, r in launch.seen.values())
        roles = ", ".join(r if roles.count(r) == 1 else f"{roles.count(r)} {r}s"
                          for r in sorted(set(roles)))
        row(3, "launcher SIGKILLed mid-training", method, exit_text(rc),
            seconds(launch.exit_at - launch.fault_at), f"(no message: SIGKILL) processes: {roles}",
            left)


def fault_signal_launcher(work, data):
    for sig in (signal.SIGINT, signal.SIGTERM):
        for method in METHODS:
            cell = Cell(work, f"f4-{sig.name}-{method}")
            launch = Launch(cell, fit_args(cell, method, data["cls"]))
            if not launch.training(cell.root):
                row(4, f"launcher {sig.name}ed mid-training", method, "-", "-",
                    "never reached training: " + code(cut(first_lines(launch.stderr()))), "-")
                launch.kill_all()
                continue
            launch.fault(launch.pid, sig)
            rc = launch.wait_exit()
            if rc is None:
                launch.kill_all()
            left, _ = launch.leftovers(cell.root)
            ckpt = os.path.join(cell.root, "checkpoints", "last.ckpt")
            row(4, f"launcher {sig.name}ed mid-training", method, exit_text(rc),
                seconds(launch.exit_at - launch.fault_at) if rc is not None else "> 60 s",
                code(cut(first_lines(launch.stderr()))) +
                ("" if os.path.exists(ckpt) else " (no last.ckpt left)"), left)


def fault_raise(work, data):
    model = os.path.join(work, "raise.pt")
    script = os.path.join(work, "raising_model.py")  # TorchScript reads the source file
    with open(script, "w") as f:
        f.write(RAISING_MODEL)
    made = os.path.exists(PYTHON) and subprocess.run(
        [PYTHON, script, model], stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL).returncode == 0
    for method in METHODS:
        if not made:
            row(5, "rank 1 raises in training_step", method, "-", "-",
                f"skipped: {PYTHON} cannot script the TorchScript model (needs torch)", "-")
            continue
        cell = Cell(work, f"f5-{method}")
        launch = Launch(cell, fit_args(cell, method, data["sentinel"], "--shuffle", "false",
                                       model=model))
        launch.wait_for(lambda: len(launch.ranks()) >= 2)
        rc = launch.wait_exit(watch=launch.ranks())
        if rc is None:
            launch.kill_all()
        left, _ = launch.leftovers(cell.root)
        took = (seconds(launch.exit_at - launch.fault_at) if launch.fault_at and rc is not None
                else "-")
        row(5, "rank 1 raises in training_step (TorchScript `RuntimeError`, step 31+)", method,
            exit_text(rc), took, code(cut(first_lines(launch.stderr(), 2,
                                                       also="RuntimeError: fault_matrix"), 330)),
            left)
    for method in METHODS:
        row(5, "rank exits non-zero without an error report", method, "-", "-",
            "not reachable through the CLI (every rank runs the same fit; only a signal or a "
            "raising model makes one fail): see the rows above and fault 1", "-")


def fault_kill_during_checkpoint(work, data, tries):
    for method in METHODS:
        cell = Cell(work, f"f6-{method}")
        ckpt = os.path.join(cell.root, "checkpoints", "last.ckpt")
        loaded = tmp_after_kill = tmp_after_next = next_ok = zombie_writer = mid_write = 0
        lefts, errors, settle = [], [], []
        for attempt in range(tries):
            # One optimizer step per epoch (200 samples per rank, batch 256): last.ckpt is
            # rewritten after every step, so most of the run is checkpoint writing.
            launch = Launch(cell, fit_args(cell, method, data["cls"], "--batch-size", "256"))
            if not launch.training(cell.root):
                errors.append("never reached training: " + first_lines(launch.stderr()))
                launch.kill_all()
                continue
            # A random moment, then the next checkpoint write: the kill follows the first
            # sight of a process holding the checkpoint's temporary file open (polled for up to
            # 2 s; else it lands where it is).
            time.sleep(random.uniform(0.0, 1.0))
            poll_end = time.monotonic() + 2.0
            checkpoints = os.path.dirname(ckpt)
            writing = False
            while time.monotonic() < poll_end and not writing:
                writing = writing_temp_file(checkpoints)
            launch.fault(launch.pid, signal.SIGKILL)
            mid_write += writing
            launch.wait_exit()
            left, waited = launch.leftovers()  # temp files counted separately below
            settle.append(waited)
            if left != "none":
                lefts.append(left)
            tmps = glob.glob(ckpt + ".tmp.*")
            tmp_after_kill += bool(tmps)
            rc, _, test = run_to_end(cell, [
                "test", "--model", "mlp:4,16,3", "--data", data["cls"], "--checkpoint", ckpt,
                "--nproc-per-node", "2", "--progress", "false", "--default-root-dir",
                cell.root, "--start-method", method])
            if rc == 0 and "metric.test_loss=" in test.stdout():
                loaded += 1
            else:
                errors.append(f"test exit {exit_text(rc)}: " + first_lines(test.stderr()))
            writers = {}  # the dead writer's pid -> its state in /proc ('Z': not reaped yet)
            for t in glob.glob(ckpt + ".tmp.*"):
                pid = os.path.basename(t)[len("last.ckpt.tmp."):].split(".")[0]
                st = proc_stat(int(pid)) if pid.isdigit() else None
                writers[t] = "gone" if st is None else st[2]
            rc, _, nxt = run_to_end(cell, fit_args(cell, method, data["cls"], epochs="1"))
            next_ok += rc == 0
            if rc != 0:
                errors.append(f"next fit exit {exit_text(rc)}: " + first_lines(nxt.stderr()))
            stale = glob.glob(ckpt + ".tmp.*")
            tmp_after_next += bool(stale)
            zombie_writer += any(writers.get(t) == "Z" for t in stale)
            for t in glob.glob(ckpt + ".tmp.*"):  # keep the tries independent
                os.unlink(t)
        message = (f"{tries} kills (each at the first sight of an open temporary file after a "
                   f"random wait): `test --checkpoint last.ckpt` loaded it {loaded}/"
                   f"{tries}; {mid_write}/{tries} kills were sent while a rank held the "
                   f"temporary file open; {tmp_after_kill}/{tries} kills left a "
                   f"`last.ckpt.tmp.*`; the next fit succeeded {next_ok}/{tries} and left a temp file "
                   f"{tmp_after_next}/{tries} times" + (
                       f" (in {zombie_writer} of them its dead writer was still an unreaped "
                       "zombie when the next fit started)" if tmp_after_next else ""))
        if errors:
            message += "; errors: " + code(cut(" / ".join(errors), 300))
        row(6, "launcher SIGKILLed while checkpoints are written", method, "killed (SIGKILL)",
            f"settled in ≤ {max(settle):.2f} s" if settle else "-", message,
            "; ".join(lefts + ([f"a `last.ckpt.tmp.*` after the next fit in {tmp_after_next}/"
                                f"{tries} tries"] if tmp_after_next else [])) or "none")


def fault_corrupt_checkpoint(work, data):
    for method in METHODS:
        cell = Cell(work, f"f7-{method}")
        rc, _, good = run_to_end(cell, fit_args(cell, method, data["cls"], epochs="2"))
        ckpt = os.path.join(cell.root, "checkpoints", "last.ckpt")
        if rc != 0:
            row(7, "corrupt checkpoint", method, "-", "-", "the fit that makes it failed: " +
                code(cut(first_lines(good.stderr()))), "-")
            continue
        with open(ckpt, "rb") as f:
            blob = f.read()
        flipped = bytearray(blob)
        middle = len(blob) // 2
        for i in range(middle, middle + 16):
            flipped[i] ^= 0xFF
        variants = (("16 bytes flipped", bytes(flipped)), ("truncated to half", blob[:middle]))
        for what, content in variants:
            bad = os.path.join(cell.dir, "bad.ckpt")
            with open(bad, "wb") as f:
                f.write(content)
            uses = [("`test --checkpoint`", ["test", "--model", "mlp:4,16,3", "--data",
                                              data["cls"], "--checkpoint", bad,
                                              "--nproc-per-node", "2", "--progress", "false",
                                              "--default-root-dir", cell.root,
                                              "--start-method", method]),
                    ("`fit --resume-from`", fit_args(cell, method, data["cls"], "--resume-from",
                                                     bad, epochs="4"))]
            for use, args in uses:
                rc, took, launch = run_to_end(cell, args)
                left, _ = launch.leftovers(cell.root)
                row(7, f"checkpoint with {what}, given to {use}", method, exit_text(rc),
                    seconds(took) + " (whole run)", code(cut(first_lines(launch.stderr()))),
                    left)


def fault_non_finite(work, data):
    reg = ["--model", "mlp:4,16,1"]

    def test_on(cell, method, ckpt):
        rc, _, test = run_to_end(cell, ["test", *reg, "--data", data["reg"], "--checkpoint",
                                        ckpt, "--nproc-per-node", "2", "--progress", "false",
                                        "--default-root-dir", cell.root, "--start-method",
                                        method])
        loss = [l.split("=", 1)[1][:8] for l in test.stdout().splitlines()
                if l.startswith("metric.test_loss=")]
        return f"`test` on it: exit {exit_text(rc)}" + (f", test loss {loss[0]}" if loss else "")

    for method in METHODS:
        cell = Cell(work, f"f8-{method}")
        ckpt = os.path.join(cell.root, "checkpoints", "last.ckpt")
        cases = [
            ("`--lr 1e30` from the start (mlp:4,16,1 regression)", ["--lr", "1e30"], None),
            ("lr 0.01 for 2 epochs, then 1e30 (`--step-lr-every 2 --step-lr-gamma 1e32`)",
             ["--step-lr-every", "2", "--step-lr-gamma", "1e32"], None),
            ("`--lr 1e30` with `--resume-from` a good epoch-2 checkpoint", ["--lr", "1e30"],
             "resume"),
        ]
        for what, extra, resume in cases:
            shutil.rmtree(cell.root, ignore_errors=True)
            before = None
            if resume:
                rc, _, good = run_to_end(cell, fit_args(cell, method, data["reg"],
                                                        model="mlp:4,16,1", epochs="2"))
                if rc != 0:
                    row(8, what, method, "-", "-", "the good fit failed: " +
                        code(cut(first_lines(good.stderr()))), "-")
                    continue
                before = sha256(ckpt)
                extra = extra + ["--resume-from", ckpt]
            rc, took, launch = run_to_end(cell, fit_args(cell, method, data["reg"], *extra,
                                                         model="mlp:4,16,1", epochs="20"))
            left, _ = launch.leftovers(cell.root)
            out = launch.stderr() if rc != 0 else "fit succeeded"
            if not os.path.exists(ckpt):
                outcome = "no last.ckpt written"
            else:
                outcome = "last.ckpt " + ("" if before is None else "unchanged, " if
                                          sha256(ckpt) == before else "rewritten, ")
                outcome += test_on(cell, method, ckpt)
            if resume and rc == 0:
                outcome += ("; the run trained at the checkpoint's learning rate: `--lr` is not "
                            "applied with `--resume-from`")
            row(8, what, method, exit_text(rc), seconds(took) + " (whole run)",
                code(cut(first_lines(out, 2), 330)) + "; " + outcome, left)


def fault_bad_inputs(work, data):
    for method in METHODS:
        cases = [
            ("`--nproc-per-node 4294967298`", data["cls"], ["--nproc-per-node", "4294967298"]),
            ("a CSV with `1e400`", data["huge"], []),
            ("`--lr inf`", data["cls"], ["--lr", "inf"]),
            ("`metrics.csv` in the root dir is a symlink", data["cls"], []),
        ]
        for what, train, extra in cases:
            cell = Cell(work, f"f9-{method}")
            target = None
            if "symlink" in what:
                os.makedirs(cell.root)
                target = os.path.join(cell.dir, "precious.txt")
                with open(target, "w") as f:
                    f.write("not ddpspawn's\n")
                os.symlink(target, os.path.join(cell.root, "metrics.csv"))
            args = fit_args(cell, method, train, epochs="2")
            if extra:  # later options win: replace, so the value under test is the one used
                i = args.index(extra[0]) if extra[0] in args else None
                if i is not None:
                    args[i + 1] = extra[1]
                else:
                    args += extra
            rc, took, launch = run_to_end(cell, args)
            left, _ = launch.leftovers(cell.root)
            note = ""
            if target:
                with open(target) as f:
                    intact = f.read() == "not ddpspawn's\n"
                note = "; the link's target " + ("is intact" if intact else "WAS WRITTEN")
            row(9, what, method, exit_text(rc), seconds(took) + " (whole run)",
                code(cut(first_lines(launch.stderr()))) + note, left)


WATCHER = r'''
import json, os, sys, time
run_parent, stop = sys.argv[1], sys.argv[2]
seen, opened, errors, dirs, dir_errors = {}, [], set(), set(), set()
t0 = time.monotonic()
while not os.path.exists(stop) and time.monotonic() - t0 < 300:
    try:
        names = os.listdir("/dev/shm")
    except OSError as e:
        errors.add("listdir /dev/shm: " + e.strerror); names = []
    now = time.monotonic() - t0
    for n in names:
        if n.startswith("ddpspawn-"):
            first, last, polls = seen.get(n, (now, now, 0))
            seen[n] = (first, now, polls + 1)
            try:
                os.close(os.open("/dev/shm/" + n, os.O_RDONLY))
                opened.append(n)
            except OSError as e:
                errors.add("open: " + e.strerror)
    try:
        for n in os.listdir(run_parent):
            if n.startswith("ddpspawn-"):
                dirs.add(n)
                try:
                    os.listdir(os.path.join(run_parent, n))
                    dir_errors.add("listed " + n)
                except OSError as e:
                    dir_errors.add(e.strerror)
    except OSError as e:
        dir_errors.add("parent: " + e.strerror)
    time.sleep(0.002)
print(json.dumps({"seen": seen, "opened": sorted(set(opened)), "errors": sorted(errors),
                  "dirs": sorted(dirs), "dir_errors": sorted(dir_errors)}))
'''


def fault_hostile_user(work, data):
    if os.geteuid() != 0:
        for method in METHODS:
            row(10, "hostile local user", method, "-", "-", "skipped: needs root to act as nobody",
                "-")
        return
    nobody: dict[str, Any] = dict(user="nobody", group="nogroup", extra_groups=[])
    python = None  # one that `nobody` can run (root's own may live in an unreadable home)
    for candidate in ("/usr/bin/python3", "/usr/local/bin/python3", sys.executable):
        try:
            if subprocess.run([candidate, "-c", "pass"], **nobody).returncode == 0:
                python = candidate
                break
        except OSError:
            pass
    if python is None:
        for method in METHODS:
            row(10, "hostile local user", method, "-", "-",
                "skipped: no Python that the user nobody can run", "-")
        return
    for method in METHODS:
        # (a) `nobody` fills a shared sticky directory (a stand-in for /tmp) with run-directory
        # look-alikes: files, 0777 directories and links to root's directory.
        cell = Cell(work, f"f10-{method}")
        shared = tempfile.mkdtemp(prefix="fault_matrix-shared.", dir="/tmp")
        os.chmod(shared, 0o1777)
        plant = ("import os, random, string, sys\n"
                 "d = sys.argv[1]; r = random.Random(7)\n"
                 "for i in range(300):\n"
                 "    n = os.path.join(d, 'ddpspawn-' + ''.join(r.choice(string.ascii_letters"
                 " + string.digits) for _ in range(6)))\n"
                 "    k = i % 3\n"
                 "    if k == 0: open(n, 'w').close()\n"
                 "    elif k == 1: os.mkdir(n, 0o777); os.chmod(n, 0o777)\n"
                 "    else: os.symlink(sys.argv[2], n)\n")
        subprocess.run([python, "-c", plant, shared, cell.dir], check=True, **nobody)
        planted = sorted(os.listdir(shared))
        env_tmp = cell.tmp
        cell.tmp = shared  # this run's TMPDIR is the shared directory
        launch = Launch(cell, fit_args(cell, method, data["cls"], epochs="100"))
        mode = None
        while launch.proc.poll() is None and not (launch.run_dirs - set(planted)):
            launch.snapshot()
            time.sleep(0.005)
        for d in launch.run_dirs - set(planted):
            try:
                mode = f"{os.stat(os.path.join(shared, d)).st_mode & 0o7777:04o}"
            except OSError:
                pass
        rc = launch.wait_exit()
        if rc is None:
            launch.kill_all()
        after = sorted(os.listdir(shared))
        left, _ = launch.leftovers(cell.root, ignore=set(planted))
        cell.tmp = env_tmp
        untouched = after == planted and all(os.stat(os.path.join(shared, n),
                                                     follow_symlinks=False).st_uid == 65534
                                             for n in after)
        ours = [d for d in launch.run_dirs if d not in planted]
        row(10, "`nobody` pre-created 300 `ddpspawn-XXXXXX` files, 0777 dirs and links in the "
            "shared TMPDIR", method, exit_text(rc),
            (seconds(launch.exit_at - launch.start) if rc is not None else "> 60 s") +
            " (whole run)", (first_lines(launch.stderr()) if rc else "fit succeeded") +
            f"; its run dir was a fresh name (mode {mode}); the planted entries were "
            + ("left untouched" if untouched else "CHANGED") + f" ({len(ours)} run dir(s) of ours)",
            left)
        shutil.rmtree(shared, ignore_errors=True)

        # (b) `nobody` watches /dev/shm and the run directory's parent during a run.
        cell = Cell(work, f"f10b-{method}")
        os.chmod(cell.dir, 0o755)
        os.chmod(cell.tmp, 0o755)
        os.chmod(work, 0o755)
        launch = Launch(cell, fit_args(cell, method, data["cls"], epochs="150"))
        stop = os.path.join(cell.dir, "stop")
        watch = subprocess.Popen([python, "-c", WATCHER, cell.tmp, stop],
                                 stdout=subprocess.PIPE, **nobody)
        rc = launch.wait_exit()
        if rc is None:
            launch.kill_all()
        open(stop, "w").close()
        out, _ = watch.communicate()
        os.chmod(work, 0o700)
        seen = json.loads(out)
        spans = seen["seen"].values()
        left, _ = launch.leftovers(cell.root)
        visible = (f"{len(spans)} ddpspawn segment name(s) seen in /dev/shm (polled every "
                   f"~2 ms), each in at most {max(s[2] for s in spans)} consecutive poll(s) "
                   f"(≤ {max(2, max(s[1] - s[0] for s in spans) * 1000):.0f} ms), the first "
                   f"{min(s[0] for s in spans):.1f} s into the run" if spans else
                   "no ddpspawn segment ever seen in /dev/shm (polled every ~2 ms)")
        row(10, "`nobody` polls /dev/shm (opening every ddpspawn-* entry) and the run dir "
            "during a 150-epoch fit", method, exit_text(rc),
            (seconds(launch.exit_at - launch.start) if rc is not None else "> 60 s")
            + " (whole run)",
            f"{visible}; opened by nobody: {len(seen['opened'])}"
            + (f" ({', '.join(seen['errors'])})" if seen["errors"] else "")
            + f"; run dir listing by nobody: {', '.join(seen['dir_errors']) or 'not attempted'}",
            left)


# ---------------------------------------------------------------- main


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--only", default="", help="comma-separated fault numbers (1-10)")
    parser.add_argument("--kill-tries", type=int, default=10, help="fault 6's kills")
    parser.add_argument("--stop-tries", type=int, default=3, help="fault 2's tries")
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    opts = parser.parse_args()
    if not os.access(BIN, os.X_OK):
        sys.exit(f"fault_matrix: no {BIN}: run `bazel build //tools:ddpspawn` or set DDPSPAWN_BIN")
    only = {int(n) for n in opts.only.split(",") if n}
    global WORK
    work = WORK = tempfile.mkdtemp(prefix="fault_matrix.")
    cls, reg, sentinel, huge = write_data(work)
    data = dict(cls=cls, reg=reg, sentinel=sentinel, huge=huge)
    version = subprocess.run([BIN, "--version"], capture_output=True, text=True).stdout.split()
    started = datetime.datetime.now(datetime.timezone.utc)
    load = os.getloadavg()[0]
    faults = [
        (1, lambda: fault_kill_rank(work, data)),
        (2, lambda: fault_stop_rank(work, data, opts.stop_tries)),
        (3, lambda: fault_kill_launcher(work, data)),
        (4, lambda: fault_signal_launcher(work, data)),
        (5, lambda: fault_raise(work, data)),
        (6, lambda: fault_kill_during_checkpoint(work, data, opts.kill_tries)),
        (7, lambda: fault_corrupt_checkpoint(work, data)),
        (8, lambda: fault_non_finite(work, data)),
        (9, lambda: fault_bad_inputs(work, data)),
        (10, lambda: fault_hostile_user(work, data)),
    ]
    try:
        for num, run in faults:
            if not only or num in only:
                log(f"fault {num}")
                run()
    finally:
        for launch in LAUNCHES:
            if launch.proc.poll() is None:
                launch.kill_all()
        if opts.keep:
            log(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    took = (datetime.datetime.now(datetime.timezone.utc) - started).total_seconds()
    built = " ".join(v for v in version if v.startswith(("version=", "torch=")))
    print(f"Measured {started:%Y-%m-%d %H:%M} UTC by `tools/fault_matrix.py` in "
          f"{took / 60:.1f} min on {os.cpu_count()} cores (load average {load:.1f} at the "
          f"start), Linux {platform.release()}, ddpspawn {built}; 2 ranks, mlp:4,16,3 on 400 "
          "rows unless the fault says otherwise.\n")
    print("| # | Fault | Start method | Exit | Fault → exit | Error (first lines) / outcome | "
          "Left behind |")
    print("|---|---|---|---|---|---|---|")
    for num, fault, method, ex, secs, message, left in ROWS:
        print(f"| {num} | {md(fault)} | {method} | {md(ex)} | {md(secs)} | {message} | "
              f"{md(left)} |")


if __name__ == "__main__":
    main()
