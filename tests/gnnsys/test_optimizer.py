"""make_optimizer and DenseSparseAdam: Adam for dense weights, SparseAdam for
sparse-gradient embeddings, as one optimizer."""

import copy

import pytest
import torch
from torch import nn

from gnnsys.errors import ConfigError
from gnnsys.training.optimizer import DenseSparseAdam, adam, make_optimizer


class Embedded(nn.Module):
    """An embedding table read by ids, then a linear map."""

    def __init__(self, sparse: bool, rows=50, width=6):
        super().__init__()
        self.emb = nn.Embedding(rows, width, sparse=sparse)
        self.lin = nn.Linear(width, 3)

    def forward(self, ids):
        return self.lin(self.emb(ids))


def batches(count=6, seed=0):
    """(ids, target) pairs; ids draw from rows 0..29 only, so rows 30..49 are never read."""
    g = torch.Generator().manual_seed(seed)
    return [(torch.randint(0, 30, (8,), generator=g), torch.randint(0, 3, (8,), generator=g)) for _ in range(count)]


def train(model, optimizer, data, scheduler=None):
    for ids, y in data:
        optimizer.zero_grad(set_to_none=True)
        nn.functional.cross_entropy(model(ids), y).backward()
        optimizer.step()
        if scheduler is not None:
            scheduler.step()


def test_dense_models_get_adam():
    optimizer = make_optimizer(Embedded(sparse=False), lr=0.01, weight_decay=5e-4)
    assert type(optimizer) is torch.optim.Adam and optimizer.param_groups[0]["weight_decay"] == 5e-4


def test_equals_adam_and_sparse_adam_side_by_side():
    torch.manual_seed(0)
    model = Embedded(sparse=True)
    twin = copy.deepcopy(model)
    optimizer = make_optimizer(model, lr=0.05, weight_decay=0)
    assert isinstance(optimizer, DenseSparseAdam)
    dense = adam(twin.lin.parameters(), lr=0.05)  # the dense part's Adam (fused, where torch has it)
    sparse = torch.optim.SparseAdam([twin.emb.weight], lr=0.05)
    data = batches()
    train(model, optimizer, data)
    for ids, y in data:
        dense.zero_grad(set_to_none=True)
        sparse.zero_grad(set_to_none=True)
        nn.functional.cross_entropy(twin(ids), y).backward()
        dense.step()
        sparse.step()
    for (name, p), q in zip(model.state_dict().items(), twin.state_dict().values(), strict=True):
        assert torch.equal(p, q), name


def test_only_the_rows_a_batch_read_change():
    """Lazy Adam: a row moves at the steps that read it only (Adam's momentum
    would keep moving rows 40..44 after the first step)."""
    torch.manual_seed(0)
    model = Embedded(sparse=True)
    optimizer = make_optimizer(model, lr=0.05, weight_decay=0)
    before = model.emb.weight.detach().clone()
    train(model, optimizer, [(torch.arange(40, 45), torch.zeros(5, dtype=torch.long))])
    after_first = model.emb.weight.detach().clone()
    train(model, optimizer, batches())
    assert (after_first[40:45] != before[40:45]).all(dim=1).all()
    assert torch.equal(model.emb.weight[40:], after_first[40:]) and torch.equal(after_first[45:], before[45:])
    assert (model.emb.weight[:30] != after_first[:30]).any()


def test_a_schedule_changes_both_learning_rates():
    model = Embedded(sparse=True)
    optimizer = make_optimizer(model, lr=0.1, weight_decay=0)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=2, gamma=0.5)
    train(model, optimizer, batches(count=4), scheduler)
    assert [g["lr"] for g in optimizer.param_groups] == [0.025, 0.025]
    assert optimizer._sparse.param_groups[0]["lr"] == 0.025


def test_state_dict_resumes_exactly():
    torch.manual_seed(0)
    model = Embedded(sparse=True)
    data = batches(count=8)
    whole = copy.deepcopy(model)
    train(whole, make_optimizer(whole, lr=0.05, weight_decay=0), data)

    first = make_optimizer(model, lr=0.05, weight_decay=0)
    train(model, first, data[:4])
    saved = copy.deepcopy(first.state_dict())
    resumed = make_optimizer(model, lr=0.05, weight_decay=0)
    resumed.load_state_dict(saved)
    train(model, resumed, data[4:])
    for (name, p), q in zip(model.state_dict().items(), whole.state_dict().values(), strict=True):
        assert torch.equal(p, q), name


def test_an_embedding_alone_has_no_dense_part():
    emb = nn.Embedding(10, 4, sparse=True)
    optimizer = make_optimizer(emb, lr=0.1, weight_decay=0)
    emb(torch.tensor([1, 2])).sum().backward()
    optimizer.step()
    assert len(optimizer.param_groups) == 1 and optimizer.state_dict()["dense"] is None


def test_weight_decay_is_refused():
    with pytest.raises(ConfigError) as refused:
        make_optimizer(Embedded(sparse=True), lr=0.01, weight_decay=5e-4)
    assert refused.value.option == "weight_decay" and "SparseAdam" in str(refused.value)


def test_another_optimizers_state_is_refused():
    model = Embedded(sparse=True)
    optimizer = make_optimizer(model, lr=0.01, weight_decay=0)
    with pytest.raises(ValueError, match="not the state of an Adam with SparseAdam"):
        optimizer.load_state_dict(torch.optim.Adam(model.lin.parameters()).state_dict())


def test_dense_adam_is_fused_and_steps_like_the_unfused_one():
    torch.manual_seed(0)
    model = Embedded(sparse=False)
    twin = copy.deepcopy(model)
    optimizer = make_optimizer(model, lr=0.05, weight_decay=5e-4)
    assert optimizer.param_groups[0]["fused"] is True
    data = batches()
    train(model, optimizer, data)
    train(twin, torch.optim.Adam(twin.parameters(), lr=0.05, weight_decay=5e-4, foreach=True), data)
    for (name, p), q in zip(model.state_dict().items(), twin.state_dict().values(), strict=True):
        torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-6, msg=name)
