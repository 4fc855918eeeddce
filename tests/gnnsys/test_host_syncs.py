"""The training loop reads nothing back from the device per step: the
running loss stays on the device and is read once per epoch (and at the
progress bar's refreshes), so a GPU step never waits for the previous one."""

import torch

from gnnsys.models import dropout
from gnnsys.trainers.minibatch import MinibatchTrainer
from gnnsys.training.options import MinibatchOptions


def test_an_epoch_reads_the_loss_back_once(make_dataset, monkeypatch):
    ds, _ = make_dataset(num_nodes=120, num_edges=900)
    trainer = MinibatchTrainer(ds, MinibatchOptions(fanouts=[3, 2], hidden=8, batch_size=8, progress=False, prefetch=0))
    loader = trainer.train_loader()
    reads = []
    item = torch.Tensor.item

    drawing = []  # the hash dropout's key is a draw of the host's RNG, never a read of the device
    draw_key = dropout._draw_key

    def draw():
        drawing.append(True)
        try:
            return draw_key()
        finally:
            drawing.pop()

    def adams_step_counter(t):  # Adam reads its host step counters with .item(): not a read of the training loop
        return any(t is state.get("step") for state in trainer.optimizer.state.values())

    def counted(t):
        if not drawing and not adams_step_counter(t):
            reads.append(t)
        return item(t)

    monkeypatch.setattr(dropout, "_draw_key", draw)
    monkeypatch.setattr(torch.Tensor, "item", counted)
    record = trainer.train_epoch(loader, 0)
    monkeypatch.undo()
    assert len(loader) > 3 and len(reads) == 1
    trainer.store.close()
    assert record["loss"] > 0


def test_the_epoch_loss_is_the_seed_weighted_mean_of_the_step_losses(make_dataset, monkeypatch):
    ds, _ = make_dataset(num_nodes=120, num_edges=900)
    trainer = MinibatchTrainer(ds, MinibatchOptions(fanouts=[3, 2], hidden=8, batch_size=7, progress=False, prefetch=0))
    steps = []
    step = trainer._step
    monkeypatch.setattr(
        trainer, "_step", lambda mb: steps.append((step_loss := step(mb)).item() * len(mb.seeds)) or step_loss
    )
    record = trainer.train_epoch(trainer.train_loader(), 0)
    trainer.store.close()
    seeds = ds.split("train").shape[0]
    assert record["loss"] == sum(steps) / seeds  # exactly the host float64 sum
