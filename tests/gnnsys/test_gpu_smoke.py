"""GPU smoke test (marked `gpu`: skipped without CUDA; benchmarks/gpu_check.sh runs it first).

Every placement x {"cuda", "cuda:0"} x {cpu, gpu} sampler: x[ids] against the
stored rows (ids on the host, on the GPU, strided, expanded, out of range, an
`out` allocated on "cuda"), the loader's batches wholly on the device with
the right labels, and a tiny train() on each.
"""

import math

import pytest
import torch

import gnnsys
from gnnsys.loading.loader import MinibatchLoader, _tensors
from gnnsys.loading.options import BatchOptions, SamplingOptions
from gnnsys.storage.placement import unified

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("sampler", ["cpu", "gpu"])
@pytest.mark.parametrize("device", ["cuda", "cuda:0"])
@pytest.mark.parametrize("placement", ["gpu", "pinned", "cpu-gather"])
def test_placement_device_sampler(make_dataset, placement, device, sampler):
    ds, arrays = make_dataset(num_nodes=300, num_edges=3000, dim=100, num_classes=4)
    want = torch.from_numpy(arrays["x"])
    gpu = torch.device("cuda", torch.cuda.current_device())
    x = unified(ds.features, placement, device, progress=False)
    ids = torch.randint(0, 300, (257,), generator=torch.Generator().manual_seed(0))
    for index in (ids, ids.to(device), ids.to(device)[::3], torch.tensor([7]).expand(5)):
        got = x[index]
        assert got.device == gpu and torch.equal(got.cpu(), want[index.cpu()])
    out = torch.empty(4, 100, device="cuda")
    assert x.source.gather(ids[:4], out=out) is out and torch.equal(out.cpu(), want[ids[:4]])
    with pytest.raises(IndexError):
        x[torch.tensor([3, 300])]
    loader = MinibatchLoader(
        ds,
        "train",
        SamplingOptions(fanouts=[5, 5], sampler=sampler),
        BatchOptions(batch_size=64),
        device=device,
        features=x.source,
    )
    for mb in loader:
        assert {t.device for t in _tensors(mb)} == {gpu}
        assert torch.equal(mb.y.cpu(), ds.labels[mb.seeds.cpu()])
        assert torch.equal(mb.x.cpu(), want[mb.input_nodes.cpu()])
    result = gnnsys.train(
        ds,
        epochs=2,
        fanouts=(5, 5),
        batch_size=64,
        hidden=16,
        device=device,
        features=placement,
        sampler=sampler,
        progress=False,
    )
    assert all(math.isfinite(e["loss"]) for e in result.epochs) and result.test is not None
