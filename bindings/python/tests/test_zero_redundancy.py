"""The sharded optimizers through ddpspawn.fit on 2 ranks: ZeRO-1
(zero_redundancy_optimizer), ZeRO-2 (sharding_strategy shard_grad_op) and
ZeRO-3 (sharding_strategy full_shard, the parameters sharded too), with Adam and with Adagrad (whose state exists before its first step): each
rank holds only its shard of the state, training matches the unsharded
optimizer (with gradient accumulation and clipping too, and under
bf16-mixed), and the
checkpoint's state (unsharded) resumes with or without sharding."""

import pytest

import ddpspawn
from test_train import NPROCS, common, write_classification_csv

# Parameters of unequal sizes: 4*64+64, 64*64+64, 64*3+3.
MODEL = "mlp:4,64,64,3"
PARAMETER_ELEMENTS = 4 * 64 + 64 + 64 * 64 + 64 + 64 * 3 + 3


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    directory = tmp_path_factory.mktemp("zero")
    write_classification_csv(directory / "train.csv", seed=0)
    return directory


# State bytes per float32 parameter element: Adam's exp_avg and exp_avg_sq, Adagrad's sum.
STATE_BYTES = {"adam": 8, "adagrad": 4}


# How each stage is asked for.
SHARDING = {"zero1": dict(zero_redundancy_optimizer=True),
            "shard_grad_op": dict(sharding_strategy="shard_grad_op"),
            "full_shard": dict(sharding_strategy="full_shard")}


def options(optimizer, root, **extra):
    return common(root, optimizer=optimizer, lr=0.01, momentum=0, max_epochs=2, **extra)


def weights(torch, checkpoint, directory):
    path = directory / "weights.pt"
    ddpspawn.export(checkpoint, str(path), format="torch")
    return torch.load(str(path), weights_only=True)


def max_difference(a, b):
    assert a.keys() == b.keys()
    return max(float((a[k] - b[k]).abs().max()) for k in a)


def state_bytes(result):
    return [int(b) for b in result.values["optimizer_state_bytes"].split(",")]


@pytest.mark.parametrize("stage", sorted(SHARDING))
@pytest.mark.parametrize("optimizer", sorted(STATE_BYTES))
def test_sharded_trains_as_unsharded_and_holds_half_the_state(optimizer, stage, data, tmp_path):
    torch = pytest.importorskip("torch")
    plain = ddpspawn.fit(MODEL, data / "train.csv", **options(optimizer, tmp_path / "plain"))
    sharded = ddpspawn.fit(MODEL, data / "train.csv", **SHARDING[stage],
                           **options(optimizer, tmp_path / "sharded"))
    assert sharded.global_step == plain.global_step > 0
    # Each rank's state is its shard's; together they are the unsharded state.
    unsharded = state_bytes(plain)
    assert unsharded == [STATE_BYTES[optimizer] * PARAMETER_ELEMENTS] * NPROCS
    shards = state_bytes(sharded)
    assert len(shards) == NPROCS and sum(shards) == unsharded[0]
    assert all(0 < b < unsharded[0] for b in shards), shards
    # The same arithmetic per element, in the same order (at 2 ranks the reduce-scatter's sum of
    # two gradients is the all-reduce's): bit-equal weights.
    difference = max_difference(weights(torch, plain.checkpoint, tmp_path / "plain"),
                                weights(torch, sharded.checkpoint, tmp_path / "sharded"))
    assert difference == 0.0, difference


@pytest.mark.parametrize("stage", ["shard_grad_op", "full_shard"])
def test_sharded_gradients_accumulate_and_clip_as_unsharded(stage, data, tmp_path):
    """Accumulated gradients wait, unsharded, for the step's backward; the
    clipping norm sums every rank's rows. A norm of the local rows alone
    would clip each rank's rows by another factor."""
    torch = pytest.importorskip("torch")
    extra = dict(accumulate_grad_batches=2, gradient_clip_val=0.05)
    plain = ddpspawn.fit(MODEL, data / "train.csv", **options("adam", tmp_path / "plain", **extra))
    sharded = ddpspawn.fit(MODEL, data / "train.csv", **SHARDING[stage],
                           **options("adam", tmp_path / "sharded", **extra))
    assert sharded.global_step == plain.global_step > 0
    difference = max_difference(weights(torch, plain.checkpoint, tmp_path / "plain"),
                                weights(torch, sharded.checkpoint, tmp_path / "sharded"))
    # The norm's squares are summed per row shard, then over ranks: last-bit differences.
    assert difference < 1e-6, difference


def test_peak_tensor_memory_holds_what_each_strategy_keeps(data, tmp_path):
    """fit's peak_tensor_bytes, each rank's: at least the model state each
    strategy keeps between steps (float32 parameters, gradients, Adam's two
    moments): 16 bytes an element for no_shard (its gradient buckets live in
    shared memory, which the count includes), 4 + 12 of each half of the rows
    for shard_grad_op at 2 ranks, 16 of each half for full_shard. It also
    holds what checkpoints take: a consolidation gathers every rank's state
    to rank 0 (docs/sharding.md). Under full_shard rank 1 never holds the
    model whole (one layer at a time in a step, and its checkpoint gathers
    the weights to rank 0 alone): its peak is below shard_grad_op's by at
    least the half of the parameters it no longer keeps (2 bytes an
    element)."""
    layers = [128] * 8
    model = "mlp:4," + ",".join(map(str, layers)) + ",3"
    widths = [4] + layers + [3]
    elements = sum(a * b + b for a, b in zip(widths, widths[1:]))
    peaks = {}
    for stage, extra in (("no_shard", {}), ("shard_grad_op", SHARDING["shard_grad_op"]),
                         ("full_shard", SHARDING["full_shard"])):
        result = ddpspawn.fit(model, data / "train.csv",
                              **options("adam", tmp_path / stage, **extra))
        peaks[stage] = [int(b) for b in result.values["peak_tensor_bytes"].split(",")]
        assert len(peaks[stage]) == NPROCS
    print(f"peak tensor bytes by rank: {peaks}; parameter elements {elements}")
    assert min(peaks["no_shard"]) >= 16 * elements, peaks
    assert min(peaks["shard_grad_op"]) >= 10 * elements, peaks
    assert min(peaks["full_shard"]) >= 8 * elements, peaks
    assert peaks["full_shard"][1] <= peaks["shard_grad_op"][1] - 2 * elements, peaks


def test_shard_grad_op_refuses_what_would_not_shard(data, tmp_path):
    for extra, message in (
            (dict(zero_redundancy_optimizer=True), "shards the optimizer state already"),
            (dict(ddp_comm_hook="fp16"), "the communication hook 'fp16' cannot run on it"),
            (dict(sharding_strategy="hybrid_shard"), "hybrid_shard .* is not implemented yet")):
        arguments = {"sharding_strategy": "shard_grad_op", **extra}
        with pytest.raises(ddpspawn.InvalidArgumentError, match=message):
            ddpspawn.fit(MODEL, data / "train.csv", **options("adam", tmp_path, **arguments))


@pytest.mark.parametrize("stage", sorted(SHARDING))
@pytest.mark.parametrize("optimizer", sorted(STATE_BYTES))
def test_checkpoints_resume_across_sharding(optimizer, stage, data, tmp_path):
    """A sharded fit's checkpoint resumes unsharded and the other way
    round; both go on exactly as the unsharded fit does."""
    torch = pytest.importorskip("torch")

    def fit(directory, **extra):
        return ddpspawn.fit(MODEL, data / "train.csv",
                            **{**options(optimizer, tmp_path / directory), **extra})

    plain = fit("plain")
    sharded = fit("sharded", **SHARDING[stage])
    on = dict(max_epochs=3)
    plain_on = fit("plain_on", resume_from=plain.checkpoint, **on)
    unsharded_from_sharded = fit("a", resume_from=sharded.checkpoint, **on)
    sharded_from_plain = fit("b", **SHARDING[stage], resume_from=plain.checkpoint, **on)
    reference = weights(torch, plain_on.checkpoint, tmp_path / "plain_on")
    for result, directory in ((unsharded_from_sharded, "a"), (sharded_from_plain, "b")):
        assert result.global_step == plain_on.global_step
        difference = max_difference(reference, weights(torch, result.checkpoint,
                                                        tmp_path / directory))
        assert difference == 0.0, (directory, difference)


@pytest.fixture(scope="module")
def plain_adam(data, tmp_path_factory):
    root = tmp_path_factory.mktemp("plain_adam")
    return root, ddpspawn.fit(MODEL, data / "train.csv", **options("adam", root))


# MODEL's Linear layers hold 320, 4160 and 195 elements: 1000 makes the middle one a unit and
# leaves the other two to the model's own (root) unit; 100000 leaves everything to the root.
@pytest.mark.parametrize("policy, units", [
    ({}, 3),
    (dict(auto_wrap_min_params=1000), 2),
    (dict(auto_wrap_min_params=100000), 1),
    (dict(reshard_after_forward=False), 3),
])
def test_full_shards_units_by_size_train_as_unsharded(policy, units, plain_adam, data, tmp_path):
    torch = pytest.importorskip("torch")
    plain_root, plain = plain_adam
    sharded = ddpspawn.fit(MODEL, data / "train.csv", **SHARDING["full_shard"], **policy,
                           **options("adam", tmp_path / "sharded"))
    assert sharded.values["full_shard_units"] == str(units), sharded.values
    assert "full_shard_units" not in plain.values
    difference = max_difference(weights(torch, plain.checkpoint, plain_root),
                                weights(torch, sharded.checkpoint, tmp_path / "sharded"))
    assert difference == 0.0, difference


@pytest.mark.parametrize("prefetch", [True, False])
def test_full_shard_prefetching_over_gloo_trains_as_unsharded(prefetch, plain_adam, data,
                                                              tmp_path, monkeypatch):
    """Without shared memory the layers' all-gathers run on Gloo's threads,
    so full_shard starts the next layer's while one runs (full_shard_prefetch,
    on by default; tests/ddp's zero_redundancy_optimizer_test counts them):
    still the unsharded fit's weights, bit for bit, with prefetch and
    without."""
    torch = pytest.importorskip("torch")
    plain_root, plain = plain_adam
    monkeypatch.setenv("DDPSPAWN_SHM_ALLREDUCE", "0")
    sharded = ddpspawn.fit(MODEL, data / "train.csv", **SHARDING["full_shard"],
                           full_shard_prefetch=prefetch, **options("adam", tmp_path / "sharded"))
    # Gloo's: no rank met the others in shared memory.
    assert sharded.values["straggler.measured_by"] == "time blocked in collectives", sharded.values
    difference = max_difference(weights(torch, plain.checkpoint, plain_root),
                                weights(torch, sharded.checkpoint, tmp_path / "sharded"))
    assert difference == 0.0, difference


def test_full_shards_policy_options_are_refused_without_full_shard(data, tmp_path):
    for policy in (dict(auto_wrap_min_params=1000), dict(reshard_after_forward=False),
                   dict(full_shard_prefetch=False)):
        with pytest.raises(ddpspawn.InvalidArgumentError, match="needs sharding_strategy "
                                                                "full_shard"):
            ddpspawn.fit(MODEL, data / "train.csv", **SHARDING["shard_grad_op"], **policy,
                         **options("adam", tmp_path))


def test_full_shard_validates_uneven_shards_as_unsharded(data, tmp_path):
    """Validation runs with full_shard's parameters whole: with 33 samples,
    one rank's shard has two batches and the other's one, where a gather per
    layer and batch would wait for a partner that never comes. The metrics
    and weights are the unsharded fit's."""
    torch = pytest.importorskip("torch")
    write_classification_csv(tmp_path / "val.csv", n=33, seed=1)
    extra = dict(val=tmp_path / "val.csv", timeout=60)
    plain = ddpspawn.fit(MODEL, data / "train.csv", **options("adam", tmp_path / "plain"),
                         **extra)
    sharded = ddpspawn.fit(MODEL, data / "train.csv", **SHARDING["full_shard"],
                           **options("adam", tmp_path / "sharded"), **extra)
    assert sharded.metrics["val_loss"] == plain.metrics["val_loss"]
    assert sharded.metrics["val_accuracy"] == plain.metrics["val_accuracy"]
    difference = max_difference(weights(torch, plain.checkpoint, tmp_path / "plain"),
                                weights(torch, sharded.checkpoint, tmp_path / "sharded"))
    assert difference == 0.0, difference


@pytest.mark.parametrize("stage", ["shard_grad_op", "full_shard"])
def test_sharded_trains_under_bf16_mixed_as_unsharded(stage, data, tmp_path):
    """bf16-mixed (autocast to bfloat16 on the CPU; float32 parameters,
    gradients and state): the sharded step sees the same averaged gradients
    as the unsharded one, so the weights are the same."""
    torch = pytest.importorskip("torch")
    plain = ddpspawn.fit(MODEL, data / "train.csv",
                         **options("adam", tmp_path / "plain", precision="bf16-mixed"))
    sharded = ddpspawn.fit(MODEL, data / "train.csv", **SHARDING[stage],
                           **options("adam", tmp_path / "sharded", precision="bf16-mixed"))
    unmixed = ddpspawn.fit(MODEL, data / "train.csv", **options("adam", tmp_path / "unmixed"))
    reference = weights(torch, plain.checkpoint, tmp_path / "plain")
    difference = max_difference(reference, weights(torch, sharded.checkpoint, tmp_path / "sharded"))
    print(f"{stage} bf16-mixed against no_shard bf16-mixed: {difference}")
    assert difference == 0.0, difference
    # bf16-mixed did change the arithmetic: its weights are not the float32 fit's.
    assert max_difference(reference, weights(torch, unmixed.checkpoint,
                                             tmp_path / "unmixed")) > 1e-4
