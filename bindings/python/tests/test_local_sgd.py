"""Post-local SGD through ddpspawn.fit on 2 ranks (one node): local steps
move the weights away from DDP's, gradients averaged within the node keep
DDP's exactly, a resumed fit stays local past the start, and the options
that need each other are refused without. Its equivalence with torch's own
hook and averager: tests/train/local_sgd_cli_test and test_multinode.py."""

import pytest

import ddpspawn
from test_train import common, write_classification_csv
from test_zero_redundancy import max_difference, weights

MODEL = "mlp:4,16,3"
LOCAL = dict(ddp_comm_hook="post_localsgd", post_localsgd_start_iteration=2,
             model_averaging_period=2)


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    directory = tmp_path_factory.mktemp("local_sgd")
    write_classification_csv(directory / "train.csv", seed=0)
    return directory


def sgd(root, **extra):
    # Plain SGD (no momentum): every rank's state is its weights alone, so a
    # resume from rank 0's checkpoint continues exactly.
    return common(root, momentum=0, **extra)


def test_local_steps_leave_ddp_and_node_averaging_keeps_it(data, tmp_path):
    torch = pytest.importorskip("torch")
    fit = lambda name, **extra: ddpspawn.fit(MODEL, data / "train.csv",
                                             **sgd(tmp_path / name, max_steps=9, **extra))
    plain = fit("plain")
    local = fit("local", post_local_gradient_allreduce=False, **LOCAL)
    within_node = fit("node", **LOCAL)
    once_averaged = fit("once", **{**LOCAL, "model_averaging_period": 1000},
                         post_local_gradient_allreduce=False)
    assert plain.global_step == local.global_step == within_node.global_step == 9
    read = lambda result, name: weights(torch, result.checkpoint, tmp_path / name)
    # One node: the node's mean is every rank's, and averaging equal
    # replicas changes nothing.
    assert max_difference(read(plain, "plain"), read(within_node, "node")) == 0.0
    # Observed 4.3e-4 after 9 steps (7 of them local).
    assert max_difference(read(plain, "plain"), read(local, "local")) > 1e-4
    # The averaging every second step moved rank 0's weights: observed 0.020
    # from a run averaged once, at the start.
    assert max_difference(read(local, "local"), read(once_averaged, "once")) > 1e-3


def test_a_resumed_fit_stays_local_past_the_start(data, tmp_path):
    torch = pytest.importorskip("torch")
    options = dict(post_local_gradient_allreduce=False, **LOCAL)
    straight = ddpspawn.fit(MODEL, data / "train.csv",
                            **sgd(tmp_path / "straight", max_steps=8, **options))
    # Stopped after 3 steps, just after an averaging: rank 0's checkpoint is
    # every rank's model.
    first = ddpspawn.fit(MODEL, data / "train.csv",
                         **sgd(tmp_path / "first", max_steps=3, **options))
    resumed = ddpspawn.fit(MODEL, data / "train.csv", resume_from=first.checkpoint,
                           **sgd(tmp_path / "resumed", max_steps=8, **options))
    assert resumed.global_step == straight.global_step == 8
    # A resume that forgot the count would all-reduce 2 more iterations.
    difference = max_difference(weights(torch, straight.checkpoint, tmp_path / "straight"),
                                weights(torch, resumed.checkpoint, tmp_path / "resumed"))
    assert difference == 0.0, difference


@pytest.mark.parametrize("options, message", [
    (dict(ddp_comm_hook="post_localsgd"), "post_localsgd needs model_averaging_period"),
    (dict(model_averaging_period=4), "model_averaging_period is ddp_comm_hook post_localsgd's"),
    (dict(zero_redundancy_optimizer=True, **LOCAL), "do not combine"),
])
def test_options_that_need_each_other_are_refused_before_any_rank(options, message, tmp_path):
    with pytest.raises(ddpspawn.InvalidArgumentError, match=message):
        ddpspawn.fit(MODEL, tmp_path / "absent.csv", **sgd(tmp_path, **options))
