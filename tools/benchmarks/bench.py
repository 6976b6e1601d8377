"""tools/bench: ddpspawn against the references users have today, on torch 2.11 (the same LibTorch,
Gloo and BLAS): torch.multiprocessing.spawn + DistributedDataParallel, and PyTorch Lightning 2.6.6
(Trainer with DDPStrategy(start_method="spawn")), on the same workloads, runs interleaved, medians
over the rounds. Also the no-sync ceiling (the same ranks training without
gradient sync), raw all-reduce time for the workload's gradient size (shared memory, staged and
in place, and Gloo), what comparing every collective's call across ranks costs (the same runs
with the comparison off), and what a bare process start that loads LibTorch costs (the floor under
any spawned rank's launch).
ddpspawn.torch.DistributedDataParallel (Python, ddpspawn.spawn) is measured against
mp.spawn + PyTorch's DDP on the same model and loop, with each of spawn()'s start methods
(forkserver first and prestarted, as above).
Launch to first batch runs from the launch call in an already started launcher (ddpspawn's Job,
or mp.spawn with torch imported) to rank 0's first finished step; ddpspawn is measured with the
spawn start method like the reference, with fork, and with forkserver: once with the server
started by the launch itself (a first launch) and once with it started before (prestarted: a
restart, a later launch of the same process).

With --multinode RATES (root only): instead, the hierarchical all-reduce of 2 hosts x 2 ranks
against Gloo among all ranks, at each link rate (tc's, e.g. none,10gbit,1gbit); see multinode.py.

With --models resnet18,gpt or --bucket-sweep: instead, the larger models against the references,
or DDP's bucket caps; see models_sweep.py. With --sharded (or --zero): instead, ZeRO stages 1,
2 and 3's optimizer state, steps/s and memory per rank against torch's ZeroRedundancyOptimizer
and FSDP2, on --workloads (mlp,gpt) at 2 and 4 ranks; see zero_sweep.py. With --lightning: instead, Lightning's Trainer with ddpspawn's
DDPSpawnStrategy against its own ddp_spawn; see lightning_sweep.py. With --elastic: instead,
an elastic fit's in-memory commits against checkpoints to disk, and a killed rank's cost on each
path; see elastic_sweep.py.

Usage: tools/bench [--json] [--rounds N] [--steps N] [--workloads mlp,conv] [--multinode RATES]
                   [--models resnet18,gpt] [--bucket-sweep] [--sharded] [--lightning]
                   [--elastic]
"""
import argparse
import json
import os
import re
import subprocess
import sys
import time

from bench_runs import (DDPSPAWN, LIGHTNING, METRICS, PYTHON_DDP, PYTHON_DDP_ENV,
                        REFERENCE, median_of, run)


def bare_start(command):
    """Wall time and peak RSS of a process that loads LibTorch and exits: what every spawned rank
    (or mp.spawn interpreter) pays before it can do anything. The peak is the process's own
    (VmHWM, which it prints): its rusage would carry this launcher's peak across the exec."""
    start = time.perf_counter()
    out = subprocess.run(command, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    found = re.search(r"VmHWM:\s*(\d+) kB", out.stdout)
    if out.returncode != 0 or not found:
        raise RuntimeError("%s failed (status %d) or printed no VmHWM: %s"
                           % (command, out.returncode, out.stderr[-2000:]))
    return seconds, int(found.group(1)) / 1024.0


def startup_floor():
    ours_s, ours_mb = bare_start([DDPSPAWN, "--mode", "startup"])
    torch_s, torch_mb = bare_start([sys.executable, "-c", "import torch; print(next(line for line in "
                                    "open('/proc/self/status') if line.startswith('VmHWM')))"])
    return {"ddpspawn_process_s": ours_s, "ddpspawn_process_rss_mb": ours_mb,
            "python_import_torch_s": torch_s, "python_import_torch_rss_mb": torch_mb}


def blas_in_use():
    """The BLAS inside the torch that ddpspawn and the references share (BLAS_INFO)."""
    import torch

    for item in torch.__config__.show().replace(",", "\n").splitlines():
        if item.strip().startswith("BLAS_INFO="):
            return item.strip().split("=", 1)[1]
    return "unknown"


def emit(report, as_json, print_table):
    """Prints a sweep's report, as JSON or as its table; returns the exit code."""
    if as_json:
        print(json.dumps(report))
    else:
        print_table(report)
    return 0


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--workloads", default="mlp,conv")
    parser.add_argument("--multinode", metavar="RATES")
    parser.add_argument("--models", metavar="WORKLOADS")
    parser.add_argument("--bucket-sweep", action="store_true",
                        help="DDP's bucket caps on --workloads (default mlp,conv)")
    parser.add_argument("--sharded", "--zero", dest="zero", action="store_true",
                        help="ZeRO stages 1 and 2 against torch's on --workloads (say mlp,gpt)")
    parser.add_argument("--lightning", action="store_true",
                        help="Lightning's Trainer with ddpspawn's strategy against its ddp_spawn")
    parser.add_argument("--elastic", action="store_true",
                        help="an elastic fit's commits against checkpoints, and a kill's cost")
    args = parser.parse_args()
    if args.elastic:
        import elastic_sweep

        return emit(elastic_sweep.measure_elastic(args.rounds), args.json,
                    elastic_sweep.print_elastic)
    if args.lightning:
        import lightning_sweep

        return emit(lightning_sweep.measure_lightning(sys.executable, args.workloads.split(","),
                                                      args.rounds, args.steps, args.warmup),
                    args.json, lightning_sweep.print_lightning)
    if args.zero:
        import zero_sweep

        return emit(zero_sweep.measure_zero(sys.executable, args.workloads.split(","), (2, 4),
                                            args.rounds, args.steps, args.warmup),
                    args.json, zero_sweep.print_zero)
    if args.models or args.bucket_sweep:
        import models_sweep

        out = {}
        if args.models:
            out["models"] = models_sweep.measure_models(
                sys.executable, args.models.split(","), args.rounds, args.steps, args.warmup)
        if args.bucket_sweep:
            out["bucket_sweep"] = models_sweep.sweep_buckets(
                args.workloads.split(","), args.rounds, args.steps, args.warmup)
        if args.json:
            print(json.dumps(out))
        else:
            models_sweep.print_models(out.get("models", []))
            models_sweep.print_sweep(out.get("bucket_sweep", []))
        return 0
    if args.multinode:
        import multinode

        multinode.report(multinode.measure(DDPSPAWN, args.multinode.split(","), args.rounds,
                                           args.steps, args.warmup), args.json)
        return
    common = ["--steps", str(args.steps), "--warmup", str(args.warmup), "--nprocs", "2"]
    report = {"blas": blas_in_use(), "ranks": 2, "threads_per_rank": 1, "rounds": args.rounds,
              "workloads": []}
    for workload in args.workloads.split(","):
        w = ["--workload", workload]
        results = {"ddpspawn": [], "reference": [], "lightning": [], "no_sync": [], "python": [],
                   "lockstep": [], "reference_no_sync": [], "python_no_sync": [],
                   "ddpspawn_fork": [], "c10d_reducer": [], "ddpspawn_gloo": [],
                   "allreduce": [], "allreduce_gloo": [], "startup": [],
                   "ddpspawn_unchecked": [], "small": [], "small_unchecked": [],
                   "small_gloo": [], "small_gloo_unchecked": [], "forkserver_cold": [],
                   "forkserver_prestarted": [], "python_fork": [],
                   "python_forkserver_cold": [], "python_forkserver_prestarted": []}
        gloo = {"DDPSPAWN_SHM_ALLREDUCE": "0"}
        unchecked = ["--check-calls", "0"]
        for _ in range(args.rounds):  # interleaved, so drift hits every variant alike
            results["ddpspawn"].append(run([DDPSPAWN] + w + ["--mode", "ddp"] + common))
            results["reference"].append(
                run([sys.executable, REFERENCE] + w + ["--mode", "ddp"] + common))
            results["lightning"].append(run([sys.executable, LIGHTNING] + w + common))
            python_ddp = [sys.executable, PYTHON_DDP] + w + common
            results["python"].append(run(python_ddp, env=PYTHON_DDP_ENV))
            # The wrapper's own ceiling: the same Python loop under its no_sync().
            results["python_no_sync"].append(
                run(python_ddp + ["--mode", "nosync"], env=PYTHON_DDP_ENV))
            results["python_fork"].append(
                run(python_ddp + ["--start-method", "fork"], env=PYTHON_DDP_ENV))
            python_forkserver = python_ddp + ["--start-method", "forkserver"]
            results["python_forkserver_cold"].append(run(python_forkserver, env=PYTHON_DDP_ENV))
            results["python_forkserver_prestarted"].append(
                run(python_forkserver + ["--prestart", "1"], env=PYTHON_DDP_ENV))
            results["no_sync"].append(run([DDPSPAWN] + w + ["--mode", "nosync"] + common))
            # The no-sync step with one meeting of the ranks: what waiting for the slower rank
            # costs by itself, which no gradient exchange can avoid.
            results["lockstep"].append(run([DDPSPAWN] + w + ["--mode", "lockstep"] + common))
            results["reference_no_sync"].append(
                run([sys.executable, REFERENCE] + w + ["--mode", "nosync"] + common))
            # Reducer against reducer on the same transport: PyTorch's c10d::Reducer and ours,
            # both over Gloo (ours without its shared-memory all-reduce).
            results["c10d_reducer"].append(
                run([DDPSPAWN] + w + ["--mode", "c10d_reducer"] + common))
            results["ddpspawn_gloo"].append(run([DDPSPAWN] + w + ["--mode", "ddp"] + common,
                                                env={"DDPSPAWN_SHM_ALLREDUCE": "0"}))
            results["ddpspawn_fork"].append(
                run([DDPSPAWN] + w + ["--mode", "ddp", "--start-method", "fork"] + common))
            forkserver = [DDPSPAWN] + w + ["--mode", "ddp", "--start-method", "forkserver"]
            results["forkserver_cold"].append(run(forkserver + common))
            results["forkserver_prestarted"].append(run(forkserver + ["--prestart", "1"] + common))
            results["startup"].append(startup_floor())
            # What comparing every collective's call across ranks costs: the same runs with
            # the comparison off (GroupOptions::check_calls).
            results["ddpspawn_unchecked"].append(
                run([DDPSPAWN] + w + ["--mode", "ddp"] + unchecked + common))
            small = [DDPSPAWN] + w + ["--mode", "small_allreduce"] + common
            results["small"].append(run(small))
            results["small_unchecked"].append(run(small + unchecked))
            results["small_gloo"].append(run(small, env=gloo))
            results["small_gloo_unchecked"].append(run(small + unchecked, env=gloo))
        results["allreduce"].append(run([DDPSPAWN] + w + ["--mode", "allreduce"] + common))
        results["allreduce_gloo"].append(run([DDPSPAWN] + w + ["--mode", "allreduce"] + common,
                                             env={"DDPSPAWN_SHM_ALLREDUCE": "0"}))
        ours, ref, lightning, ceiling, forked, startup, c10d, ours_gloo = (
            median_of(results[k]) for k in
            ("ddpspawn", "reference", "lightning", "no_sync", "ddpspawn_fork", "startup",
             "c10d_reducer", "ddpspawn_gloo"))
        python = median_of(results["python"])
        lockstep = median_of(results["lockstep"])
        ref_ceiling = median_of(results["reference_no_sync"])
        python_ceiling = median_of(results["python_no_sync"])
        python_methods = {k: median_of(results["python_" + k])
                          for k in ("fork", "forkserver_cold", "forkserver_prestarted")}
        cold, prestarted = (median_of(results[k])
                            for k in ("forkserver_cold", "forkserver_prestarted"))
        unchecked_ddp, small, small_unchecked, small_gloo, small_gloo_unchecked = (
            median_of(results[k]) for k in
            ("ddpspawn_unchecked", "small", "small_unchecked", "small_gloo",
             "small_gloo_unchecked"))
        report["workloads"].append({
            "workload": workload,
            "ddpspawn": ours,
            "reference": ref,
            "lightning": lightning,
            "python_ddp": python,
            "python_ddp_start_methods": python_methods,
            "no_sync": ceiling,
            "lockstep": lockstep,
            "reference_no_sync": ref_ceiling,
            "python_no_sync": python_ceiling,
            "ddpspawn_fork": forked,
            "forkserver_cold": cold,
            "forkserver_prestarted": prestarted,
            "c10d_reducer": c10d,
            "ddpspawn_gloo": ours_gloo,
            "allreduce": results["allreduce"][0],
            "allreduce_gloo": results["allreduce_gloo"][0],
            "startup": startup,
            "call_check": {
                "steps_per_s_unchecked": unchecked_ddp["steps_per_s"],
                "small_allreduce_us": small["small_allreduce_us"],
                "small_allreduce_unchecked_us": small_unchecked["small_allreduce_us"],
                "small_allreduce_gloo_us": small_gloo["small_allreduce_us"],
                "small_allreduce_gloo_unchecked_us": small_gloo_unchecked["small_allreduce_us"],
            },
            "ratios": {
                # checked over unchecked: 1.0 is free.
                "call_check_steps_per_s": ours["steps_per_s"] / unchecked_ddp["steps_per_s"],
                "call_check_small_allreduce_shm":
                    small["small_allreduce_us"] / small_unchecked["small_allreduce_us"],
                "call_check_small_allreduce_gloo":
                    small_gloo["small_allreduce_us"] / small_gloo_unchecked["small_allreduce_us"],
                "launch_to_first_batch": ours["launch_to_first_batch"] / ref["launch_to_first_batch"],
                "steps_per_s": ours["steps_per_s"] / ref["steps_per_s"],
                "peak_rss": ours["peak_rss_mb"] / ref["peak_rss_mb"],
                "lightning_launch_to_first_batch":
                    ours["launch_to_first_batch"] / lightning["launch_to_first_batch"],
                "lightning_steps_per_s": ours["steps_per_s"] / lightning["steps_per_s"],
                "lightning_peak_rss": ours["peak_rss_mb"] / lightning["peak_rss_mb"],
                "vs_no_sync_ceiling": ours["steps_per_s"] / ceiling["steps_per_s"],
                "vs_lockstep_ceiling": ours["steps_per_s"] / lockstep["steps_per_s"],
                "lockstep_vs_no_sync_ceiling": lockstep["steps_per_s"] / ceiling["steps_per_s"],
                # PyTorch's DDP against its own no_sync(), in the same rounds.
                "torch_ddp_vs_its_no_sync_ceiling":
                    ref["steps_per_s"] / ref_ceiling["steps_per_s"],
                # ddpspawn.torch.DistributedDataParallel against mp.spawn + torch's DDP.
                "python_launch_to_first_batch":
                    python["launch_to_first_batch"] / ref["launch_to_first_batch"],
                "python_steps_per_s": python["steps_per_s"] / ref["steps_per_s"],
                "python_vs_cpp_steps_per_s": python["steps_per_s"] / ours["steps_per_s"],
                "python_vs_its_no_sync_ceiling":
                    python["steps_per_s"] / python_ceiling["steps_per_s"],
                "python_no_sync_vs_cpp_no_sync":
                    python_ceiling["steps_per_s"] / ceiling["steps_per_s"],
                "python_peak_rss": python["peak_rss_mb"] / ref["peak_rss_mb"],
                **{f"python_{k}_{m}": v[m] / ref[m]
                   for k, v in python_methods.items() for m in METRICS},
                # ours over Gloo against c10d's Reducer over Gloo: the reducers alone.
                "gloo_reducer_vs_c10d_reducer": ours_gloo["steps_per_s"] / c10d["steps_per_s"],
                "c10d_reducer_vs_no_sync_ceiling": c10d["steps_per_s"] / ceiling["steps_per_s"],
                "fork_launch_to_first_batch":
                    forked["launch_to_first_batch"] / ref["launch_to_first_batch"],
                "fork_steps_per_s": forked["steps_per_s"] / ref["steps_per_s"],
                "fork_peak_rss": forked["peak_rss_mb"] / ref["peak_rss_mb"],
                "forkserver_cold_launch_to_first_batch":
                    cold["launch_to_first_batch"] / ref["launch_to_first_batch"],
                "forkserver_prestarted_launch_to_first_batch":
                    prestarted["launch_to_first_batch"] / ref["launch_to_first_batch"],
                "forkserver_steps_per_s": prestarted["steps_per_s"] / ref["steps_per_s"],
                "forkserver_peak_rss": prestarted["peak_rss_mb"] / ref["peak_rss_mb"],
                # A spawned rank cannot start faster or smaller than this: the floor of spawn.
                "process_start_vs_reference_launch":
                    startup["ddpspawn_process_s"] / ref["launch_to_first_batch"],
                "process_rss_vs_reference_rss":
                    startup["ddpspawn_process_rss_mb"] / ref["peak_rss_mb"],
            },
        })
    if args.json:
        print(json.dumps(report))
        return 0
    print("BLAS: %s (torch's); 2 ranks, gloo, 1 intra-op thread per rank; medians of %d "
          "interleaved rounds"
          % (report["blas"], args.rounds))
    header = "%-6s %-26s %10s %10s %10s %10s %10s %8s %8s %8s"
    print(header % ("", "", "spawn", "fork", "torch DDP", "Lightning", "no-sync", "spawn/ref",
                    "fork/ref", "spawn/L"))
    for w in report["workloads"]:
        o, f, r, lt, c, q = (w["ddpspawn"], w["ddpspawn_fork"], w["reference"], w["lightning"],
                             w["no_sync"], w["ratios"])
        rows = [("launch->1st batch (s)", "launch_to_first_batch", "%10.3f",
                 q["launch_to_first_batch"], q["fork_launch_to_first_batch"],
                 q["lightning_launch_to_first_batch"]),
                ("steps/s per rank", "steps_per_s", "%10.1f", q["steps_per_s"],
                 q["fork_steps_per_s"], q["lightning_steps_per_s"]),
                ("peak RSS per rank (MB)", "peak_rss_mb", "%10.0f", q["peak_rss"],
                 q["fork_peak_rss"], q["lightning_peak_rss"])]
        for i, (label, key, fmt, ratio, fork_ratio, lightning_ratio) in enumerate(rows):
            print(("%-6s %-26s " + " ".join([fmt] * 5) + " %7.2fx %7.2fx %7.2fx") % (
                w["workload"] if i == 0 else "", label, o[key], f[key], r[key], lt[key], c[key],
                ratio, fork_ratio, lightning_ratio))
        print("%-6s %-26s %10.2f (lockstep %.2f; torch DDP / its no_sync %.2f)" % (
            "", "spawn steps/s / no-sync", q["vs_no_sync_ceiling"],
            q["lockstep_vs_no_sync_ceiling"], q["torch_ddp_vs_its_no_sync_ceiling"]))
        fc, fp = w["forkserver_cold"], w["forkserver_prestarted"]
        print("%-6s %-26s launch %.3f s (%.2fx torch DDP) first, %.3f s (%.2fx) prestarted; "
              "%.1f steps/s (%.2fx); %.0f MB (%.2fx)" % (
                  "", "forkserver", fc["launch_to_first_batch"],
                  q["forkserver_cold_launch_to_first_batch"], fp["launch_to_first_batch"],
                  q["forkserver_prestarted_launch_to_first_batch"], fp["steps_per_s"],
                  q["forkserver_steps_per_s"], fp["peak_rss_mb"], q["forkserver_peak_rss"]))
        p = w["python_ddp"]
        print("%-6s %-26s %10.1f steps/s (%.2fx torch DDP), launch %.3f s (%.2fx), %.0f MB "
              "(%.2fx)" % ("", "Python ddpspawn.torch DDP", p["steps_per_s"],
                           q["python_steps_per_s"], p["launch_to_first_batch"],
                           q["python_launch_to_first_batch"], p["peak_rss_mb"],
                           q["python_peak_rss"]))
        print("%-6s %-26s %10.2f (its own no_sync: %.2f; its no_sync / the C++ no-sync %.2f)" % (
            "", "  Python / the C++ path", q["python_vs_cpp_steps_per_s"],
            q["python_vs_its_no_sync_ceiling"], q["python_no_sync_vs_cpp_no_sync"]))
        for k, m in w["python_ddp_start_methods"].items():
            print("%-6s %-26s %10.1f steps/s (%.2fx), launch %.3f s (%.2fx), %.0f MB (%.2fx)" % (
                "", "  Python, " + k, m["steps_per_s"], q[f"python_{k}_steps_per_s"],
                m["launch_to_first_batch"], q[f"python_{k}_launch_to_first_batch"],
                m["peak_rss_mb"], q[f"python_{k}_peak_rss_mb"]))
        print("%-6s %-26s %10.1f steps/s ddpspawn's, %.1f c10d::Reducer's (%.2fx; c10d's is "
              "%.2fx the no-sync ceiling)" % (
                  "", "reducers over Gloo", w["ddpspawn_gloo"]["steps_per_s"],
                  w["c10d_reducer"]["steps_per_s"], q["gloo_reducer_vs_c10d_reducer"],
                  q["c10d_reducer_vs_no_sync_ceiling"]))
        a, g = w["allreduce"], w["allreduce_gloo"]
        print("%-6s %-26s %10.2f ms staged, %.2f ms in place (DDP's buckets), for %.1f MB"
              % ("", "shared-memory all-reduce", a["allreduce_ms"], a["allreduce_in_place_ms"],
                 a["bytes"] / 1e6))
        print("%-6s %-26s %10.2f ms for %.1f MB (%.2f GB/s algorithmic)" % (
            "", "Gloo all-reduce", g["allreduce_ms"], g["bytes"] / 1e6, g["algbw_gb_per_s"]))
        k = w["call_check"]
        print("%-6s %-26s %10.2fx steps/s; one-float all-reduce %.1f us (%.2fx unchecked) on "
              "shared memory, %.1f us (%.2fx) on Gloo" % (
                  "", "cross-rank call check", q["call_check_steps_per_s"],
                  k["small_allreduce_us"], q["call_check_small_allreduce_shm"],
                  k["small_allreduce_gloo_us"], q["call_check_small_allreduce_gloo"]))
        s = w["startup"]
        print("%-6s %-26s %10.3f s %4.0f MB ddpspawn process (%.2fx / %.2fx the reference's "
              "launch / RSS); python3 -c 'import torch': %.3f s %.0f MB" % (
                  "", "bare start, LibTorch load", s["ddpspawn_process_s"],
                  s["ddpspawn_process_rss_mb"], q["process_start_vs_reference_launch"],
                  q["process_rss_vs_reference_rss"], s["python_import_torch_s"],
                  s["python_import_torch_rss_mb"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
