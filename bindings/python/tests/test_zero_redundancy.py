"""zero_redundancy_optimizer (ZeRO stage 1) through ddpspawn.fit on 2 ranks,
with Adam and with Adagrad (whose state exists before its first step): each
rank holds only its shard of the state, training matches the unsharded
optimizer, and the checkpoint's state (unsharded) resumes with or without
sharding."""

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


@pytest.mark.parametrize("optimizer", sorted(STATE_BYTES))
def test_sharded_trains_as_unsharded_and_holds_half_the_state(optimizer, data, tmp_path):
    torch = pytest.importorskip("torch")
    plain = ddpspawn.fit(MODEL, data / "train.csv", **options(optimizer, tmp_path / "plain"))
    sharded = ddpspawn.fit(MODEL, data / "train.csv", zero_redundancy_optimizer=True,
                           **options(optimizer, tmp_path / "sharded"))
    assert sharded.global_step == plain.global_step > 0
    # Each rank's state is its shard's; together they are the unsharded state.
    unsharded = state_bytes(plain)
    assert unsharded == [STATE_BYTES[optimizer] * PARAMETER_ELEMENTS] * NPROCS
    shards = state_bytes(sharded)
    assert len(shards) == NPROCS and sum(shards) == unsharded[0]
    assert all(0 < b < unsharded[0] for b in shards), shards
    # The same arithmetic per parameter, in the same order: bit-equal weights.
    difference = max_difference(weights(torch, plain.checkpoint, tmp_path / "plain"),
                                weights(torch, sharded.checkpoint, tmp_path / "sharded"))
    assert difference == 0.0, difference


@pytest.mark.parametrize("optimizer", sorted(STATE_BYTES))
def test_checkpoints_resume_across_sharding(optimizer, data, tmp_path):
    """A sharded fit's checkpoint resumes unsharded and the other way
    round; both go on exactly as the unsharded fit does."""
    torch = pytest.importorskip("torch")

    def fit(directory, **extra):
        return ddpspawn.fit(MODEL, data / "train.csv",
                            **{**options(optimizer, tmp_path / directory), **extra})

    plain = fit("plain")
    sharded = fit("sharded", zero_redundancy_optimizer=True)
    on = dict(max_epochs=3)
    plain_on = fit("plain_on", resume_from=plain.checkpoint, **on)
    unsharded_from_sharded = fit("a", resume_from=sharded.checkpoint, **on)
    sharded_from_plain = fit("b", zero_redundancy_optimizer=True, resume_from=plain.checkpoint,
                             **on)
    reference = weights(torch, plain_on.checkpoint, tmp_path / "plain_on")
    for result, directory in ((unsharded_from_sharded, "a"), (sharded_from_plain, "b")):
        assert result.global_step == plain_on.global_step
        difference = max_difference(reference, weights(torch, result.checkpoint,
                                                        tmp_path / directory))
        assert difference == 0.0, (directory, difference)
