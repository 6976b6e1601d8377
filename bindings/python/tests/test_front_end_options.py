"""Every run option that docs/options.md says Python's fit takes ("yes") reaches the library and
does something there: given a value the option refuses, fit fails with an error that names the
option (the library's parser or its checks; Python knows no option but the data and nprocs
keys); an option that takes any value (a directory, a metric's name) trains a run whose
hparams.yaml, which the library writes from what it parsed, holds the value. An option Python
kept for itself, or passed under another name, fails one or the other.

Every option the table gives ddpspawn.torch.DistributedDataParallel shows its effect in one
training step on two ranks: what the step leaves differs between the option's default and the
value given (ddpspawn_option_workers.py)."""

import re
from pathlib import Path

import pytest

import ddpspawn
import ddpspawn_option_workers
from test_train import MLP, write_classification_csv

OPTIONS_MD = Path("docs/options.md")
# A value most options refuse (a number, a name from a list, a file that exists), and that the rest
# (a directory, a metric's name, a host) take as they take any text.
PROBE = "not-a-value"


def table_rows():
    """The cells of each option's row ("|" inside a cell is escaped as "\\|")."""
    for line in OPTIONS_MD.read_text().splitlines():
        cells = [cell.strip() for cell in re.split(r"(?<!\\)\|", line)[1:-1]]
        if len(cells) >= 8 and cells[0].startswith("`"):
            yield cells


def python_options():
    """(option, value column) of each row whose Python column is "yes"."""
    return [(cells[0].strip("`"), cells[2]) for cells in table_rows() if cells[4] == "yes"]


def wrapper_options():
    """The keyword of each option the DDP wrapper's column names (not "no: ...")."""
    return sorted(cells[6].strip("`") for cells in table_rows()
                  if cells[6] and not cells[6].startswith("no"))


@pytest.fixture(scope="module")
def train_csv(tmp_path_factory):
    path = tmp_path_factory.mktemp("front_end") / "train.csv"
    write_classification_csv(path, n=32, seed=0)
    return path


def fit(train_csv, root, **options):
    base = dict(nprocs=1, max_epochs=1, batch_size=16, progress=False,
                default_root_dir=str(root))
    base.update(options)
    return ddpspawn.fit(MLP, train_csv, **base)


def test_the_table_lists_python_s_options():
    # The table is generated from the library's option table (//tools:front_ends_test): most
    # options are Python's own keywords, and none is missed by the parsing here.
    assert len(python_options()) > 60


@pytest.mark.parametrize("option", [row[0] for row in python_options()])
def test_each_python_option_reaches_the_library(option, train_csv, tmp_path):
    if option == "default_root_dir":
        fit(train_csv, tmp_path / "chosen")
        assert (tmp_path / "chosen" / "hparams.yaml").exists()
        return
    root = tmp_path / "run"
    try:
        fit(train_csv, root, **{option: PROBE})
    except ddpspawn.DdpspawnError as error:
        message = str(error) + getattr(error, "traceback_text", "")
        assert re.search(rf"\b{option}\b", message), message
        return
    # Taken: the library parsed it and wrote it into the run's hyperparameters.
    hparams = (root / "hparams.yaml").read_text()
    assert f"{option}: '{PROBE}'" in hparams, hparams


def test_each_ddp_wrapper_option_has_its_effect():
    claimed = wrapper_options()
    assert "find_unused_parameters" in claimed and "comm_hook" in claimed  # the parsing holds
    # An option the table claims without an effect observed here fails, as one observed here
    # that the table does not claim.
    assert claimed == sorted(ddpspawn_option_workers.EFFECTS), claimed
    effects = ddpspawn.spawn(ddpspawn_option_workers.option_effects, nprocs=2, timeout=120)
    for option, (at_default, given) in effects.items():
        assert at_default != given, (option, at_default)
