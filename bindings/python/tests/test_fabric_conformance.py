"""One Fabric loop, two front ends: tests/fabric/fabric_main's "train" mode (C++, ddpspawn::Fabric)
and the same loop under Lightning's own Fabric with strategy="ddpspawn" (Python), 2 ranks each:
same initial weights (the C++ program's: LibTorch and PyTorch draw this model's differently from
one seed, 0.8 apart), data, model and steps (SGD with momentum, two micro-batches a step with the first under
no_backward_sync, gradients clipped to norm 0.05). Their final weights must agree; the test prints
the largest difference."""

import subprocess
import tempfile
from pathlib import Path

import numpy as np
import pytest
import torch

import ddpspawn.lightning  # noqa: F401  (registers strategy="ddpspawn" with Lightning)
from conftest import REPO_ROOT

STEPS = 4
MAX_NORM = 0.05


def fabric_main():
    """tests/fabric/fabric_main: in Bazel's runfiles (the working directory), else as Bazel built it
    in this clone."""
    for path in (Path.cwd() / "tests/fabric/fabric_main",
                 REPO_ROOT / "bazel-bin/tests/fabric/fabric_main"):
        if path.is_file():
            return str(path)
    raise FileNotFoundError("tests/fabric/fabric_main: build //tests/fabric:fabric_main first")


def inputs(step, micro):
    torch.manual_seed(100 * step + micro)
    return torch.randn(16, 4)


def make_model(initial):
    """The C++ program's model, from its parameters flattened in order."""
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
    torch.nn.utils.vector_to_parameters(torch.from_numpy(initial), model.parameters())
    return model


def fabric_loop(fabric, initial):
    model = make_model(initial)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    model, optimizer = fabric.setup(model, optimizer)
    half = 16 // fabric.world_size
    first = fabric.global_rank * half
    for step in range(STEPS):
        optimizer.zero_grad()
        for micro in range(2):
            with fabric.no_backward_sync(model, enabled=micro == 0):
                x = inputs(step, micro)[first:first + half]
                fabric.backward((model(x) - x.sum(1, keepdim=True)).square().mean())
        fabric.clip_gradients(model, optimizer, max_norm=MAX_NORM)
        optimizer.step()
    wrapper = type(model._forward_module).__module__
    return wrapper, np.concatenate([p.detach().flatten().numpy() for p in model.parameters()])


@pytest.fixture(scope="module")
def cpp_run():
    """The C++ loop's parameters before and after training, flattened in order."""
    with tempfile.TemporaryDirectory() as out:
        run = subprocess.run([fabric_main(), "train", out],
                             capture_output=True, text=True, timeout=300)
        assert run.returncode == 0, run.stdout + run.stderr
        return (np.loadtxt(Path(out) / "initial.txt", dtype=np.float32),
                np.loadtxt(Path(out) / "weights.txt", dtype=np.float32))


def test_cpp_and_python_fabric_loops_end_with_the_same_weights(cpp_run, capsys):
    from lightning_models import FABRIC

    initial, cpp = cpp_run
    wrapper, python = FABRIC.Fabric(accelerator="cpu", devices=2, strategy="ddpspawn").launch(
        fabric_loop, initial)
    assert wrapper == "ddpspawn.torch"  # ddpspawn's reducer averaged Python's gradients
    assert cpp.shape == python.shape == (4 * 8 + 8 + 8 + 1,)
    worst = float(np.abs(cpp - python).max())
    moved = float(np.abs(python - initial).max())
    with capsys.disabled():
        print(f"\nFabric conformance, C++ vs Python (2 ranks, {STEPS} steps): largest weight "
              f"difference {worst:.3g} (the weights moved by up to {moved:.3g})")
    assert moved > 1e-2  # the loop trained
    # Bit-equal: the same CPU kernels, and the same shared-memory sums of the same buckets.
    assert worst == 0, worst


def test_the_loop_differs_without_averaging(cpp_run):
    """The comparison can fail: one process on rank 0's half of every batch ends elsewhere."""
    initial, cpp = cpp_run
    model = make_model(initial)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    for step in range(STEPS):
        optimizer.zero_grad()
        for micro in range(2):
            x = inputs(step, micro)[:8]
            (model(x) - x.sum(1, keepdim=True)).square().mean().backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), MAX_NORM)
        optimizer.step()
    alone = np.concatenate([p.detach().flatten().numpy() for p in model.parameters()])
    assert float(np.abs(cpp - alone).max()) > 1e-4
