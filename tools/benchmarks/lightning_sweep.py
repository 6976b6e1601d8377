"""tools/bench --lightning: Lightning's own Trainer with its ddp_spawn strategy against the same
Trainer with ddpspawn.lightning.DDPSpawnStrategy (spawn and forkserver), on the same workloads
(reference_lightning.py --strategy), in interleaved rounds, medians; with the launch of a second
fit in the same process. Reports each metric of
ddpspawn's strategy as a ratio to Lightning's, measured in the same run.
"""
import statistics

from bench_runs import LIGHTNING, PYTHON_DDP_ENV, run
from bench_runs import METRICS as RUN_METRICS

# reference_lightning.py also times a second fit's launch in the same process.
METRICS = RUN_METRICS + ("second_fit_launch",)

VARIANTS = ("ddp_spawn", "ddpspawn_spawn", "ddpspawn_forkserver")


def measure_lightning(python, workloads, rounds, steps, warmup):
    report = []
    for workload in workloads:
        common = ["--workload", workload, "--steps", str(steps), "--warmup", str(warmup),
                  "--nprocs", "2"]
        runs = {v: [] for v in VARIANTS}
        for _ in range(rounds):
            for variant in VARIANTS:
                runs[variant].append(run([python, LIGHTNING] + common + ["--strategy", variant],
                                         env=PYTHON_DDP_ENV))
        entry = {"workload": workload}
        for variant in VARIANTS:
            entry[variant] = {m: statistics.median(r[m] for r in runs[variant]) for m in METRICS}
        for variant in VARIANTS[1:]:
            entry[variant + "_vs_ddp_spawn"] = {
                m: entry[variant][m] / entry["ddp_spawn"][m] for m in METRICS}
        report.append(entry)
    return report


def print_lightning(report):
    print("Lightning 2.6.6's Trainer, 2 CPU ranks: ddpspawn's strategy against its ddp_spawn "
          "(ratios; steps/s higher is better, the others lower)")
    print(f"{'workload':10} {'metric':24} {'ddp_spawn':>12} {'ddpspawn spawn':>16} "
          f"{'ddpspawn forkserver':>20}")
    for entry in report:
        for metric in METRICS:
            base = entry["ddp_spawn"][metric]
            cells = [f"{entry[v][metric]:.3f} ({entry[v + '_vs_ddp_spawn'][metric]:.2f}x)"
                     for v in VARIANTS[1:]]
            print(f"{entry['workload']:10} {metric:24} {base:12.3f} {cells[0]:>16} {cells[1]:>20}")
