"""storage/io_probe.py: the IOModel's arithmetic, the probe's record, its
per-device cache, and `gnnsys info --probe-io`. Nothing here depends on how
fast the disk is: models are built by hand, and probes are only checked for
what they recorded."""

import errno
import json
import os
import re
import shutil
import tempfile
import time
import warnings

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gnnsys.cli import main
from gnnsys.datasets import PrepareOptions, write_dataset
from gnnsys.errors import ConfigError
from gnnsys.storage import io_probe, machine_cache
from gnnsys.storage.direct_io import open_rows_file
from gnnsys.storage.io_probe import IOModel, cache_path, format_model, io_model, probe
from gnnsys.storage.uring_io import uring_available
from tests.conftest import random_source

MEASURED = {
    "file": "f",
    "device": "1:2",
    "block": 512,
    "large_read": 1 << 17,
    "large_depth": 32,
    "seq_read": 1 << 20,
    "seq_depth": 8,
    "at": 0.0,
    "seconds": 0.0,
    "loadavg": [0.0, 0.0, 0.0],
}


def model(threads=None, uring=None, bandwidth=1e9, read_size=512) -> IOModel:
    """An IOModel of the given {depth: reads/s} per engine and random-read bandwidth (sequential: twice it)."""
    rates = {e: r for e, r in (("threads", threads), ("uring", uring)) if r is not None}
    return IOModel(read_size, rates, bandwidth, 2 * bandwidth, dict(MEASURED, at=time.time()))


def direct_file(tmp_path, nbytes=1 << 20):
    """A random file of `nbytes` under tmp_path, skipping where O_DIRECT is not honoured there."""
    path = tmp_path / "features.bin"
    path.write_bytes(np.random.default_rng(0).bytes(nbytes))
    try:
        os.close(open_rows_file(path, True).fd)
    except ConfigError:
        pytest.skip(f"{tmp_path} has no O_DIRECT")
    return path


def test_rates_interpolate_between_measured_depths_and_stay_flat_beyond():
    m = model(threads={1: 10_000.0, 8: 40_000.0, 32: 60_000.0})
    assert m.reads_per_s("threads", 1) == 10_000 and m.reads_per_s("threads", 4.5) == 25_000
    assert m.reads_per_s("threads", 1000) == 60_000
    np.testing.assert_allclose(m.reads_per_s("threads", np.array([8, 20])), [40_000, 50_000])


def test_request_cost_excludes_the_read_bytes_and_small_batches_run_at_their_own_depth():
    m = model(threads={1: 10_000.0, 32: 100_000.0}, bandwidth=1e9, read_size=1000)
    assert m.request_s("threads", 32) == pytest.approx(1e-5 - 1e-6)
    # 1 request runs at depth 1 (100 us), 64 requests at the tier's depth 32 (10 us each)
    np.testing.assert_allclose(
        m.cost("threads", 32, [1, 64], [1000, 64_000]), [1e-4 - 1e-6 + 1e-6, 64 * (1e-5 - 1e-6) + 64e-6]
    )
    assert m.request_s("threads", 1) == pytest.approx(1e-4 - 1e-6)
    assert model(threads={1: 1e12}).request_s("threads", 1) == 0  # never negative


def test_faster_engine_compares_each_engine_at_its_own_inflight_count():
    m = model(threads={1: 10_000.0, 16: 50_000.0, 128: 50_000.0}, uring={1: 8_000.0, 16: 40_000.0, 128: 80_000.0})
    assert m.faster_engine(threads=16, depth=128) == "uring"
    assert m.faster_engine(threads=16, depth=16) == "threads"
    assert model(threads={1: 1.0}).faster_engine(16, 128) is None


def test_model_round_trips_through_json():
    m = model(threads={1: 10.5, 8: 80.0}, uring={1: 9.0})
    assert IOModel.from_json(json.loads(json.dumps(m.to_json()))) == m


def test_probe_records_every_engine_and_depth(tmp_path):
    path = direct_file(tmp_path)
    m = probe(path, 1024, depths=(1, 4), seconds=0.05)
    engines = ["threads", "uring"] if uring_available()[0] else ["threads"]
    assert list(m.rates) == engines and all(list(m.rates[e]) == [1, 4] for e in engines)
    assert all(r > 0 for e in engines for r in m.rates[e].values()) and m.seq_bytes_per_s > 0
    assert m.random_bytes_per_s > 0 and m.measured["large_read"] == 128 << 10
    assert m.read_size == 1024 and m.measured["block"] == open_rows_file(path, True).block
    st = os.stat(path)
    assert m.measured["device"] == f"{os.major(st.st_dev)}:{os.minor(st.st_dev)}" and len(m.measured["loadavg"]) == 3


def test_probe_refuses_a_read_size_off_the_block(tmp_path):
    path = direct_file(tmp_path)
    with pytest.raises(ConfigError, match=r"^read_size: 700 bytes is not a multiple of the \d+ B block"):
        probe(path, 700, seconds=0.01)


@pytest.fixture
def quick_probe(monkeypatch, tmp_path):
    """Probes of any file, of 0.05 s, cached under tmp_path/cache; counts the probes run."""
    monkeypatch.setenv("GNNSYS_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(io_probe, "MIN_PROBE_BYTES", 0)
    calls = []
    real = io_probe.probe

    def counted(path, read_size):
        calls.append(path)
        return real(path, read_size, depths=(1, 2), seconds=0.05)

    monkeypatch.setattr(io_probe, "probe", counted)
    return calls


def test_io_model_is_cached_per_device_and_read_size(tmp_path, quick_probe):
    path = direct_file(tmp_path)
    first = io_model(path, 512)
    dev = os.stat(path).st_dev
    cached = tmp_path / "cache" / f"io-probe-{os.major(dev)}-{os.minor(dev)}-512.json"
    assert cache_path(path, 512) == cached and IOModel.from_json(json.loads(cached.read_text())) == first
    other = tmp_path / "other.bin"
    shutil.copy(path, other)
    assert io_model(other, 512) == first and len(quick_probe) == 1  # same device and read size: no new probe
    io_model(path, 1024)
    io_model(path, 512, refresh=True)
    io_model(path, 512, max_age=0)
    assert len(quick_probe) == 4 and {p.name for p in cached.parent.iterdir()} == {
        cached.name,
        cached.name.replace("-512", "-1024"),
    }


def test_io_model_is_none_for_small_files_and_without_o_direct(tmp_path, monkeypatch):
    monkeypatch.setenv("GNNSYS_CACHE_DIR", str(tmp_path / "cache"))
    path = tmp_path / "small.bin"
    path.write_bytes(bytes(4096))
    assert io_model(path, 512) is None and not (tmp_path / "cache").exists()
    if not os.path.isdir("/dev/shm"):
        return
    monkeypatch.setattr(io_probe, "MIN_PROBE_BYTES", 0)
    with tempfile.NamedTemporaryFile(dir="/dev/shm") as f:
        f.write(bytes(1 << 16))
        f.flush()
        try:
            os.close(open_rows_file(f.name, True).fd)
            pytest.skip("/dev/shm honours O_DIRECT here")
        except ConfigError:
            pass
        assert io_model(f.name, 512) is None


def test_info_probe_io_prints_the_table_and_the_cache(tmp_path, quick_probe, capsys):
    source, _ = random_source(num_nodes=2048, dim=100)
    path = write_dataset(source, tmp_path / "ds", PrepareOptions(align=512, progress=False))
    direct_file(tmp_path)  # skips where tmp_path has no O_DIRECT
    assert main(["info", str(path), "--probe-io"]) == 0
    out = capsys.readouterr().out
    assert "I/O probe of device" in out and "(512 B random reads)" in out and "sequential 1024 KiB reads" in out
    assert "random 128 KiB reads, 32 in flight" in out
    assert f"cached in {tmp_path / 'cache'}" in out and len(quick_probe) == 1
    assert main(["info", str(path), "--probe-io", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["io_probe"]["read_size"] == 512


def test_info_probe_io_says_why_a_small_file_is_not_probed(make_dataset, capsys):
    ds, _ = make_dataset(num_nodes=50)
    assert main(["info", str(ds.path), "--probe-io"]) == 0
    out = capsys.readouterr().out
    assert "I/O probe: not run" in out


@pytest.fixture
def fake_probe(monkeypatch, tmp_path):
    """io_model over a 1 KiB file whose probe returns model(...) at once (no I/O); counts the probes."""
    monkeypatch.setattr(io_probe, "MIN_PROBE_BYTES", 0)
    calls = []

    def fake(path, read_size):
        calls.append(path)
        return model(threads={1: 1000.0, 8: 4000.0}, uring={1: 900.0, 8: 3000.0}, read_size=read_size)

    monkeypatch.setattr(io_probe, "probe", fake)
    path = tmp_path / "features.bin"
    path.write_bytes(bytes(1024))
    return path, calls


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=6,
)


def _mutations(valid: dict):
    """Strategies of JSON made from `valid` by replacing or removing one field (at depth 1 or 2), or anything."""
    paths = [(k,) for k in valid] + [(k, j) for k, v in valid.items() if isinstance(v, dict) for j in v]

    def mutate(path, value, remove):
        d = json.loads(json.dumps(valid))
        parent = d if len(path) == 1 else d[path[0]]
        if remove:
            del parent[path[-1]]
        else:
            parent[path[-1]] = value
        return d

    return st.one_of(st.builds(mutate, st.sampled_from(paths), JSON, st.booleans()), JSON)


VALID = model(threads={1: 1000.0, 8: 4000.0}, uring={1: 900.0}).to_json()


@settings(max_examples=80, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(value=_mutations(VALID), raw=st.one_of(st.none(), st.binary(max_size=20)))
def test_any_cached_json_is_used_or_probed_again(fake_probe, monkeypatch, tmp_path, value, raw):
    path, calls = fake_probe
    monkeypatch.setenv("GNNSYS_CACHE_DIR", str(tmp_path / "cache"))
    calls.clear()
    cached = cache_path(path, 512)
    cached.parent.mkdir(exist_ok=True)
    cached.write_bytes(json.dumps(value).encode() if raw is None else raw)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        found = io_model(path, 512)
    assert [str(w.message).count("\n") for w in caught] == [0] * len(caught) and len(caught) <= 1
    format_model(found)
    found.cost("threads", 4, [3], [1536])
    if calls:  # probed again: the cache now holds the new model
        assert IOModel.from_json(json.loads(cached.read_text())) == found


@pytest.mark.parametrize(
    "damage, problem",
    [
        (lambda d: d["measured"].update(at="yesterday"), "field 'measured.at' must be a time in seconds"),
        (lambda d: d.pop("read_size"), "field 'read_size' is missing"),
        (lambda d: d.update(rates={}), "field 'rates' must be reads/s per engine"),
        (lambda d: d["rates"].update(threads={}), "field 'rates' must be reads/s per engine"),
        (lambda d: d.update(measured=None), "field 'measured' must be an object"),
        (lambda d: d.clear() or d.update(x=[1]), "field 'read_size' is missing"),
    ],
)
def test_an_invalid_cache_is_absent_with_one_warning(fake_probe, monkeypatch, tmp_path, damage, problem):
    path, calls = fake_probe
    monkeypatch.setenv("GNNSYS_CACHE_DIR", str(tmp_path / "cache"))
    value = json.loads(json.dumps(VALID))
    damage(value)
    cached = cache_path(path, 512)
    cached.parent.mkdir()
    cached.write_text(json.dumps(value))
    with pytest.warns(RuntimeWarning, match=f"{cached}: {re.escape(problem)}.*measuring again") as caught:
        assert io_model(path, 512) == IOModel.from_json(json.loads(cached.read_text()))
    assert len(caught) == 1 and len(calls) == 1
    cached.write_text("[1, 2]")
    with pytest.warns(RuntimeWarning, match="the whole file must be an object"):
        io_model(path, 512)
    cached.write_text("{nope")
    with pytest.warns(RuntimeWarning, match="not valid JSON"):
        io_model(path, 512)


def _read_only(monkeypatch):
    def refuse(path, data):
        raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(path))

    monkeypatch.setattr(machine_cache, "atomic_write_bytes", refuse)


@pytest.mark.parametrize(
    "where, reason",
    [
        ("file", "blocker is not a directory"),
        ("under-file", "ENOTDIR"),
        ("too-long", "ENAMETOOLONG"),
        ("read-only", "EROFS"),
    ],
)
def test_an_unwritable_cache_leaves_the_probe_uncached_with_one_warning(
    fake_probe, monkeypatch, tmp_path, where, reason
):
    path, calls = fake_probe
    blocker = tmp_path / "blocker"
    blocker.write_text("")
    directory = {
        "file": blocker,
        "under-file": blocker / "cache",
        "too-long": tmp_path / ("x" * 300),
        "read-only": tmp_path / "cache",
    }[where]
    if where == "read-only":
        _read_only(monkeypatch)
    monkeypatch.setenv("GNNSYS_CACHE_DIR", str(directory))
    with pytest.warns(RuntimeWarning, match=f"cannot write this cache .*{reason}.*without caching it") as caught:
        found = io_model(path, 512)
    assert found.rates["threads"] == {1: 1000.0, 8: 4000.0} and len(caught) == 1 and len(calls) == 1
    assert "\n" not in str(caught[0].message) and blocker.read_text() == ""


def test_train_on_the_ssd_tier_runs_with_an_unwritable_cache(make_dataset, fake_probe, monkeypatch, tmp_path):
    ds, _ = make_dataset(num_nodes=200, dim=100)
    direct_file(tmp_path)  # skips where tmp_path has no O_DIRECT (then the SSD tier probes nothing)
    _, calls = fake_probe
    blocker = tmp_path / "blocker"
    blocker.write_text("")
    monkeypatch.setenv("GNNSYS_CACHE_DIR", str(blocker))
    argv = ["train", str(ds.path), "--features", "ssd", "--epochs", "1", "--fanouts", "3", "--no-progress"]
    with pytest.warns(RuntimeWarning, match=f"{blocker}/io-probe-.*cannot write this cache") as caught:
        assert main(argv) == 0
    assert len(calls) == 1 and blocker.read_text() == ""
    assert sum("cannot write this cache" in str(w.message) for w in caught) == 1


def test_info_probe_io_says_when_the_probe_is_not_cached(make_dataset, fake_probe, monkeypatch, tmp_path, capsys):
    ds, _ = make_dataset(num_nodes=200, dim=100)
    direct_file(tmp_path)
    blocker = tmp_path / "blocker"
    blocker.write_text("")
    monkeypatch.setenv("GNNSYS_CACHE_DIR", str(blocker))
    with pytest.warns(RuntimeWarning, match="cannot write this cache"):
        assert main(["info", str(ds.path), "--probe-io"]) == 0
    out = capsys.readouterr().out
    assert "I/O probe of device" in out and "  not cached" in out and "cached in" not in out
