"""Sampled evaluation of a packed run: its fixed stream is packed once,
kept for the whole run and read from its pack at every evaluation; the
metrics are those of the same evaluation in memory."""

from gnnsys import train
from gnnsys.storage import packed_reads
from gnnsys.storage.direct_io import aligned
from gnnsys.trainers.minibatch import MinibatchTrainer
from gnnsys.training.options import MinibatchOptions
from tests.storage.test_packing import packed_dataset

FAST = dict(fanouts=[4, 3], hidden=16, batch_size=16, progress=False, prefetch=2, epochs=2, eval_every=1)


def test_sampled_evaluation_reads_its_pack_and_scores_as_in_memory(make_dataset, tmp_path, monkeypatch):
    ds = packed_dataset(make_dataset)
    tmp_path = tmp_path / "scratch"
    tmp_path.mkdir()
    memory = train(ds, **FAST, eval="sampled")
    packed = train(ds, **FAST, features="packed", cache_rows=60, eval="auto", scratch_dir=tmp_path)
    assert packed.config["eval"] == "auto" and len(packed.epochs) == 2
    for a, b in zip(memory.epochs, packed.epochs, strict=True):
        assert (a["loss"], a["train"], a["valid"], a["test"]) == (b["loss"], b["train"], b["valid"], b["test"])
    assert list(tmp_path.iterdir()) == []  # the evaluation's pack is removed with the windows

    made = []  # the fixed pack's read buffers, made anew only when a batch outgrows the one of its parity
    monkeypatch.setattr(packed_reads, "aligned", lambda nbytes: made.append(nbytes) or aligned(nbytes))
    options = MinibatchOptions(**FAST, features="packed", scratch_dir=str(tmp_path)).for_dataset(ds)
    trainer = MinibatchTrainer(ds, options)
    try:
        evaluations = -(-sum(trainer.splits[s].shape[0] for s in trainer.splits) // FAST["batch_size"])
        window = tmp_path / "fixed" / f"window-0000000000-{evaluations}"
        kept, buffers = [], []
        for _ in range(2):  # packed once, read at every evaluation and kept
            trainer.store.reset_stats()
            assert trainer.evaluate() == memory_scores(ds, trainer)
            stats = next(iter(trainer.store.stats().values()))["packed"]
            assert stats["fixed"] == evaluations and stats["unplanned"] == 0
            kept.append(sorted((p.name, p.stat().st_mtime_ns) for p in window.iterdir()))
            buffers.append(len(made))
        assert 2 <= buffers[0] < evaluations and buffers[1] == buffers[0]  # the second evaluation makes none
        assert kept[0] == kept[1] and len(kept[0]) == evaluations + 3  # its batches, cache.seg, cache.ids, manifest
    finally:
        trainer.store.close()
    assert list(tmp_path.iterdir()) == []


def memory_scores(ds, packed_trainer) -> dict:
    """The sampled evaluation in memory of the packed trainer's model."""
    options = MinibatchOptions(**FAST, eval="sampled").for_dataset(ds)
    trainer = MinibatchTrainer(ds, options)
    trainer.model.load_state_dict(packed_trainer.model.state_dict())
    return trainer.evaluate()


def test_an_evaluation_stream_larger_than_half_the_scratch_space_reads_at_random(make_dataset, tmp_path):
    """Where the fixed stream's pack would take more than half the scratch
    space, the windows still pack, the note says evaluation reads rows at
    random, and the scores are those in memory."""
    ds = packed_dataset(make_dataset)
    said = "sampled evaluation reads rows at random"
    size, note = 2e-3, ""
    while said not in note and size > 1e-5:  # the largest scratch_gb whose window packs without the stream
        size *= 0.85
        options = MinibatchOptions(**FAST, features="packed", scratch_gb=size, scratch_dir=str(tmp_path))
        try:
            trainer = MinibatchTrainer(ds, options.for_dataset(ds))
        except Exception:  # noqa: BLE001 -- too small for a window
            break
        note = next(iter(trainer.store.notes.values()))
        trainer.store.close()
    assert note.startswith("packed batches in windows of") and said in note
    memory = train(ds, **FAST, eval="sampled")
    packed = train(ds, **FAST, features="packed", eval="sampled", scratch_gb=size, scratch_dir=tmp_path)
    for a, b in zip(memory.epochs, packed.epochs, strict=True):
        assert (a["loss"], a["train"], a["valid"], a["test"]) == (b["loss"], b["train"], b["valid"], b["test"])
        assert b["tiers"]["packed"]["fixed"] == 0 and b["tiers"]["packed"]["batches"] > 0
