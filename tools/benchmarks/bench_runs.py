"""What every tools/bench measurement shares: the programs it runs (this checkout's Bazel-built
ddpspawn_bench and the Python references) and one run's JSON, medians over rounds. bench.py and
its sweeps (models_sweep.py, zero_sweep.py) import it."""
import json
import os
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DDPSPAWN = os.path.join(ROOT, "bazel-bin", "tools", "benchmarks", "ddpspawn_bench")
REFERENCE = os.path.join(ROOT, "tools", "benchmarks", "reference_ddp.py")
LIGHTNING = os.path.join(ROOT, "tools", "benchmarks", "reference_lightning.py")
PYTHON_DDP = os.path.join(ROOT, "tools", "benchmarks", "python_ddp.py")
# ddpspawn's Python binding from this checkout, on the library Bazel built.
PYTHON_DDP_ENV = {"PYTHONPATH": os.path.join(ROOT, "bindings", "python"),
                  "DDPSPAWN_LIBRARY": os.path.join(ROOT, "bazel-bin", "capi", "libddpspawn.so.1")}
METRICS = ("launch_to_first_batch", "steps_per_s", "peak_rss_mb")


def run(command, env=None):
    """Runs one measurement (each program times its own launch call)."""
    out = subprocess.run(command, capture_output=True, text=True,
                         env=dict(os.environ, **(env or {})))
    if out.returncode != 0:
        sys.exit("tools/bench: %s exited with %d:\n%s" % (" ".join(command), out.returncode,
                                                          out.stderr[-4000:]))
    return json.loads(out.stdout.strip().splitlines()[-1])


def median_of(runs):
    """Each number's median over the runs; a list (steps/s by rank) is taken
    element by element."""
    def median(values):
        if isinstance(values[0], list):
            return [statistics.median(column) for column in zip(*values)]
        return statistics.median(values)

    return {key: median([r[key] for r in runs]) for key in runs[0]}
