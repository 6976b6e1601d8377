"""Every GPU check of ddpspawn in one run (see docs/gpu.md).

Runs on a machine with a CUDA GPU and torch 2.11 in this python3, from a bundle that
`tools/gpu_check prepare` built (binaries + the libraries they need beyond torch's, + the digits
data). Each check is a real run of the ddpspawn CLI, the C ABI through the Python binding, or the
benchmark against PyTorch's DDP. Writes OUT/gpu_check.json and OUT/gpu_check.md; exits 1 when a
check fails.

Usage: python3 tools/gpu/gpu_check.py --bundle DIR --out DIR [--only NAME,...]
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))


class Check:
    def __init__(self, bundle, scratch):
        self.bundle = bundle
        self.scratch = scratch
        self.cli = os.path.join(bundle, "bin", "ddpspawn")
        self.data = os.path.join(bundle, "data", "digits")

    def run_cli(self, args, timeout=240):
        started = time.time()
        proc = subprocess.run([self.cli] + args, capture_output=True, text=True, timeout=timeout)
        return proc, time.time() - started

    def fit(self, name, extra, epochs=20, timeout=240):
        root = os.path.join(self.scratch, name)
        args = ["fit", "--model", "mlp:64,128,10", "--train", f"{self.data}/train.csv",
                "--max-epochs", str(epochs), "--optimizer", "adam", "--lr", "0.003",
                "--batch-size", "32", "--default-root-dir", root, "--progress", "false",
                "--seed", "1"] + extra
        proc, seconds = self.run_cli(args, timeout)
        if proc.returncode != 0:
            raise AssertionError(f"fit {' '.join(extra)} failed: {proc.stderr.strip()[-800:]}")
        values = dict(line.split("=", 1) for line in proc.stdout.splitlines() if "=" in line)
        return values, seconds

    def test_accuracy(self, checkpoint, extra):
        proc, _ = self.run_cli(["test", "--model", "mlp:64,128,10", "--data",
                                f"{self.data}/test.csv", "--checkpoint", checkpoint] + extra)
        if proc.returncode != 0:
            raise AssertionError(f"test failed: {proc.stderr.strip()[-800:]}")
        match = re.search(r"metric\.test_accuracy=([0-9.]+)", proc.stdout)
        if not match:
            raise AssertionError(f"no test_accuracy in {proc.stdout!r}")
        return float(match.group(1))

    @staticmethod
    def loss_scale(checkpoint):
        """16-mixed's loss scale saved in a checkpoint, or None."""
        import torch

        archive = torch.jit.load(checkpoint, map_location="cpu")._c
        return archive.getattr("grad_scaler.scale") if archive.hasattr("grad_scaler.scale") else None

    @staticmethod
    def weights(checkpoint):
        """The MLP's weights in a ddpspawn checkpoint (a LibTorch archive torch.jit reads)."""
        import torch

        archive = torch.jit.load(checkpoint, map_location="cpu")._c
        names = [f"model.{i}.{k}" for i in range(8) for k in ("weight", "bias")]
        return {n: archive.getattr(n) for n in names if archive.hasattr(n)}


def check_version(c):
    proc, _ = c.run_cli(["--version"])
    info = dict(line.split("=", 1) for line in proc.stdout.split())
    assert info["torch"].startswith("2."), info
    assert "nccl" in info["backends"], info
    assert int(info["cuda_devices"]) >= 1, info
    return " ".join(f"{k}={v}" for k, v in info.items())


def check_nccl_collectives(c):
    """World of 1 on NCCL: every collective of the C ABI (host buffers staged to the GPU)."""
    env = dict(os.environ, PYTHONPATH=os.path.join(REPO, "bindings", "python"),
               DDPSPAWN_LIBRARY=os.path.join(c.bundle, "lib", "libddpspawn.so.1"))
    script = os.path.join(HERE, "nccl_collectives.py")
    proc = subprocess.run([sys.executable, script], capture_output=True, text=True, env=env,
                          timeout=180)
    assert proc.returncode == 0, proc.stderr.strip()[-800:]
    return proc.stdout.strip().splitlines()[-1]


def check_hooks(c):
    """A DDP training run on CUDA (world of 1, NCCL) with each comm hook."""
    results = []
    for hook in ["allreduce", "fp16", "bf16", "powersgd"]:
        values, seconds = c.fit(f"hook_{hook}", ["--accelerator", "cuda", "--devices", "1",
                                                 "--ddp-comm-hook", hook], epochs=8)
        accuracy = c.test_accuracy(values["checkpoint"], ["--accelerator", "cuda", "--devices", "1"])
        assert accuracy > 0.85, f"{hook}: test accuracy {accuracy}"
        results.append(f"{hook} {accuracy:.3f}")
    return "test accuracy after 8 epochs: " + ", ".join(results)


def check_gloo_two_ranks_one_gpu(c):
    """2 ranks sharing cuda:0 over Gloo reach what 1 rank with twice the batch reaches."""
    two, _ = c.fit("gloo2", ["--accelerator", "cuda", "--devices", "0,0",
                             "--process-group-backend", "gloo", "--batch-size", "16",
                             "--shuffle", "false", "--optimizer", "sgd", "--lr", "0.1"], epochs=3)
    one, _ = c.fit("gloo1", ["--accelerator", "cuda", "--devices", "1", "--batch-size", "32",
                             "--shuffle", "false", "--optimizer", "sgd", "--lr", "0.1"], epochs=3)
    a, b = c.weights(two["checkpoint"]), c.weights(one["checkpoint"])
    assert a.keys() == b.keys() and len(a) == 4, (a.keys(), b.keys())
    worst = max((a[n] - b[n]).abs().max().item() for n in a)
    assert worst < 1e-4, f"weights differ by {worst}"
    return (f"after {two['global_step']} steps of each, the weights of the two runs differ by "
            f"at most {worst:.2e}")


def check_nccl_shared_gpu_refused(c):
    started = time.time()
    proc, _ = c.run_cli(["fit", "--model", "mlp:64,128,10", "--train", f"{c.data}/train.csv",
                         "--accelerator", "cuda", "--devices", "0,0", "--max-epochs", "1",
                         "--timeout", "120", "--default-root-dir",
                         os.path.join(c.scratch, "shared")], timeout=180)
    seconds = time.time() - started
    assert proc.returncode != 0, "two NCCL ranks on one GPU did not fail"
    assert "share one GPU" in proc.stderr, proc.stderr[-800:]
    return f"refused in {seconds:.1f} s: " + proc.stderr.strip().splitlines()[-1][:300]


def check_precision(c):
    results = []
    for precision in ["16-mixed", "bf16-mixed"]:
        values, _ = c.fit(f"precision_{precision}", ["--accelerator", "cuda", "--devices", "1",
                                                     "--precision", precision], epochs=10)
        accuracy = c.test_accuracy(values["checkpoint"], ["--accelerator", "cuda", "--devices", "1"])
        assert accuracy > 0.85, f"{precision}: test accuracy {accuracy}"
        scale = c.loss_scale(values["checkpoint"])
        # 16-mixed's loss scaler ran and its scale is in the checkpoint; bf16 needs none.
        assert (scale is not None and scale > 0) == (precision == "16-mixed"), (precision, scale)
        results.append(f"{precision} {accuracy:.3f}" +
                       (f" (loss scale {scale:g} in the checkpoint)" if scale else ""))
    return "test accuracy after 10 epochs: " + ", ".join(results)


def check_sharding_cuda(c):
    """shard_grad_op and full_shard on CUDA tensors: 2 ranks sharing cuda:0 over Gloo (the
    reduce-scatter and the gathers of CUDA tensors) against no_shard's weights, and full_shard with
    16-mixed on NCCL (world of 1), whose loss scaler unscales each rank's rows."""
    base = ["--accelerator", "cuda", "--devices", "0,0", "--process-group-backend", "gloo",
            "--shuffle", "false"]
    runs = {s: c.fit(f"sharding_{s}", base + ["--sharding-strategy", s], epochs=3)[0]
            for s in ("no_shard", "shard_grad_op", "full_shard")}
    reference = c.weights(runs["no_shard"]["checkpoint"])
    worst = {}
    for strategy in ("shard_grad_op", "full_shard"):
        weights = c.weights(runs[strategy]["checkpoint"])
        assert weights.keys() == reference.keys() and weights, (weights.keys(), reference.keys())
        worst[strategy] = max((weights[n] - reference[n]).abs().max().item() for n in reference)
        assert worst[strategy] < 1e-5, f"{strategy}: weights differ by {worst[strategy]}"
    mixed, _ = c.fit("sharding_full_shard_16", ["--accelerator", "cuda", "--devices", "1",
                                                "--precision", "16-mixed",
                                                "--sharding-strategy", "full_shard"], epochs=10)
    accuracy = c.test_accuracy(mixed["checkpoint"], ["--accelerator", "cuda", "--devices", "1"])
    assert accuracy > 0.85, f"full_shard 16-mixed: test accuracy {accuracy}"
    return (f"2 ranks on cuda:0 over Gloo, against no_shard: shard_grad_op "
            f"{worst['shard_grad_op']:.1e}, full_shard {worst['full_shard']:.1e}; full_shard "
            f"16-mixed test accuracy {accuracy:.3f}")


def check_digits_demo(c):
    values, seconds = c.fit("digits", ["--accelerator", "cuda", "--devices", "1"], epochs=30)
    accuracy = c.test_accuracy(values["checkpoint"], ["--accelerator", "cuda", "--devices", "1"])
    assert accuracy > 0.93, f"test accuracy {accuracy}"
    return f"held-out accuracy {accuracy:.4f} on 359 digits, {seconds:.1f} s to train"


def check_bench(c):
    """Steps/s of ddpspawn and PyTorch's DDP, world of 1 on NCCL, same model, same run."""
    rows = []
    bench = os.path.join(c.bundle, "bin", "ddpspawn_bench")
    reference = os.path.join(REPO, "tools", "benchmarks", "reference_ddp.py")
    for workload, steps in [("mlp", 300), ("conv", 300), ("resnet18", 100), ("gpt", 100)]:
        figures = {"ddpspawn": [], "torch": []}
        common = ["--workload", workload, "--nprocs", "1", "--device", "cuda", "--steps",
                  str(steps), "--warmup", str(steps // 10)]
        for _ in range(3):  # interleaved
            for who, cmd in [("ddpspawn", [bench] + common),
                             ("torch", [sys.executable, reference] + common)]:
                proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
                assert proc.returncode == 0, f"{who} {workload}: {proc.stderr[-600:]}"
                figures[who].append(json.loads(proc.stdout.strip().splitlines()[-1])["steps_per_s"])
        best = {k: max(v) for k, v in figures.items()}
        rows.append(f"{workload}: ddpspawn {best['ddpspawn']:.0f} steps/s, torch DDP "
                    f"{best['torch']:.0f} steps/s, ratio {best['ddpspawn'] / best['torch']:.2f}")
    return "; ".join(rows)


CHECKS = [
    ("version", check_version),
    ("nccl_collectives", check_nccl_collectives),
    ("comm_hooks_cuda", check_hooks),
    ("gloo_2ranks_1gpu_equivalence", check_gloo_two_ranks_one_gpu),
    ("nccl_shared_gpu_refused", check_nccl_shared_gpu_refused),
    ("precision_16_bf16", check_precision),
    ("sharding_cuda", check_sharding_cuda),
    ("digits_demo_cuda", check_digits_demo),
    ("bench_steps_per_s", check_bench),
]


def write_reports(results, out):
    with open(os.path.join(out, "gpu_check.json"), "w") as f:
        json.dump(results, f, indent=2)
    with open(os.path.join(out, "gpu_check.md"), "w") as f:
        f.write("| check | result | seconds | detail |\n|---|---|---|---|\n")
        for r in results:
            detail = r["detail"].replace("|", "/").replace("\n", " ")
            f.write(f"| {r['check']} | {'pass' if r['ok'] else 'FAIL'} | {r['seconds']} | {detail} |\n")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--bundle", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--only", default="")
    args = parser.parse_args()
    only = set(filter(None, args.only.split(",")))
    os.makedirs(args.out, exist_ok=True)
    results = []
    with tempfile.TemporaryDirectory() as scratch:
        check = Check(os.path.abspath(args.bundle), scratch)
        for name, fn in CHECKS:
            if only and name not in only:
                continue
            started = time.time()
            try:
                detail, ok = fn(check), True
            except Exception as e:  # a failed check is reported, the others still run
                detail, ok = f"{type(e).__name__}: {e}", False
            results.append({"check": name, "ok": ok, "seconds": round(time.time() - started, 1),
                            "detail": detail})
            print(f"{'PASS' if ok else 'FAIL'} {name} ({results[-1]['seconds']} s): {detail}",
                  flush=True)
            write_reports(results, args.out)  # after each check: a cut-short run keeps its part
    failed = sum(not r["ok"] for r in results)
    print(f"gpu_check: {len(results) - failed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
