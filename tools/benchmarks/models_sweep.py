"""tools/bench --models and --bucket-sweep.

--models W1,W2 (resnet18, gpt; bench_models.cc): ddpspawn's DDP (spawned ranks), its no-sync
ceiling, mp.spawn + PyTorch's DDP and Lightning on models people train, in interleaved rounds
(fewer steps than the MLP's: a ResNet-18 step takes about 0.6 s on one core here).

--bucket-sweep: ddpspawn's DDP on each workload with PyTorch's default buckets (1 MB first, 25 MB
after) and with every bucket capped at 1, 5, 25 and 100 MB (100: one bucket for every model
here), against the no-sync ceiling of the same rounds; with each run's breakdown (collectives per
step, each rank's wait at them).
"""
import statistics

from bench_runs import DDPSPAWN, LIGHTNING, REFERENCE, median_of, run

SWEEP_CAPS = ("default", "1", "5", "25", "100")


def steps_for(workload, steps, warmup):
    """The MLP's and the CNN's step counts; a tenth (at least 8 and 2) for the large models."""
    if workload in ("resnet18", "gpt"):
        return max(8, steps // 10), max(2, warmup // 5)
    return steps, warmup


def measure_models(python, workloads, rounds, steps, warmup):
    report = []
    for workload in workloads:
        n, w = steps_for(workload, steps, warmup)
        common = ["--workload", workload, "--steps", str(n), "--warmup", str(w), "--nprocs", "2"]
        runs = {"ddpspawn": [], "no_sync": [], "reference": [], "reference_no_sync": [],
                "lightning": []}
        for _ in range(rounds):
            runs["ddpspawn"].append(run([DDPSPAWN, "--mode", "ddp"] + common))
            runs["reference"].append(run([python, REFERENCE, "--mode", "ddp"] + common))
            runs["lightning"].append(run([python, LIGHTNING] + common))
            runs["no_sync"].append(run([DDPSPAWN, "--mode", "nosync"] + common))
            runs["reference_no_sync"].append(run([python, REFERENCE, "--mode", "nosync"] + common))
        m = {k: median_of(v) for k, v in runs.items()}
        report.append({
            "workload": workload, "steps": n, "warmup": w, **m,
            "ratios": {
                "steps_per_s_vs_torch_ddp": m["ddpspawn"]["steps_per_s"]
                / m["reference"]["steps_per_s"],
                "steps_per_s_vs_lightning": m["ddpspawn"]["steps_per_s"]
                / m["lightning"]["steps_per_s"],
                "vs_no_sync_ceiling": m["ddpspawn"]["steps_per_s"] / m["no_sync"]["steps_per_s"],
                # The same share for PyTorch's DDP, against its own no_sync(): what the
                # reducers cost, apart from the frontends' kernels (LibTorch's C++ modules and
                # torch's Python ones may pick different ones, e.g. for attention).
                "torch_ddp_vs_its_no_sync_ceiling": m["reference"]["steps_per_s"]
                / m["reference_no_sync"]["steps_per_s"],
                "ceiling_vs_torch_ceiling": m["no_sync"]["steps_per_s"]
                / m["reference_no_sync"]["steps_per_s"],
                "launch_vs_torch_ddp": m["ddpspawn"]["launch_to_first_batch"]
                / m["reference"]["launch_to_first_batch"],
                "peak_rss_vs_torch_ddp": m["ddpspawn"]["peak_rss_mb"]
                / m["reference"]["peak_rss_mb"],
            }})
    return report


def sweep_buckets(workloads, rounds, steps, warmup):
    report = []
    for workload in workloads:
        n, w = steps_for(workload, steps, warmup)
        common = ["--workload", workload, "--steps", str(n), "--warmup", str(w), "--nprocs", "2",
                  "--breakdown", "1"]
        runs = {cap: [] for cap in SWEEP_CAPS + ("no_sync",)}
        for _ in range(rounds):
            for cap in SWEEP_CAPS:
                extra = [] if cap == "default" else ["--bucket-cap-mb", cap]
                runs[cap].append(run([DDPSPAWN, "--mode", "ddp"] + extra + common))
            runs["no_sync"].append(run([DDPSPAWN, "--mode", "nosync"] + common))
        ceiling = statistics.median(r["steps_per_s"] for r in runs["no_sync"])
        rows = []
        for cap in SWEEP_CAPS:
            steps_per_s = statistics.median(r["steps_per_s"] for r in runs[cap])
            rows.append({
                "bucket_cap_mb": cap, "steps_per_s": steps_per_s,
                "vs_no_sync_ceiling": steps_per_s / ceiling,
                "collectives_per_step": statistics.median(
                    r["collectives_per_step"] for r in runs[cap]),
                "waited_ms_per_step": [statistics.median(r["waited_ms"][k] for r in runs[cap])
                                       for k in range(2)],
            })
        report.append({"workload": workload, "no_sync_steps_per_s": ceiling, "caps": rows})
    return report


def print_models(report):
    print("%-9s %10s %10s %10s %10s %10s %8s %8s %8s %8s" % (
        "model", "ddpspawn", "torch DDP", "Lightning", "no-sync", "torch n-s", "vs DDP", "vs L",
        "ceiling", "torch's"))
    for m in report:
        q = m["ratios"]
        print("%-9s %10.3f %10.3f %10.3f %10.3f %10.3f %7.2fx %7.2fx %7.2fx %7.2fx" % (
            m["workload"], m["ddpspawn"]["steps_per_s"], m["reference"]["steps_per_s"],
            m["lightning"]["steps_per_s"], m["no_sync"]["steps_per_s"],
            m["reference_no_sync"]["steps_per_s"], q["steps_per_s_vs_torch_ddp"],
            q["steps_per_s_vs_lightning"], q["vs_no_sync_ceiling"],
            q["torch_ddp_vs_its_no_sync_ceiling"]))


def print_sweep(report):
    for s in report:
        print("%s (no-sync ceiling %.2f steps/s)" % (s["workload"], s["no_sync_steps_per_s"]))
        for row in s["caps"]:
            print("  cap %-8s %9.2f steps/s %6.2fx ceiling %5.1f collectives/step, waits %s ms"
                  % (row["bucket_cap_mb"], row["steps_per_s"], row["vs_no_sync_ceiling"],
                     row["collectives_per_step"],
                     " / ".join("%.2f" % v for v in row["waited_ms_per_step"])))
