"""Context.save_checkpoint and ddpspawn.load_checkpoint (the C ABI's checkpoints of named
tensors) from Python, in a group of one: a module's state dict round-trips bit for bit with its
step, the file is a Trainer checkpoint (ddpspawn.torch.load_weights exports and reads it), and
the refusals name their cause with nothing written."""

import pytest

torch = pytest.importorskip("torch")

import ddpspawn  # noqa: E402
import ddpspawn.torch  # noqa: E402,F401


def model(seed):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))


def test_a_state_dict_round_trips_and_reads_as_a_trainer_checkpoint(ctx, tmp_path):
    path = tmp_path / "model.ckpt"
    saved = model(1)
    ctx.save_checkpoint(path, saved.state_dict(), step=12)
    loaded = model(2)
    assert not torch.equal(loaded[0].weight, saved[0].weight)
    assert ddpspawn.load_checkpoint(path, loaded.state_dict()) == 12
    for (name, want), got in zip(saved.state_dict().items(), loaded.state_dict().values()):
        assert torch.equal(want, got), name
    exported = model(3)
    assert sorted(ddpspawn.torch.load_weights(str(path), exported)) == sorted(
        saved.state_dict())
    assert torch.equal(exported[2].bias, saved[2].bias)


def test_refusals_name_the_cause_and_write_nothing(ctx, tmp_path):
    path = tmp_path / "model.ckpt"
    with pytest.raises(ddpspawn.InvalidArgumentError, match="no tensor to save"):
        ctx.save_checkpoint(path, {})
    assert not path.exists()
    ctx.save_checkpoint(path, {"w": torch.arange(6.0).view(2, 3)}, step=1)
    cases = {
        "has shape \\[2, 3\\]": {"w": torch.zeros(3, 2)},
        "is Float in the checkpoint": {"w": torch.zeros(2, 3, dtype=torch.float64)},
        "has no tensor 'v'": {"v": torch.zeros(2, 3)},
    }
    for message, tensors in cases.items():
        with pytest.raises(ddpspawn.InvalidArgumentError, match=message):
            ddpspawn.load_checkpoint(path, tensors)
        assert all(not t.any() for t in tensors.values()), message
    good_then_bad = {"w": torch.zeros(2, 3), "v": torch.zeros(1)}
    with pytest.raises(ddpspawn.InvalidArgumentError, match="has no tensor 'v'"):
        ddpspawn.load_checkpoint(path, good_then_bad)
    assert not good_then_bad["w"].any()  # checked before anything was written
