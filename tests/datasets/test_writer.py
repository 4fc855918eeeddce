import numpy as np
import pytest
import torch

from gnnsys.datasets import DatasetError, PrepareOptions, load_dataset, write_dataset
from gnnsys.datasets.inspect import verify
from tests.conftest import random_source


@pytest.mark.parametrize("reorder", ["none", "degree"])
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_round_trip(make_dataset, reorder, dtype):
    ds, a = make_dataset(options=PrepareOptions(reorder=reorder, dtype=dtype, progress=False))
    order = ds.order.numpy() if ds.order is not None else np.arange(ds.num_nodes)
    expect = torch.from_numpy(a["x"][order]).to(getattr(torch, dtype))
    assert torch.equal(ds.features[torch.arange(ds.num_nodes)], expect)
    assert np.array_equal(ds.labels.numpy(), a["y"][order])
    ei = ds.edge_index().numpy()
    assert sorted(zip(order[ei[0]], order[ei[1]])) == sorted(zip(a["src"], a["dst"]))
    assert verify(ds.path) == []


def test_reorder_puts_hot_nodes_first(make_dataset):
    ds, _ = make_dataset(options=PrepareOptions(reorder="degree", progress=False))
    deg = ds.indptr.diff()
    assert bool((deg[:-1] >= deg[1:]).all())


@pytest.mark.parametrize("align,stride", [(128, 128), (512, 512), (16, 32)])
def test_row_stride(make_dataset, align, stride):
    ds, _ = make_dataset(options=PrepareOptions(align=align, progress=False), dim=7)
    assert ds.meta["features"]["row_stride"] == stride


def test_transforms(make_dataset):
    opts = PrepareOptions(to_undirected=True, self_loops="drop", dedup=True, progress=False)
    ds, a = make_dataset(options=opts)
    pairs = {(s, d) for s, d in zip(a["src"], a["dst"]) if s != d}
    pairs |= {(d, s) for s, d in pairs}
    ei = ds.edge_index().numpy()
    assert sorted(zip(ei[0], ei[1])) == sorted(pairs)


def test_existing_output_is_refused_then_replaced(tmp_path):
    out = tmp_path / "ds"
    write_dataset(random_source(seed=1)[0], out, PrepareOptions(progress=False))
    with pytest.raises(DatasetError, match="already exists"):
        write_dataset(random_source(seed=2)[0], out, PrepareOptions(progress=False))
    write_dataset(random_source(seed=2, num_nodes=70)[0], out, PrepareOptions(overwrite=True, progress=False))
    assert load_dataset(out).num_nodes == 70
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ds"]


def test_failed_overwrite_keeps_old_dataset(tmp_path):
    out = tmp_path / "ds"
    write_dataset(random_source(seed=1)[0], out, PrepareOptions(progress=False))
    bad, arrays = random_source(seed=2)
    x = arrays["x"].copy()
    x[5, 2] = np.nan
    from gnnsys.datasets.source import array_feature_chunks
    bad.feature_chunks = array_feature_chunks(x, 13)
    with pytest.raises(DatasetError, match=r"row 5: NaN"):
        write_dataset(bad, out, PrepareOptions(overwrite=True, progress=False))
    assert verify(out) == []
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ds"]


def test_verify_catches_corruption(make_dataset):
    ds, _ = make_dataset()
    with open(ds.path / "features.bin", "r+b") as f:
        f.seek(3)
        f.write(b"\x7f")
    assert any("checksum" in p for p in verify(ds.path))
