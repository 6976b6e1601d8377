"""Jobs of two (and three) hosts on one machine: network namespaces on a
bridge (10.231.0.1, 10.231.0.2, ..., addresses that exist only inside them:
tests/testing/namespace_hosts.py), one launcher in each. Needs root to create
them; under DDPSPAWN_REQUIRE_ALL_TESTS=1 (CI) a test that cannot is a failure,
not a skip."""

import importlib.util
import json
import math
import os
import signal
import struct
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, Iterator, List, Tuple

import pytest

from namespace_hosts import Unavailable, address, namespace_hosts
from test_restarts import logged_steps, wait_for_steps
from test_torchrun import CLI, TEST_WORKER, TORCHRUN, evaluate, parse, rank_pid, write_csv

HOSTS = (address(0), address(1))
PORT = "29500"  # inside the namespaces: nothing else listens there


def hosts_or_skip(count: int) -> Iterator[Tuple[str, ...]]:
    """`count` hosts for one test; a skip where they cannot be made (a
    failure in CI: see the module's docstring)."""
    context = namespace_hosts(count)
    try:
        names = context.__enter__()
    except Unavailable as e:
        pytest.skip(str(e))
    try:
        yield names
    finally:
        context.__exit__(None, None, None)


@pytest.fixture
def hosts() -> Iterator[Tuple[str, ...]]:
    yield from hosts_or_skip(2)


@pytest.fixture
def three_hosts() -> Iterator[Tuple[str, ...]]:
    yield from hosts_or_skip(3)


# Each host gets a /dev/shm and a /tmp of its own (tmpfs, in the mount namespace that `ip netns
# exec` makes for the command), as separate machines have: what one node's launcher or ranks leave
# there, another node cannot see or use. The tests' own directory (pytest's base temporary
# directory, $0 below) stays shared, as a network filesystem would be, and so does the ddpspawn
# package's source ($1: a checkout under /tmp, as a CI clone may be); an open descriptor keeps each
# reachable once /tmp is covered.
PRIVATE_HOST = ('set -e; exec 3<"$0" 4<"$1"; '
                'mount -t tmpfs -o mode=1777 ddps-host-shm /dev/shm; '
                'mount -t tmpfs -o mode=1777 ddps-host-tmp /tmp; '
                'mkdir -p "$0"; mount --no-canonicalize --bind /proc/self/fd/3 "$0"; '
                'mkdir -p "$1"; mount --no-canonicalize --bind /proc/self/fd/4 "$1"; '
                'exec 3<&- 4<&-; shift; exec "$@"')
SHARED: List[Path] = []  # pytest's base temporary directory, set once per session


@pytest.fixture(autouse=True, scope="session")
def shared_directory(tmp_path_factory) -> None:
    SHARED[:] = [tmp_path_factory.getbasetemp().resolve()]


def package_source() -> str:
    """Where the ddpspawn package's files really are: a checkout under /tmp
    would vanish behind a host's private /tmp, so in_host binds it back."""
    spec = importlib.util.find_spec("ddpspawn")
    assert spec is not None and spec.origin is not None, "ddpspawn is not on sys.path"
    return str(Path(spec.origin).resolve().parent)


def in_host(namespace: str, *command: str, env: Dict[str, str] = {}) -> subprocess.Popen:
    return subprocess.Popen(["ip", "netns", "exec", namespace, "sh", "-c", PRIVATE_HOST,
                             str(SHARED[0]), package_source(), *command],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=dict(os.environ, **env))


def test_each_host_has_its_own_dev_shm_and_tmp_and_shares_the_test_directory(hosts, tmp_path):
    """What host 0 writes in /dev/shm and /tmp, host 1 does not see; both see
    the test's directory."""
    tag = f"ddps-private-{os.getpid()}"
    write = in_host(hosts[0], "sh", "-c",
                    f'touch /dev/shm/{tag} /tmp/{tag} "$0/from-host0"', str(tmp_path))
    assert finish(write)[0] == 0
    assert (tmp_path / "from-host0").exists()
    assert not Path(f"/dev/shm/{tag}").exists() and not Path(f"/tmp/{tag}").exists()
    look = in_host(hosts[1], "sh", "-c",
                   f'ls /dev/shm/{tag} /tmp/{tag} 2>/dev/null; ls "$0/from-host0"', str(tmp_path))
    code, out, _ = finish(look)
    assert code == 0 and out.strip() == str(tmp_path / "from-host0"), out


def finish(process: subprocess.Popen, timeout: float = 120) -> Tuple[int, str, str]:
    out, err = process.communicate(timeout=timeout)
    return process.returncode, out, err


def node_flags(node: int, master: str = HOSTS[0]) -> List[str]:
    return ["--nnodes", "2", "--node-rank", str(node), "--master-addr", master,
            "--master-port", PORT]


FIT = ["fit", "--model", "mlp:4,8,3", "--max-epochs", "3", "--batch-size", "4", "--seed", "5",
       "--lr", "0.3", "--progress", "false"]


def fit_on_one_host(train: Path, root: Path, env: Dict[str, str] = {},
                    nprocs: int = 4) -> Dict[str, str]:
    run = subprocess.run([str(CLI), *FIT, "--train", str(train), "--nproc-per-node", str(nprocs),
                          "--default-root-dir", str(root)],
                         capture_output=True, text=True, timeout=120, env=dict(os.environ, **env))
    assert run.returncode == 0, run.stderr
    return parse(run.stdout)


def expect_collectives_ok(nodes: List[subprocess.Popen], ranks: int, path: str) -> None:
    """Every node's launcher succeeds, and each rank passed its checks on `path`."""
    results = [finish(node) for node in nodes]
    for code, out, err in results:
        assert code == 0, err[-3000:]
    lines = sorted(line for _, out, _ in results for line in out.splitlines())
    assert lines == [f"collectives ok on rank {r} of {ranks} ({path})" for r in range(ranks)]


def test_collectives_across_two_hosts_of_two_ranks_under_torchrun(hosts):
    nodes = [in_host(ns, *TORCHRUN, "--nnodes", "2", "--node-rank", str(node), "--master-addr",
                     HOSTS[0], "--master-port", PORT, "--nproc-per-node", "2", "--no-python",
                     str(TEST_WORKER), "collectives")
             for node, ns in enumerate(hosts)]
    expect_collectives_ok(nodes, 4, "gloo")


@pytest.mark.parametrize("settings", [("1", "1"), ("0", "0"), ("1", "0")])
def test_collectives_across_two_hosts_of_two_ranks_under_ddpspawn_launchers(hosts, settings):
    """Each node's ranks sum through shared memory and its rank 0 with the
    other node's through Gloo (hierarchical), unless DDPSPAWN_SHM_ALLREDUCE=0
    on any node: the worker checks every collective's values, and which path
    it took."""
    expected = "1" if settings == ("1", "1") else "0"
    nodes = [in_host(ns, str(TEST_WORKER), "node", "2", str(node), HOSTS[0], PORT,
                     env={"DDPSPAWN_SHM_ALLREDUCE": setting,
                          "TEST_EXPECT_SHARED_MEMORY": expected})
             for node, (ns, setting) in enumerate(zip(hosts, settings))]
    expect_collectives_ok(nodes, 4, "shared memory" if expected == "1" else "gloo")


@pytest.mark.parametrize("shared_memory", ["1", "0"])
def test_collectives_across_three_hosts_of_two_ranks(three_hosts, shared_memory):
    """Three leaders sum the nodes' sums through Gloo (a ring of three)."""
    nodes = [in_host(ns, str(TEST_WORKER), "node", "3", str(node), HOSTS[0], PORT,
                     env={"DDPSPAWN_SHM_ALLREDUCE": shared_memory})
             for node, ns in enumerate(three_hosts)]
    expect_collectives_ok(nodes, 6, "shared memory" if shared_memory == "1" else "gloo")


def weights(checkpoint: str, out: Path) -> Dict[str, List[float]]:
    """The checkpoint's float32 tensors by name (its safetensors export)."""
    run = subprocess.run([str(CLI), "export", "--checkpoint", checkpoint, "--format",
                          "safetensors", "--output", str(out)],
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    raw = out.read_bytes()
    size = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + size])
    body = raw[8 + size:]
    tensors = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        assert info["dtype"] == "F32", info
        begin, end = info["data_offsets"]
        tensors[name] = list(struct.unpack(f"<{(end - begin) // 4}f", body[begin:end]))
    return tensors


@pytest.mark.parametrize("shared_memory", ["1", "0"])
def test_fit_on_two_hosts_of_two_trains_like_one_host_of_four(hosts, tmp_path, shared_memory):
    train = write_csv(tmp_path / "train.csv")
    env = {"DDPSPAWN_SHM_ALLREDUCE": shared_memory}
    nodes = [in_host(ns, str(CLI), *FIT, "--train", str(train), "--nproc-per-node", "2",
                     "--default-root-dir", str(tmp_path / f"node{node}"), *node_flags(node),
                     env=env)
             for node, ns in enumerate(hosts)]
    (code0, out0, err0), (code1, out1, err1) = [finish(node) for node in nodes]
    assert code0 == 0 and code1 == 0, err0[-3000:] + err1[-3000:]
    two_hosts = parse(out0)
    assert parse(out1) == two_hosts  # rank 0's result, handed over by node 0's launcher
    one_host = fit_on_one_host(train, tmp_path / "one", env=env)
    # 96 samples, batch 4 per rank, 4 ranks: 6 steps an epoch.
    assert two_hosts["global_step"] == one_host["global_step"] == "18"
    got, want = (weights(r["checkpoint"], tmp_path / f"{i}.safetensors")
                 for i, r in enumerate((two_hosts, one_host)))
    assert got.keys() == want.keys()
    loss, reference = (float(r["metric.train_loss_epoch"]) for r in (two_hosts, one_host))
    if shared_memory == "0":
        # Gloo on both: the float32 sums run in the same order, to the last bit.
        assert got == want
        assert loss == reference
    else:
        # Two hosts sum each node's two ranks through shared memory, then the
        # two nodes' sums through Gloo: (g0 + g1) + (g2 + g3); one host sums
        # the four ranks in rank order. Measured: the weights at most 5.96e-8
        # apart (one float32 step near 0.5), the bound 4 times that; the epoch
        # loss 2.5e-9 apart (relative) on one machine and 1.2e-8 on another
        # (their BLAS kernels round differently), the bound one float32 step
        # (the batches' losses are float32, averaged in double).
        for name in got:
            assert max(abs(a - b) for a, b in zip(got[name], want[name])) <= 2.4e-7, name
        assert math.isclose(loss, reference, rel_tol=1.2e-7, abs_tol=0), (loss, reference)


@pytest.mark.parametrize("shared_memory", ["1", "0"])
def test_fit_on_three_hosts_of_two_trains_like_one_host_of_six(three_hosts, tmp_path,
                                                               shared_memory):
    train = write_csv(tmp_path / "train.csv")
    env = {"DDPSPAWN_SHM_ALLREDUCE": shared_memory}
    flags = ["--nnodes", "3", "--master-addr", HOSTS[0], "--master-port", PORT]
    nodes = [in_host(ns, str(CLI), *FIT, "--train", str(train), "--nproc-per-node", "2",
                     "--default-root-dir", str(tmp_path / f"node{node}"), *flags,
                     "--node-rank", str(node), env=env)
             for node, ns in enumerate(three_hosts)]
    results = [finish(node) for node in nodes]
    assert all(code == 0 for code, _, _ in results), "".join(e[-2000:] for _, _, e in results)
    three = parse(results[0][1])
    assert all(parse(out) == three for _, out, _ in results)
    one = fit_on_one_host(train, tmp_path / "one", env=env, nprocs=6)
    # 96 samples, batch 4 per rank, 6 ranks: 4 steps an epoch.
    assert three["global_step"] == one["global_step"] == "12"
    got, want = (weights(r["checkpoint"], tmp_path / f"{i}.safetensors")
                 for i, r in enumerate((three, one)))
    if shared_memory == "0":
        assert got == want  # Gloo on both, the same sums in the same order
    else:
        # The three nodes' sums through Gloo's ring against rank order.
        # Measured: at most 5.96e-8 apart; the bound is 4 times that.
        for name in got:
            assert max(abs(a - b) for a, b in zip(got[name], want[name])) <= 2.4e-7, name


def test_post_local_sgd_on_two_hosts_matches_torchs_with_node_subgroups(hosts, tmp_path):
    """Hierarchical local SGD: after the start, each node's two ranks average
    their gradients every step through shared memory, and the two nodes
    average their parameters every second step. Rank 0's weights match torch's
    post_localSGD_hook with subgroups of two ranks and PeriodicModelAverager
    on four Gloo processes."""
    import torch_local_sgd  # torch's own, in tests/testing

    train = write_csv(tmp_path / "train.csv")
    # 96 samples, batch 4 per rank, 4 ranks: plain all-reduce at step 0, the
    # nodes averaged after steps 1 and 3, step 4 left them apart.
    fit = [str(CLI), "fit", "--model", "mlp:4,8,3", "--train", str(train), "--batch-size", "4",
           "--shuffle", "false", "--seed", "5", "--optimizer", "sgd", "--momentum", "0.9",
           "--progress", "false"]
    initial = subprocess.run([*fit, "--nproc-per-node", "4", "--max-steps", "1", "--lr", "1e-12",
                              "--default-root-dir", str(tmp_path / "initial")],
                             capture_output=True, text=True, timeout=120)
    assert initial.returncode == 0, initial.stderr[-3000:]
    weights(parse(initial.stdout)["checkpoint"], tmp_path / "initial.safetensors")
    nodes = [in_host(ns, *fit, "--max-steps", "5", "--lr", "0.1", "--ddp-comm-hook",
                     "post_localsgd", "--post-localsgd-start-iteration", "1",
                     "--model-averaging-period", "2", "--nproc-per-node", "2",
                     "--default-root-dir", str(tmp_path / f"node{node}"), *node_flags(node))
             for node, ns in enumerate(hosts)]
    (code0, out0, err0), (code1, out1, err1) = [finish(node) for node in nodes]
    assert code0 == 0 and code1 == 0, err0[-3000:] + err1[-3000:]
    ours = weights(parse(out0)["checkpoint"], tmp_path / "ours.safetensors")
    reference = torch_local_sgd.train(str(train), str(tmp_path / "initial.safetensors"), world=4,
                                      steps=5, batch_size=4, lr=0.1, momentum=0.9,
                                      local=dict(start=1, period=2, node_size=2))
    torch = torch_local_sgd.torch
    mine = {name: torch.tensor(values) for name, values in ours.items()}
    want = {name: t.reshape(-1) for name, t in reference[0].items()}
    # Observed: 2.98e-8 (the averaging's sum of four ranks in another order:
    # each node's pair, then the nodes'); the bound is 4 times that.
    assert torch_local_sgd.gap(mine, want) <= 1.2e-7
    # What makes it sharp: within a node the ranks stayed equal, across the
    # nodes the last local step left them apart.
    assert torch_local_sgd.gap(reference[0], reference[1]) == 0
    assert torch_local_sgd.gap(reference[0], reference[2]) > 1e-4


def test_torchrun_across_two_hosts_trains_one_job(hosts, tmp_path):
    train = write_csv(tmp_path / "train.csv")
    nodes = [in_host(ns, *TORCHRUN, "--nnodes", "2", "--node-rank", str(node), "--master-addr",
                     HOSTS[0], "--master-port", PORT, "--nproc-per-node", "2", "--no-python",
                     str(CLI), *FIT, "--train", str(train), "--default-root-dir",
                     str(tmp_path / f"node{node}"))
             for node, ns in enumerate(hosts)]
    (code0, out0, err0), (code1, out1, err1) = [finish(node) for node in nodes]
    assert code0 == 0 and code1 == 0, err0[-3000:] + err1[-3000:]
    assert "global_step=" not in out1  # printed once, by rank 0
    got = parse(out0)
    want = fit_on_one_host(train, tmp_path / "one")
    assert got["global_step"] == want["global_step"] == "18"
    assert evaluate(got["checkpoint"], train) == evaluate(want["checkpoint"], train)


def test_python_fit_on_two_hosts_returns_rank0s_result_on_both(hosts, tmp_path):
    # ddpspawn_run's path (forked ranks) with the node options.
    train = write_csv(tmp_path / "train.csv")
    nodes = []
    for node, ns in enumerate(hosts):
        script = tmp_path / f"fit{node}.py"
        script.write_text(
            "import ddpspawn\n"
            f"r = ddpspawn.fit('mlp:4,8,3', {str(train)!r}, nprocs=2, nnodes=2, node_rank={node},\n"
            f"                 master_addr={HOSTS[0]!r}, master_port={PORT}, max_epochs=3,\n"
            "                 batch_size=4, seed=5, lr=0.3, progress=False,\n"
            f"                 default_root_dir={str(tmp_path / f'node{node}')!r})\n"
            "print(r.global_step, r.checkpoint, r.metrics['train_loss_epoch'])\n")
        nodes.append(in_host(ns, sys.executable, str(script),
                             env={"PYTHONPATH": os.pathsep.join(sys.path)}))
    (code0, out0, err0), (code1, out1, err1) = [finish(node) for node in nodes]
    assert code0 == 0 and code1 == 0, err0[-3000:] + err1[-3000:]
    assert out0 == out1 and out0.startswith("18 "), (out0, out1)


LONG_FIT = FIT[:FIT.index("--max-epochs")] + ["--max-epochs", "2000"] + FIT[FIT.index("--batch-size"):]


def start_long_job(hosts, tmp_path, flags: List[str] = []) -> List[subprocess.Popen]:
    train = write_csv(tmp_path / "train.csv")
    nodes = [in_host(ns, str(CLI), *LONG_FIT, "--train", str(train), "--nproc-per-node", "2",
                     "--timeout", "20", "--default-root-dir", str(tmp_path / f"node{node}"),
                     *node_flags(node), *flags)
             for node, ns in enumerate(hosts)]
    # Training has begun once node 0's metrics log has rows.
    deadline = time.monotonic() + 60
    metrics = tmp_path / "node0" / "metrics.csv"
    while not (metrics.exists() and metrics.stat().st_size > 100):
        assert time.monotonic() < deadline and nodes[0].poll() is None, finish(nodes[0])
        time.sleep(0.05)
    return nodes


def processes_in(namespace: str) -> List[str]:
    return subprocess.run(["ip", "netns", "pids", namespace], capture_output=True,
                          text=True).stdout.split()


# With restarts left, too: a node whose launcher is gone cannot start again.
@pytest.mark.parametrize("restarts", [[], ["--max-restarts", "1"]])
def test_a_killed_remote_launcher_ends_the_job_naming_its_ranks(hosts, tmp_path, restarts):
    nodes = start_long_job(hosts, tmp_path, restarts)
    nodes[1].kill()  # node 1's launcher; its ranks die with it
    killed = time.monotonic()
    code, _, err = finish(nodes[0])
    took = time.monotonic() - killed
    finish(nodes[1])
    assert code != 0
    assert "node 1 (ranks 2..3) never said how it ended" in err, err[-3000:]
    if restarts:
        assert "not restarted: node 1 (ranks 2..3) never said how it ended" in err, err[-3000:]
        assert "restart 1 of 1" not in err
    assert took < 10, f"node 0 took {took:.1f} s to end (timeout 20 s)"
    deadline = time.monotonic() + 5
    while any(processes_in(ns) for ns in hosts) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert [processes_in(ns) for ns in hosts] == [[], []]


def test_a_rank_that_fails_on_another_node_is_named_as_the_first_failure(hosts, tmp_path):
    nodes = start_long_job(hosts, tmp_path)
    os.kill(rank_pid(nodes[1].pid, 3, local_rank=1), 9)
    (code0, _, err0), (code1, _, err1) = finish(nodes[0]), finish(nodes[1])
    assert code0 != 0 and code1 != 0
    assert "node 1: rank 3 (pid" in err1 and "SIGKILL" in err1, err1[-3000:]
    assert "the job failed on node 1 first: rank 3 (pid" in err0, err0[-3000:]
    assert "and then on node 0: rank" in err0


def test_a_wrong_master_address_is_a_clear_error_within_the_timeout(hosts, tmp_path):
    train = write_csv(tmp_path / "train.csv")
    started = time.monotonic()
    # 10.231.0.9: in the namespaces' own network, where no host has it.
    code, _, err = finish(in_host(hosts[1], str(CLI), *FIT, "--train", str(train),
                                  "--nproc-per-node", "2", "--timeout", "5",
                                  *node_flags(1, master="10.231.0.9")))
    took = time.monotonic() - started
    assert code == 2, err[-3000:]  # the launcher could not start the job; no rank failed
    assert ("reaching the rendezvous at 10.231.0.9:29500 (node 0's launcher) within 5s failed"
            in err), err[-3000:]
    assert "frame #" not in err.split("ddpspawn: error:")[1]  # no LibTorch backtrace
    assert took < 5 + 8, f"took {took:.1f} s"


def test_a_launcher_of_another_job_is_refused(hosts, tmp_path):
    train = write_csv(tmp_path / "train.csv")
    node0 = in_host(hosts[0], str(CLI), *FIT, "--train", str(train), "--nproc-per-node", "2",
                    "--timeout", "10", "--default-root-dir", str(tmp_path), *node_flags(0))
    other = finish(in_host(hosts[1], str(CLI), "test", "--model", "mlp:4,8,3", "--data",
                           str(train), "--nproc-per-node", "2", "--timeout", "10",
                           *node_flags(1)))
    node0.kill()
    finish(node0)
    assert other[0] != 0
    assert "belongs to another job (ddpspawn fit model=mlp:4,8,3" in other[2], other[2][-3000:]


# 800 samples, batch 4 per rank, 4 ranks: 50 steps an epoch, 150 in all; a
# checkpoint every 5 steps.
RESTART_FIT = (LONG_FIT[:LONG_FIT.index("--max-epochs")] + ["--max-epochs", "3"]
               + LONG_FIT[LONG_FIT.index("--batch-size"):]
               + ["--checkpoint-every-n-steps", "5", "--log-every-n-steps", "1"])


@pytest.fixture(scope="module")
def uninterrupted_on_one_host(tmp_path_factory):
    root = tmp_path_factory.mktemp("one_host")
    train = write_csv(root / "train.csv", rows=800)
    # Through Gloo, whose sums run in the order they do across hosts (shared
    # memory's order differs: over these 150 steps the test loss differs by
    # 1e-7, relative).
    run = subprocess.run([str(CLI), *RESTART_FIT, "--train", str(train), "--nproc-per-node", "4",
                          "--default-root-dir", str(root / "logs")],
                         capture_output=True, text=True, timeout=120,
                         env=dict(os.environ, DDPSPAWN_SHM_ALLREDUCE="0"))
    assert run.returncode == 0, run.stderr
    return train, evaluate(parse(run.stdout)["checkpoint"], train)


def restart_fit_on_two_hosts(hosts, train: Path, roots: List[Path], shared_memory: str,
                             *extra: str) -> List[subprocess.Popen]:
    return [in_host(ns, str(CLI), *RESTART_FIT, "--train", str(train), "--nproc-per-node", "2",
                    "--timeout", "30", "--default-root-dir", str(roots[n]), *node_flags(n),
                    *extra, env={"DDPSPAWN_SHM_ALLREDUCE": shared_memory})
            for n, ns in enumerate(hosts)]


# A rank of node 1 in the second epoch, and rank 0 (node 0's, which writes the
# checkpoints) in the third; through Gloo alone, and with each node's sums
# through shared memory (hierarchical).
@pytest.mark.parametrize("node, rank, after_steps, shared_memory",
                         [(1, 3, 60, "0"), (0, 0, 110, "1")])
def test_a_killed_rank_restarts_every_node_to_the_same_weights(hosts, tmp_path,
                                                              uninterrupted_on_one_host, node,
                                                              rank, after_steps, shared_memory):
    train, want = uninterrupted_on_one_host
    if shared_memory == "1":
        # The hierarchical sums' order is not one host's: the reference is an
        # uninterrupted run on the same two hosts.
        whole = [finish(n) for n in restart_fit_on_two_hosts(
            hosts, train, [tmp_path / f"whole{n}" for n in range(2)], shared_memory)]
        assert all(code == 0 for code, _, _ in whole), whole[0][2][-3000:] + whole[1][2][-3000:]
        want = evaluate(parse(whole[0][1])["checkpoint"], train)
    roots = [tmp_path / f"node{n}" for n in range(2)]
    nodes = restart_fit_on_two_hosts(hosts, train, roots, shared_memory, "--max-restarts", "1")
    wait_for_steps(nodes[0], roots[0], after_steps)
    victim = rank_pid(nodes[node].pid, rank, local_rank=rank % 2)
    os.kill(victim, 9)
    (code0, out0, err0), (code1, out1, err1) = [finish(n) for n in nodes]
    assert code0 == 0 and code1 == 0, err0[-3000:] + err1[-3000:]
    got = parse(out0)
    assert parse(out1) == got and got["restarts"] == "1"
    # Both launchers restarted, from node 0's checkpoint (node 1 reads it
    # through the filesystem both "hosts" share).
    checkpoint = f"continuing from {roots[0].resolve()}/checkpoints/last.ckpt"
    for err in (err0, err1):
        assert "ddpspawn: restart 1 of 1: " in err and checkpoint in err, err[-3000:]
    assert f"rank {rank} (pid {victim}) was killed by signal SIGKILL" in (err0 + err1)
    # It resumed: step 1 ran once, and at most the 5 steps since the last
    # checkpoint (the next one may not have been written) ran again.
    steps = logged_steps(roots[0])
    assert steps.count(1) == 1 and 0 <= len(steps) - 150 <= 5, steps
    # The weights are those of an uninterrupted run whose sums run in the same
    # order, to the last bit (their loss on the training set agrees to every
    # digit).
    assert got["global_step"] == "150"
    assert evaluate(got["checkpoint"], train) == want


def test_a_node_that_cannot_read_node0s_checkpoint_refuses_to_restart(hosts, tmp_path):
    # Node 1 sees an empty directory where node 0 keeps its checkpoints (a
    # mount of its own), as a host without the shared filesystem would.
    train = write_csv(tmp_path / "train.csv", rows=800)
    roots = [tmp_path / f"node{n}" for n in range(2)]
    roots[0].mkdir()
    flags = ["--nproc-per-node", "2", "--timeout", "30", "--max-restarts", "1", "--train",
             str(train)]
    node0 = in_host(hosts[0], str(CLI), *RESTART_FIT, *flags, "--default-root-dir",
                    str(roots[0]), *node_flags(0))
    node1 = in_host(hosts[1], "unshare", "--mount", "sh", "-c",
                    'mount -t tmpfs none "$0" && exec "$@"', str(roots[0]), str(CLI),
                    *RESTART_FIT, *flags, "--default-root-dir", str(roots[1]), *node_flags(1))
    wait_for_steps(node0, roots[0], 20)
    os.kill(rank_pid(node1.pid, 3, local_rank=1), 9)
    (code0, _, err0), (code1, _, err1) = finish(node0), finish(node1)
    assert code0 != 0 and code1 != 0
    refusal = (f"not restarted: node 1 does not restart: it cannot read "
               f"{roots[0].resolve()}/checkpoints/last.ckpt (No such file or directory)")
    for err in (err0, err1):
        assert refusal in err, err[-3000:]
        assert "restart 1 of 1" not in err


def test_a_node_that_declines_ends_the_restart_on_every_node(hosts, tmp_path):
    # An interrupt is not retried: node 0's launcher, stopped by SIGINT,
    # declines, and node 1, whose ranks failed for it, ends naming why instead
    # of waiting for node 0's answer.
    nodes = start_long_job(hosts, tmp_path, ["--max-restarts", "1"])
    nodes[0].send_signal(signal.SIGINT)
    interrupted = time.monotonic()
    (code0, _, err0), (code1, _, err1) = finish(nodes[0]), finish(nodes[1])
    took = time.monotonic() - interrupted
    assert code0 != 0 and code1 != 0
    assert ("not restarted: node 0 does not restart: its job ended in a way a restart does not "
            "retry (CANCELLED: ") in err1, err1[-3000:]
    assert "restart 1 of 1" not in err0 + err1
    assert took < 15, f"the nodes took {took:.1f} s to end (timeout 20 s)"
