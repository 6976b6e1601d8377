"""Context.log_metrics (the C ABI's ddpspawn_log_metrics) in a group of one: rows in the
Trainer's metrics.csv format, the directory made where missing, and a name that cannot be a CSV
value refused with nothing written."""

import pytest

import ddpspawn


def test_rows_go_to_the_trainers_metrics_csv(ctx, tmp_path):
    directory = tmp_path / "logs" / "run"
    ctx.log_metrics(directory, {"loss": 0.5, "accuracy": 0.25}, step=3, epoch=1)
    ctx.log_metrics(directory, {"loss": 0.125}, step=4, epoch=1)
    assert (directory / "metrics.csv").read_text() == (
        "epoch,step,name,value\n1,3,loss,0.5\n1,3,accuracy,0.25\n1,4,loss,0.125\n")


@pytest.mark.parametrize("name", ["a,b", 'a"b', "a\nb", ""])
def test_a_name_that_cannot_be_a_csv_value_is_refused(ctx, tmp_path, name):
    with pytest.raises(ddpspawn.InvalidArgumentError, match="cannot be a metrics.csv column"):
        ctx.log_metrics(tmp_path, {"fine": 1.0, name: 2.0}, step=0)
    assert not (tmp_path / "metrics.csv").exists()
