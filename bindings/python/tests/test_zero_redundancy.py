"""zero_redundancy_optimizer (ZeRO stage 1) through ddpspawn.fit on 2 ranks:
each rank holds only its shard of Adam's state, training matches unsharded
Adam, and the checkpoint's state (unsharded) resumes with or without
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


def adam(root, **extra):
    return common(root, optimizer="adam", lr=0.01, momentum=0, max_epochs=2, **extra)


def weights(torch, checkpoint, directory):
    path = directory / "weights.pt"
    ddpspawn.export(checkpoint, str(path), format="torch")
    return torch.load(str(path), weights_only=True)


def max_difference(a, b):
    assert a.keys() == b.keys()
    return max(float((a[k] - b[k]).abs().max()) for k in a)


def state_bytes(result):
    return [int(b) for b in result.values["optimizer_state_bytes"].split(",")]


def test_sharded_adam_trains_as_unsharded_and_holds_half_the_state(data, tmp_path):
    torch = pytest.importorskip("torch")
    plain = ddpspawn.fit(MODEL, data / "train.csv", **adam(tmp_path / "plain"))
    sharded = ddpspawn.fit(MODEL, data / "train.csv", zero_redundancy_optimizer=True,
                           **adam(tmp_path / "sharded"))
    assert sharded.global_step == plain.global_step > 0
    # Each rank's Adam state (exp_avg, exp_avg_sq: 8 bytes a float32
    # element) is its shard's; together they are the unsharded state.
    unsharded = state_bytes(plain)
    assert unsharded == [8 * PARAMETER_ELEMENTS] * NPROCS
    shards = state_bytes(sharded)
    assert len(shards) == NPROCS and sum(shards) == unsharded[0]
    assert all(0 < b < unsharded[0] for b in shards), shards
    # The same arithmetic per parameter, in the same order: bit-equal weights.
    difference = max_difference(weights(torch, plain.checkpoint, tmp_path / "plain"),
                                weights(torch, sharded.checkpoint, tmp_path / "sharded"))
    assert difference == 0.0, difference


def test_checkpoints_resume_across_sharding(data, tmp_path):
    """A sharded fit's checkpoint resumes unsharded and the other way
    round; both go on exactly as the unsharded fit does."""
    torch = pytest.importorskip("torch")
    plain = ddpspawn.fit(MODEL, data / "train.csv", **adam(tmp_path / "plain"))
    sharded = ddpspawn.fit(MODEL, data / "train.csv", zero_redundancy_optimizer=True,
                           **adam(tmp_path / "sharded"))
    on = dict(max_epochs=3)
    plain_on = ddpspawn.fit(MODEL, data / "train.csv",
                            **{**adam(tmp_path / "plain_on"), **on},
                            resume_from=plain.checkpoint)
    unsharded_from_sharded = ddpspawn.fit(MODEL, data / "train.csv",
                                          **{**adam(tmp_path / "a"), **on},
                                          resume_from=sharded.checkpoint)
    sharded_from_plain = ddpspawn.fit(MODEL, data / "train.csv", zero_redundancy_optimizer=True,
                                      **{**adam(tmp_path / "b"), **on},
                                      resume_from=plain.checkpoint)
    reference = weights(torch, plain_on.checkpoint, tmp_path / "plain_on")
    for result, directory in ((unsharded_from_sharded, "a"), (sharded_from_plain, "b")):
        assert result.global_step == plain_on.global_step
        difference = max_difference(reference, weights(torch, result.checkpoint,
                                                        tmp_path / directory))
        assert difference == 0.0, (directory, difference)
