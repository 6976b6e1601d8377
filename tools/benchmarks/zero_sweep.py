"""tools/bench --sharded (or --zero): ZeRO stages 1, 2 and 3 against torch's.

For each workload (mlp, gpt) and rank count (2, 4), in interleaved rounds, with Adam:
  ddpspawn (ddpspawn_bench --optimizer): DDP (adam), ZeRO-1 (zero_adam: ZeroRedundancyOptimizer
    after DDP's all-reduce), ZeRO-2 (shard_grad_op_adam: the reducer's reduce-scatter and
    ShardGradOpOptimizer), ZeRO-3 (full_shard_adam: FullShard over each Linear of the mlp, each
    layer of the gpt and the root);
  torch (reference_ddp.py --optimizer, mp.spawn): DDP (adam), ZeroRedundancyOptimizer (zero_adam),
    FSDP2's fully_shard with reshard_after_forward=False (fsdp_adam: SHARD_GRAD_OP, the model as
    one unit; unlike ddpspawn's it also keeps the parameters sharded between steps), and FSDP2's
    FULL_SHARD (fsdp3_adam: fully_shard on the same units and the root, resharding after
    forward).
Reports each rank's optimizer state bytes, steps/s (median), the peak RSS of the largest rank
(both sides: getrusage's, which counts LibTorch's code and the shared memory a rank touched) and,
for ddpspawn, each rank's peak tensor bytes (tensor_memory.h's count, from the model's creation
on). State bytes and peaks come from the first round.
"""
import statistics

from bench_runs import DDPSPAWN, REFERENCE, run
from models_sweep import steps_for

# Variant: (side, --optimizer).
VARIANTS = {
    "ddpspawn_adam": ("ddpspawn", "adam"),
    "ddpspawn_zero": ("ddpspawn", "zero_adam"),
    "ddpspawn_zero2": ("ddpspawn", "shard_grad_op_adam"),
    "ddpspawn_zero3": ("ddpspawn", "full_shard_adam"),
    "torch_adam": ("torch", "adam"),
    "torch_zero": ("torch", "zero_adam"),
    "torch_fsdp2": ("torch", "fsdp_adam"),
    "torch_fsdp3": ("torch", "fsdp3_adam"),
}


def measure_zero(python, workloads, nprocs_list, rounds, steps, warmup):
    report = []
    for workload in workloads:
        n, w = steps_for(workload, steps, warmup)
        for nprocs in nprocs_list:
            common = ["--workload", workload, "--mode", "ddp", "--steps", str(n), "--warmup",
                      str(w), "--nprocs", str(nprocs)]
            commands = {
                variant: ([DDPSPAWN] if side == "ddpspawn" else [python, REFERENCE]) + common
                + ["--optimizer", optimizer]
                for variant, (side, optimizer) in VARIANTS.items()}
            runs = {k: [] for k in VARIANTS}
            for _ in range(rounds):
                for variant in VARIANTS:
                    runs[variant].append(run(commands[variant]))
            entry = {"workload": workload, "nprocs": nprocs, "steps": n, "warmup": w}
            for variant in VARIANTS:
                first = runs[variant][0]
                entry[variant] = {
                    "steps_per_s": statistics.median(r["steps_per_s"] for r in runs[variant]),
                    "optimizer_state_bytes": first["optimizer_state_bytes"],
                    "peak_rss_mb": first["peak_rss_mb"],
                }
                for key in ("peak_tensor_bytes", "state_tensor_bytes", "state_formula_bytes"):
                    if key in first:
                        entry[variant][key] = first[key]
                if "state_formula_bytes" in first:
                    # What stays between steps against ZeRO's formula, the farthest rank's.
                    entry[variant]["state_vs_formula"] = max(
                        (m / f for m, f in zip(first["state_tensor_bytes"],
                                               first["state_formula_bytes"])),
                        key=lambda r: abs(r - 1))
            for side, stages in (("ddpspawn", ("zero", "zero2", "zero3")),
                                 ("torch", ("zero", "fsdp2", "fsdp3"))):
                full = max(entry[side + "_adam"]["optimizer_state_bytes"])
                ratios = {}
                for stage in stages:
                    sharded = entry[f"{side}_{stage}"]["optimizer_state_bytes"]
                    ratios[f"{stage}_largest_shard_vs_unsharded"] = max(sharded) / full
                    ratios[f"steps_per_s_{stage}_vs_adam"] = (
                        entry[f"{side}_{stage}"]["steps_per_s"] / entry[side + "_adam"]["steps_per_s"])
                entry[side + "_ratios"] = ratios
            entry["largest_shard_vs_torchs"] = (max(entry["ddpspawn_zero"]["optimizer_state_bytes"])
                                                / max(entry["torch_zero"]["optimizer_state_bytes"]))
            entry["zero_steps_per_s_vs_torchs"] = (entry["ddpspawn_zero"]["steps_per_s"]
                                                   / entry["torch_zero"]["steps_per_s"])
            entry["zero2_steps_per_s_vs_fsdp2"] = (entry["ddpspawn_zero2"]["steps_per_s"]
                                                   / entry["torch_fsdp2"]["steps_per_s"])
            entry["zero2_peak_rss_vs_fsdp2"] = (entry["ddpspawn_zero2"]["peak_rss_mb"]
                                                / entry["torch_fsdp2"]["peak_rss_mb"])
            entry["zero3_steps_per_s_vs_fsdp2_full_shard"] = (
                entry["ddpspawn_zero3"]["steps_per_s"] / entry["torch_fsdp3"]["steps_per_s"])
            entry["zero3_peak_rss_vs_fsdp2_full_shard"] = (
                entry["ddpspawn_zero3"]["peak_rss_mb"] / entry["torch_fsdp3"]["peak_rss_mb"])
            entry["zero3_peak_tensor_vs_ddp"] = [
                z / d for z, d in zip(entry["ddpspawn_zero3"]["peak_tensor_bytes"],
                                      entry["ddpspawn_adam"]["peak_tensor_bytes"])]
            report.append(entry)
    return report


def print_zero(report):
    if not report:
        return
    print("ZeRO-1, -2 and -3 (Adam): per-rank optimizer state, steps/s and peak memory, "
          "ddpspawn vs torch")
    print("%-6s %5s  %-8s %-24s %10s %10s %-26s" % (
        "model", "ranks", "variant", "state MB by rank", "steps/s", "rss MB", "peak tensor MB"))
    for e in report:
        for variant in VARIANTS:
            v = e[variant]
            mb = ",".join("%.2f" % (b / 1e6) for b in v["optimizer_state_bytes"])
            peak = ",".join("%.2f" % (b / 1e6) for b in v.get("peak_tensor_bytes", []))
            print("%-6s %5d  %-14s %-24s %10.2f %10.1f %-26s" % (
                e["workload"], e["nprocs"], variant, mb, v["steps_per_s"], v["peak_rss_mb"],
                peak or "-"))
        print("%-6s %5s  ddpspawn ZeRO-2 vs torch FSDP2: steps/s %.2fx, peak RSS %.2fx; "
              "ZeRO-1 vs torch's: steps/s %.2fx" % (
                  "", "", e["zero2_steps_per_s_vs_fsdp2"], e["zero2_peak_rss_vs_fsdp2"],
                  e["zero_steps_per_s_vs_torchs"]))
        print("%-6s %5s  ddpspawn's kept tensor bytes vs ZeRO's formula (farthest rank): %s" % (
            "", "", ", ".join("%s %.3f" % (v, e[v]["state_vs_formula"]) for v in VARIANTS
                              if "state_vs_formula" in e[v])))
        print("%-6s %5s  ddpspawn ZeRO-3 vs torch FSDP2 full_shard: steps/s %.2fx, peak RSS %.2fx;"
              " peak tensor bytes vs ddpspawn DDP %s" % (
                  "", "", e["zero3_steps_per_s_vs_fsdp2_full_shard"],
                  e["zero3_peak_rss_vs_fsdp2_full_shard"],
                  ",".join("%.2f" % r for r in e["zero3_peak_tensor_vs_ddp"])))
