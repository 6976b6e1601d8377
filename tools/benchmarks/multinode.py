"""tools/bench --multinode: the hierarchical all-reduce of a job of 2 hosts x 2 ranks against
Gloo among all 4 ranks (DDPSPAWN_SHM_ALLREDUCE=0), in the same run. The hosts are two network
namespaces on a bridge (tests/testing/namespace_hosts.py), one ddpspawn_bench launcher in each;
a link rate (tc's token bucket on each host's end) stands in for the network between real hosts.
Measures one all-reduce of the MLP's gradient size (7.5 MB, staged and in place) and DDP's steady
steps/s on the MLP, and post-local SGD's on the hierarchical path (each node's gradient mean every
step, the parameters over both nodes every 4 steps); medians over interleaved rounds. Needs root (namespaces) and the tc command.
"""
import json
import os
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))), "tests", "testing"))
from namespace_hosts import address, namespace_hosts  # noqa: E402


def run_job(bench, names, hierarchical, args):
    """One job on both hosts; node 0's JSON line."""
    env = dict(os.environ, DDPSPAWN_SHM_ALLREDUCE="1" if hierarchical else "0")
    nodes = [subprocess.Popen(["ip", "netns", "exec", name, bench, *args, "--nprocs", "2",
                               "--nnodes", "2", "--node-rank", str(node), "--master-addr",
                               address(0), "--master-port", "29500"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
             for node, name in enumerate(names)]
    outputs = [node.communicate(timeout=600) for node in nodes]
    for node, (out, err) in zip(nodes, outputs):
        if node.returncode != 0:
            sys.exit(f"tools/bench --multinode: {' '.join(args)} failed:\n{err[-4000:]}")
    return json.loads(outputs[0][0].strip().splitlines()[-1])


def measure(bench, rates, rounds, steps, warmup):
    results = {}
    for rate in rates:
        runs = {(path, what): [] for path in ("hierarchical", "gloo")
                for what in ("allreduce", "ddp")}
        runs[("hierarchical", "post_localsgd")] = []
        with namespace_hosts(2, None if rate == "none" else rate) as names:
            for _ in range(rounds):
                for path in ("hierarchical", "gloo"):
                    runs[(path, "allreduce")].append(run_job(
                        bench, names, path == "hierarchical",
                        ["--workload", "mlp", "--mode", "allreduce", "--steps", str(steps // 5),
                         "--warmup", "2"]))
                    runs[(path, "ddp")].append(run_job(
                        bench, names, path == "hierarchical",
                        ["--workload", "mlp", "--mode", "ddp", "--steps", str(steps),
                         "--warmup", str(warmup)]))
                runs[("hierarchical", "post_localsgd")].append(run_job(
                    bench, names, True,
                    ["--workload", "mlp", "--mode", "post_localsgd", "--averaging-period", "4",
                     "--steps", str(steps), "--warmup", str(warmup)]))
        figures = {}
        for path in ("hierarchical", "gloo"):
            figures[path] = {
                "allreduce_ms": statistics.median(
                    r["allreduce_ms"] for r in runs[(path, "allreduce")]),
                "allreduce_in_place_ms": statistics.median(
                    r["allreduce_in_place_ms"] for r in runs[(path, "allreduce")]),
                "steps_per_s": statistics.median(r["steps_per_s"] for r in runs[(path, "ddp")]),
            }
        h, g = figures["hierarchical"], figures["gloo"]
        h["post_localsgd_steps_per_s"] = statistics.median(
            r["steps_per_s"] for r in runs[("hierarchical", "post_localsgd")])
        figures["ratios"] = {
            "allreduce_time": h["allreduce_ms"] / g["allreduce_ms"],
            "allreduce_in_place_time": h["allreduce_in_place_ms"] / g["allreduce_in_place_ms"],
            "steps_per_s": h["steps_per_s"] / g["steps_per_s"],
            "post_localsgd_vs_ddp_steps_per_s": h["post_localsgd_steps_per_s"] / h["steps_per_s"],
        }
        results[rate] = figures
    return results


def report(results, as_json):
    if as_json:
        print(json.dumps(results, indent=2))
        return
    print("2 hosts x 2 ranks, MLP (7.5 MB of gradients): hierarchical vs Gloo among all ranks")
    print(f"{'link rate':>10} {'all-reduce ms (staged / in place)':>38} {'steps/s':>16} "
          f"{'time ratio':>12} {'steps/s ratio':>14} {'post-local SGD /4 vs DDP':>26}")
    for rate, f in results.items():
        h, g, r = f["hierarchical"], f["gloo"], f["ratios"]
        print(f"{rate:>10} {h['allreduce_ms']:8.1f} / {h['allreduce_in_place_ms']:5.1f} vs "
              f"{g['allreduce_ms']:6.1f} / {g['allreduce_in_place_ms']:5.1f} "
              f"{h['steps_per_s']:6.2f} vs {g['steps_per_s']:5.2f} "
              f"{r['allreduce_in_place_time']:11.2f}x {r['steps_per_s']:13.2f}x "
              f"{h['post_localsgd_steps_per_s']:9.2f} ({r['post_localsgd_vs_ddp_steps_per_s']:.2f}x)")
