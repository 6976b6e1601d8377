"""tools/bench --elastic: what an elastic fit's in-memory commits cost, against checkpointing to
disk at the same interval for a restart, and how long a killed rank keeps the job from its next
step on each path. Whole `ddpspawn fit` runs of this checkout's CLI (4 ranks, forkserver, batch 4
per rank, Adam, 2000 generated rows, 3 epochs: 375 steps), interleaved over the rounds, medians:
each variant's wall time as a ratio to the same run without either (launch included, about 0.2 s
of each run). Two models: the small MLP of the elastic tests (mlp:4,64,3, a 3 KB state) and a
wide one (mlp:4,512,512,512,3, 530 K parameters, a 6 MB state with Adam's). Then
tools/elastic_matrix.py's kill rows: the elastic path and today's restart, on the same run.
"""
import os
import statistics
import subprocess
import sys
import tempfile
import time

TOOLS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, TOOLS)
import elastic_matrix  # noqa: E402  (tools/, beside this directory)

CLI = os.path.join(os.path.dirname(TOOLS), "bazel-bin", "tools", "ddpspawn")
WORKLOADS = {"small mlp": "mlp:4,64,3", "wide mlp": "mlp:4,512,512,512,3"}
VARIANTS = {
    "none": [],
    "commit every 20 steps (the default)": ["--min-ranks", "2"],
    "commit every 10 steps": ["--min-ranks", "2", "--elastic-commit-every-n-steps", "10"],
    "checkpoint to disk every 20 steps": ["--checkpoint-every-n-steps", "20"],
    "checkpoint to disk every 10 steps": ["--checkpoint-every-n-steps", "10"],
}


def wall_seconds(model, data, extra, work):
    root = tempfile.mkdtemp(dir=work)
    args = [CLI, "fit", "--model", model, "--train", data, "--max-epochs", "3", "--batch-size",
            "4", "--seed", "7", "--optimizer", "adam", "--lr", "0.001", "--nproc-per-node", "4",
            "--progress", "false", "--default-root-dir", root] + extra
    start = time.monotonic()
    out = subprocess.run(args, capture_output=True, text=True)
    took = time.monotonic() - start
    if out.returncode != 0:
        sys.exit(f"tools/bench --elastic: {' '.join(args)} exited {out.returncode}:\n"
                 f"{out.stderr[-3000:]}")
    return took


def kill_rows(work, data, rounds):
    rows = []
    for name, extra, inject in (
            ("elastic: --min-ranks 2, commit every 10 steps", elastic_matrix.ELASTIC +
             ["--timeout", "30"], elastic_matrix.kill_one),
            ("restart: --max-restarts 1 --checkpoint-every-n-steps 10",
             ["--max-restarts", "1", "--checkpoint-every-n-steps", "10", "--timeout", "30"],
             elastic_matrix.restart_kill_one)):
        times = []
        for _ in range(rounds):
            run = elastic_matrix.Run(work, data, extra)
            run.wait_for(lambda: run.steps() >= elastic_matrix.FAULT_STEP, "the fault's step")
            times.append(inject(run))
            exit_text, _, _ = run.finish()
            if exit_text != "0":
                sys.exit(f"tools/bench --elastic: {name}: exit {exit_text}: {run.stderr()[-2000:]}")
        rows.append({"path": name, "kill_to_next_step_s": statistics.median(times)})
    return rows


def measure_elastic(rounds):
    work = tempfile.mkdtemp(prefix="bench_elastic.")
    data = os.path.join(work, "train.csv")
    elastic_matrix.write_data(data)
    report: dict = {"cost": [], "kill": []}
    for workload, model in WORKLOADS.items():
        times: dict = {v: [] for v in VARIANTS}
        for _ in range(rounds):
            for variant, extra in VARIANTS.items():
                times[variant].append(wall_seconds(model, data, extra, work))
        base = statistics.median(times["none"])
        for variant in VARIANTS:
            median = statistics.median(times[variant])
            report["cost"].append({"workload": workload, "variant": variant,
                                   "wall_s": median, "vs_none": median / base})
    report["kill"] = kill_rows(work, data, rounds)
    subprocess.run(["rm", "-rf", work])
    return report


def print_elastic(report):
    print("Elastic fit's in-memory commits against checkpoints to disk, 4 CPU ranks, 375 steps "
          "(whole-run wall time, median; ratio to neither)")
    print(f"{'workload':10} {'variant':38} {'wall s':>8} {'x none':>8}")
    for row in report["cost"]:
        print(f"{row['workload']:10} {row['variant']:38} {row['wall_s']:8.2f} "
              f"{row['vs_none']:8.2f}")
    print("\nSIGKILL of rank 1 of 4 at step 45 -> the next step logged after the change (median)")
    for row in report["kill"]:
        print(f"{row['path']:58} {row['kill_to_next_step_s']:6.2f} s")
