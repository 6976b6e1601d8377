"""A CPU-only job maps none of CUDA's big libraries (libtorch_cuda, c10_cuda, NCCL, cuDNN,
cuBLAS): neither the spawned ranks through their collectives nor the launcher through those and
a whole 2-rank fit (whose forked ranks are not looked at). They load only
when CUDA is asked for (core/comm/cuda/cuda_support.h; tests/core:cuda_support_test checks that
loading them maps them). Runs in a fresh interpreter that never imports torch, which would load
them itself. (The CUDA wheel's libtorch_cpu needs the small CUDA runtime and CUPTI; those are
not counted.)"""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

PACKAGE_ROOT = Path(__file__).resolve().parent.parent  # holds ddpspawn/

SCRIPT = textwrap.dedent(
    """
    import json, sys
    import ddpspawn

    HEAVY = ("libtorch_cuda", "libc10_cuda", "libnccl", "libcudnn", "libcublas")

    def cuda_maps():
        with open("/proc/self/maps") as f:
            return sorted({line.split()[-1] for line in f if any(h in line for h in HEAVY)})

    def work(ctx):
        ctx.all_reduce([1.0], op="sum")
        return ctx.all_gather_object(cuda_maps())  # every rank's

    if __name__ == "__main__":
        out = {"ranks": ddpspawn.spawn(work, nprocs=2)}
        with open(sys.argv[1] + "/train.csv", "w") as f:
            f.writelines(f"{i / 32},{1 - i / 32},{i % 3}\\n" for i in range(32))
        ddpspawn.fit("mlp:2,8,3", sys.argv[1] + "/train.csv", nprocs=2, max_epochs=1,
                     default_root_dir=sys.argv[1] + "/fit")
        out["launcher"] = cuda_maps()
        out["torch_imported"] = "torch" in sys.modules
        print(json.dumps(out))
    """
)


def test_a_cpu_job_maps_no_cuda_library(tmp_path):
    script = tmp_path / "cpu_job.py"
    script.write_text(SCRIPT)
    done = subprocess.run([sys.executable, str(script), str(tmp_path)], capture_output=True,
                          text=True, timeout=300,
                          env=dict(os.environ, PYTHONPATH=str(PACKAGE_ROOT)))
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["torch_imported"] is False
    assert out["ranks"] == [[], []], "a rank of a CPU job mapped CUDA libraries"
    assert out["launcher"] == [], "the launcher of a CPU job mapped CUDA libraries"
