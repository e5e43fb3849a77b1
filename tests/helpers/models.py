"""Shared helpers of the model tests: build a registered model on a 16-token vocabulary, pad a batch, draw random
sequences, the generic shape/gradient and padding/determinism checks, and a tiny ListOps learning run."""

from __future__ import annotations

import collections

import torch
import torch.nn.functional as F

from rirlab.models import registry
from rirlab.tasks.base import TaskInfo

INFO = TaskInfo(16, 10, "classify")
# the tiny ListOps run of the OM/CRvNN learning tests: short, shallow expressions
TINY_LISTOPS = dict(n=1200, n_train=1000, max_args=3, max_depth=2, min_len=5, max_len=16)


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
    missing = missing_gradients(model, skip=("encoder.tree.scorer.bias", "encoder.tree.scorer.w2.bias", "embed.weight"))
    assert not missing, missing


def frozen_reverse_s4d(model):
    """Names of the parameters of every S4D backward direction that trains no gradient (s4d_reverse_trainable:
    false, the authors' code; rirlab.models.s4d.BiS4D)."""
    from rirlab.models.s4d import BiS4D

    return {f"{name}.bwd.{p}" for name, m in model.named_modules() if isinstance(m, BiS4D) and not m.reverse_trainable
            for p, _ in m.bwd.named_parameters()}


def missing_gradients(model, skip=()):
    """Parameters without a non-zero gradient after a backward, apart from ``skip`` and the frozen S4D backward
    directions (:func:`frozen_reverse_s4d`), whose gradient is asserted to be exactly zero (not None)."""
    frozen, params = frozen_reverse_s4d(model), dict(model.named_parameters())
    assert all(params[n].grad is not None and not params[n].grad.any() for n in frozen), frozen
    return [n for n, p in params.items() if n not in frozen and n not in skip and (p.grad is None or not p.grad.any())]


def check_padding_and_determinism(name, **kw):
    torch.manual_seed(2)
    model = build(name, **kw).eval()
    seqs = random_seqs([12, 5, 1, 8, 2])
    with torch.no_grad():
        full = model(batch_of(seqs)).logits
        assert torch.equal(full, model(batch_of(seqs)).logits)  # eval is deterministic
        for i, s in enumerate(seqs):
            assert torch.allclose(model(batch_of([s])).logits[0], full[i], atol=1e-5), (name, i)


def learns_listops(name, steps=150, *, n=1500, n_train=1200, max_args=3, max_depth=3, min_len=5, max_len=20,
                   opt=None, clip=0.0, threads=1, **kw):
    """Train a tiny ``name`` (config ``kw``) on short generated ListOps with AdamW (``opt``: its arguments, default
    lr 3e-3), batches of 32; return (dev accuracy, majority-class rate of dev). One torch thread: small ops run
    faster so, and it is kinder to a shared 2-core machine."""
    from rirlab.tasks import listops
    from rirlab.tasks.base import collate_classify

    saved = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        examples = listops.generate(n, 7, max_args=max_args, max_depth=max_depth, min_len=min_len, max_len=max_len)
        data = [([listops.TOKEN_ID[t] for t in listops.tokenize(x)], y) for x, y in examples]
        train, dev = data[:n_train], data[n_train:]
        majority = max(collections.Counter(y for _, y in dev).values()) / len(dev)
        torch.manual_seed(0)
        entry = registry.get(name)
        model = entry.build(entry.config(**kw), TaskInfo(len(listops.VOCAB), 10, "classify"))
        optimizer = torch.optim.AdamW(model.parameters(), **{"lr": 3e-3, **(opt or {})})
        g = torch.Generator().manual_seed(0)
        model.train()
        for _ in range(steps):
            batch = collate_classify([train[i] for i in torch.randint(0, len(train), (32,), generator=g).tolist()])
            loss = F.cross_entropy(model(batch).logits, batch["labels"])
            optimizer.zero_grad()
            loss.backward()
            if clip:
                torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
            optimizer.step()
        model.eval()
        with torch.no_grad():
            batch = collate_classify(dev)
            acc = (model(batch).logits.argmax(-1) == batch["labels"]).float().mean().item()
        return acc, majority
    finally:
        torch.set_num_threads(saved)


def training_step_ops(name: str, batch: int = 2, length: int = 100):
    """The ATen ops one training step of model ``name`` dispatches (rirlab.bench.ops.OpCounter), counted as `rirlab
    bench` steps it (random ListOps rows, its fused AdamW), after one warm-up step that builds per-shape caches."""
    import torch

    from rirlab.bench.base import BenchOptions, bench_optimizer, build_model, one_step, random_batch
    from rirlab.bench.ops import OpCounter

    torch.manual_seed(0)
    model = build_model(name, BenchOptions(batch=batch, length=length)).train()
    opt = bench_optimizer(model)  # as `rirlab bench` steps it (the trainer on CUDA)
    rows = random_batch(batch, length, "cpu")
    one_step(model, opt, rows, True)  # warm-up: merge tables, index caches and kernel constants, once per shape
    with OpCounter() as ops:
        one_step(model, opt, rows, True)
    return ops
