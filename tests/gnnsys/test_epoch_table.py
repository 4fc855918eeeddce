"""The epoch table (gnnsys.training.loop.EpochTable): each epoch's row is on
stdout when the epoch ends, in every trainer, so a run stopped part-way
shows every epoch it finished."""

import re

import pytest

import gnnsys
from gnnsys import train_fullgraph
from tests.hetero_graphs import hetero_dataset

FAST = dict(fanouts=[4, 3], hidden=16, batch_size=8, progress=False, prefetch=2)
FULL = dict(layers=2, hidden=16, progress=False)
HEADER = " epoch     loss   train   valid    test   time_s"
ROW = re.compile(r" {0,4}(\d+)([* ]) +\d+\.\d{4} +(-|\d\.\d{4}) +(-|\d\.\d{4}) +(-|\d\.\d{4}) +\d+\.\d\d")


class Stop(Exception):
    pass


TRAINERS = {
    "minibatch": lambda ds, **kw: gnnsys.train(ds, **FAST, **kw),
    "minibatch, 2 runs": lambda ds, **kw: gnnsys.train(ds, runs=2, **FAST, **kw),
    "full-graph": lambda ds, **kw: train_fullgraph(ds, **FULL, **kw),
    "gnnpipe": lambda ds, **kw: train_fullgraph(ds, chunks=2, **FULL, **kw),
    "heterogeneous": lambda ds, **kw: gnnsys.train(hetero_dataset(), **{**FAST, "fanouts": [3, 3]}, **kw),
}


@pytest.mark.parametrize("trainer", TRAINERS)
def test_each_row_is_printed_as_its_epoch_ends(make_dataset, capsys, trainer):
    """When an epoch's on_epoch_end runs, stdout holds the header and that
    epoch's row (run 2 stops the test before the run ends, as Ctrl-C would)."""
    ds, _ = make_dataset()
    seen = []

    def hook(record):
        seen.append(capsys.readouterr().out)
        if len(seen) == 2:
            raise Stop

    with pytest.raises(Stop):
        TRAINERS[trainer](ds, epochs=4, eval_every=2, epoch_table=True, on_epoch_end=hook)
    first, second = (text.splitlines() for text in seen)
    if trainer.endswith("runs"):
        assert first[0] == "run 01 of 2, seed 0"
        first = first[1:]
    assert first[0] == HEADER and len(first) == 2 and len(second) == 1  # the header once
    rows = [ROW.fullmatch(first[1]), ROW.fullmatch(second[0])]
    assert [int(r[1]) for r in rows] == [1, 2]
    assert rows[0].group(2, 3, 4, 5) == (" ", "-", "-", "-")  # not evaluated: no metric, never best
    assert rows[1][2] == "*"  # the first evaluated epoch is the best so far


def test_a_row_is_starred_when_its_epoch_is_the_best_so_far(make_dataset, capsys):
    ds, _ = make_dataset(num_nodes=200, num_edges=2000)
    result = gnnsys.train(ds, epochs=6, epoch_table=True, **FAST)
    rows = [ROW.fullmatch(line) for line in capsys.readouterr().out.splitlines()[1:]]
    valid = [r["valid"] for r in result.epochs]
    assert [r[2] == "*" for r in rows] == [v > max(valid[:i], default=-1) for i, v in enumerate(valid)]
    assert rows[result.best_epoch][2] == "*"


def test_no_table_without_the_option(make_dataset, capsys):
    ds, _ = make_dataset()
    gnnsys.train(ds, epochs=1, **FAST)
    assert capsys.readouterr().out == ""
