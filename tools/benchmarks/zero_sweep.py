"""tools/bench --zero: ZeRO stage 1 against torch's ZeroRedundancyOptimizer.

For each workload (mlp, gpt) and rank count (2, 4): DDP with Adam and with Adam sharded by
ZeroRedundancyOptimizer, ddpspawn's (ddpspawn_bench --optimizer) and torch's (reference_ddp.py
--optimizer, mp.spawn + DDP + torch.distributed.optim.ZeroRedundancyOptimizer), in interleaved
rounds. Reports each rank's optimizer state bytes (the largest rank's, as a share of unsharded
Adam's) and steps/s with sharding against without, for both. The state bytes are deterministic
(taken from the first round); steps/s are medians.
"""
import statistics

from bench_runs import DDPSPAWN, REFERENCE, run
from models_sweep import steps_for

VARIANTS = ("ddpspawn_adam", "ddpspawn_zero", "torch_adam", "torch_zero")


def measure_zero(python, workloads, nprocs_list, rounds, steps, warmup):
    report = []
    for workload in workloads:
        n, w = steps_for(workload, steps, warmup)
        for nprocs in nprocs_list:
            common = ["--workload", workload, "--mode", "ddp", "--steps", str(n), "--warmup",
                      str(w), "--nprocs", str(nprocs)]
            commands = {
                "ddpspawn_adam": [DDPSPAWN] + common + ["--optimizer", "adam"],
                "ddpspawn_zero": [DDPSPAWN] + common + ["--optimizer", "zero_adam"],
                "torch_adam": [python, REFERENCE] + common + ["--optimizer", "adam"],
                "torch_zero": [python, REFERENCE] + common + ["--optimizer", "zero_adam"],
            }
            runs = {k: [] for k in VARIANTS}
            for _ in range(rounds):
                for variant in VARIANTS:
                    runs[variant].append(run(commands[variant]))
            entry = {"workload": workload, "nprocs": nprocs, "steps": n, "warmup": w}
            for variant in VARIANTS:
                entry[variant] = {
                    "steps_per_s": statistics.median(r["steps_per_s"] for r in runs[variant]),
                    "optimizer_state_bytes": runs[variant][0]["optimizer_state_bytes"],
                }
            for side in ("ddpspawn", "torch"):
                full = max(entry[side + "_adam"]["optimizer_state_bytes"])
                sharded = entry[side + "_zero"]["optimizer_state_bytes"]
                entry[side + "_ratios"] = {
                    "largest_shard_vs_unsharded": max(sharded) / full,
                    "smallest_shard_vs_unsharded": min(sharded) / full,
                    "steps_per_s_zero_vs_adam": entry[side + "_zero"]["steps_per_s"]
                    / entry[side + "_adam"]["steps_per_s"],
                }
            entry["largest_shard_vs_torchs"] = (max(entry["ddpspawn_zero"]["optimizer_state_bytes"])
                                                / max(entry["torch_zero"]["optimizer_state_bytes"]))
            entry["zero_steps_per_s_vs_torchs"] = (entry["ddpspawn_zero"]["steps_per_s"]
                                                   / entry["torch_zero"]["steps_per_s"])
            report.append(entry)
    return report


def print_zero(report):
    if not report:
        return
    print("ZeRO stage 1 (Adam): optimizer state per rank and steps/s, ddpspawn vs torch")
    print("%-6s %5s  %-28s %-28s %12s %12s %10s" % (
        "model", "ranks", "ddpspawn state MB by rank", "torch state MB by rank",
        "zero/adam us", "zero/adam th", "us/torch"))
    for e in report:
        mb = lambda v: ",".join("%.2f" % (b / 1e6) for b in e[v]["optimizer_state_bytes"])  # noqa
        print("%-6s %5d  %-28s %-28s %12.2f %12.2f %10.2f" % (
            e["workload"], e["nprocs"], mb("ddpspawn_zero"), mb("torch_zero"),
            e["ddpspawn_ratios"]["steps_per_s_zero_vs_adam"],
            e["torch_ratios"]["steps_per_s_zero_vs_adam"], e["zero_steps_per_s_vs_torchs"]))
        print("%-6s %5s  unsharded: %.2f MB (ddpspawn), %.2f MB (torch)" % (
            "", "", max(e["ddpspawn_adam"]["optimizer_state_bytes"]) / 1e6,
            max(e["torch_adam"]["optimizer_state_bytes"]) / 1e6))
