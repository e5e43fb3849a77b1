"""Shared helpers of the BT/GT model tests (tests/test_models_bt.py, tests/test_models_gt.py)."""

from __future__ import annotations

import collections

import torch
import torch.nn.functional as F

from rirlab.models import registry
from rirlab.tasks.base import TaskInfo

INFO = TaskInfo(16, 10, "classify")


def build(name, **kw):
    entry = registry.get(name)
    return entry.build(entry.config(**kw), INFO)


def batch_of(seqs):
    s = max(len(x) for x in seqs)
    tokens = torch.zeros(len(seqs), s, dtype=torch.long)
    for i, x in enumerate(seqs):
        tokens[i, : len(x)] = torch.tensor(x)
    return {"tokens": tokens, "mask": tokens != 0, "labels": torch.arange(len(seqs)) % 10}


def random_seqs(lengths, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(1, 16, (L,), generator=g).tolist() for L in lengths]


def check_shapes_and_gradients(name, **kw):
    """Logits (N, C); every parameter but the scorer's output bias (log-softmax ignores it) gets a gradient."""
    torch.manual_seed(1)
    model = build(name, **kw).train()
    batch = batch_of(random_seqs([9, 4, 1, 6]))
    out = model(batch)
    assert out.logits.shape == (4, 10)
    F.cross_entropy(out.logits, batch["labels"]).backward()
    missing = [n for n, p in model.named_parameters()
               if n not in ("encoder.tree.scorer.bias", "encoder.tree.scorer.w2.bias", "embed.weight")
               and (p.grad is None or p.grad.abs().sum() == 0)]
    assert not missing, missing


def check_padding_and_determinism(name, **kw):
    torch.manual_seed(2)
    model = build(name, **kw).eval()
    seqs = random_seqs([12, 5, 1, 8, 2])
    with torch.no_grad():
        full = model(batch_of(seqs)).logits
        assert torch.equal(full, model(batch_of(seqs)).logits)  # eval is deterministic
        for i, s in enumerate(seqs):
            assert torch.allclose(model(batch_of([s])).logits[0], full[i], atol=1e-5), (name, i)


def learns_listops(name, steps=150, **kw):
    """Train a tiny model on short ListOps; return (dev accuracy, majority-class rate)."""
    from rirlab.tasks import listops
    from rirlab.tasks.base import collate_classify

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        examples = listops.generate(1500, 7, max_args=3, max_depth=3, min_len=5, max_len=20)
        data = [([listops.TOKEN_ID[t] for t in listops.tokenize(x)], y) for x, y in examples]
        train, dev = data[:1200], data[1200:]
        majority = max(collections.Counter(y for _, y in dev).values()) / len(dev)
        torch.manual_seed(0)
        entry = registry.get(name)
        model = entry.build(entry.config(**kw), TaskInfo(len(listops.VOCAB), 10, "classify"))
        opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
        g = torch.Generator().manual_seed(0)
        model.train()
        for _ in range(steps):
            batch = collate_classify([train[i] for i in torch.randint(0, len(train), (32,), generator=g).tolist()])
            loss = F.cross_entropy(model(batch).logits, batch["labels"])
            opt.zero_grad()
            loss.backward()
            opt.step()
        model.eval()
        with torch.no_grad():
            batch = collate_classify(dev)
            acc = (model(batch).logits.argmax(-1) == batch["labels"]).float().mean().item()
        return acc, majority
    finally:
        torch.set_num_threads(threads)
