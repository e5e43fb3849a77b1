"""The device checks of tests/models/test_models_devices.py, each a ``check_*`` function of its device(s): the same
logic runs CPU-vs-CPU in the default suite and on CUDA (``pytest -m cuda``, skipped where torch sees no GPU), so it
is known to work before it ever meets a GPU:

- the fused beam search equals the reference search on the device (float64, values and gradients, training mode
  with dropout and input beams: the same draws on one device give the same survivors);
- every registered model on the device equals itself on CPU for shared weights in eval (float64);
- one training step of every registered model on the device: finite loss, a finite gradient on every parameter,
  every parameter moved;
- one bf16-autocast training step (:func:`rirlab.models.base.autocast`) runs, its loss is finite, the beam scores
  inside stay float32;
- the fused search's host synchronisations do not grow with the number of merge steps
  (``torch.cuda.set_sync_debug_mode`` on CUDA, :class:`HostReads` on CPU);
- dropout masks are drawn on the device and repeat under ``torch.manual_seed``.
"""

from __future__ import annotations

import copy
import random
import warnings

import pytest
import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

from rirlab.config import build, field_names
from rirlab.models import registry
from rirlab.models.base import autocast
from rirlab.models.fused_beam import FusedBeamTree
from rirlab.models.grc import GRC, dropout_keep_mask, random_bits16
from rirlab.models.scorer import Scorer
from rirlab.tasks.base import TaskInfo, collate_classify

VOCAB, CLASSES = 20, 5
# the "cuda" case of a device-parametrised test: marked cuda (opt-in: pytest -m cuda), skipped without a GPU
CUDA = pytest.param("cuda", id="cuda", marks=[pytest.mark.cuda, pytest.mark.skipif(not torch.cuda.is_available(),
                                                                                     reason="needs a CUDA device")])
# tiny settings, each applied where the model's config has the field
TINY = {"hidden_size": 16, "cell_mult": 2, "num_heads": 2, "ff_mult": 2, "num_layers": 1, "n_layers": 1,
        "max_layers": 3, "chunk_size": 4, "memory_slots": 2, "s4d_state": 4, "beam_size": 2, "d_s": 8}
LENGTHS = (1, 5, 11, 9)  # one token, one chunk, several chunks (chunk 4: L >= 6 is chunked)


def tiny_model(name: str, dtype=torch.float32, seed: int = 0):
    """The registered model ``name`` at TINY settings for a classification task, on CPU."""
    entry = registry.get(name)
    cfg = build(entry.config, {k: v for k, v in TINY.items() if k in field_names(entry.config)}, "test")
    torch.manual_seed(seed)
    return entry.build(cfg, TaskInfo(VOCAB, CLASSES, "classify")).to(dtype), cfg


def tiny_batch(device) -> dict:
    rng = random.Random(0)
    batch = collate_classify([([rng.randrange(1, VOCAB) for _ in range(n)], n % CLASSES) for n in LENGTHS])
    return {k: v.to(device) for k, v in batch.items()}


def loss_of(model, cfg, batch) -> torch.Tensor:
    """The trainer's loss: cross-entropy plus halt_loss_weight x the auxiliary (L_ACT) loss."""
    out = model(batch)
    loss = F.cross_entropy(out.logits, batch["labels"])
    if out.aux_loss is not None:
        loss = loss + getattr(cfg, "halt_loss_weight", 0.0) * out.aux_loss
    return loss


# ---- checks, each a function of its device(s) ----------------------------------------------------------------
def check_fused_equals_reference(device):
    """Fused vs reference search on ``device``, float64, training mode, dropout 0.3, b input beams with scores."""
    d, b = 16, 4
    torch.manual_seed(7)
    tree = FusedBeamTree(GRC(d, 4, 0.3), Scorer(d, 8), b).to(device, torch.float64).train()
    lengths = torch.tensor([7, 4, 1, 9, 2, 9], device=device)
    x = torch.randn(len(lengths), b, 9, d, dtype=torch.float64, device=device, requires_grad=True)
    in_scores = torch.randn(len(lengths), b, dtype=torch.float64, device=device, requires_grad=True)
    inputs = [x, in_scores, *tree.parameters()]
    results = []
    for fused in (True, False):
        tree.fused = fused
        torch.manual_seed(1)  # the same draws for both searches (on this device's generator)
        roots, scores = tree(x, lengths, in_scores)
        g = torch.Generator().manual_seed(2)
        w_roots = torch.randn(roots.shape, generator=g, dtype=torch.float64).to(device)
        w_scores = torch.randn(scores.shape, generator=g, dtype=torch.float64).to(device)
        loss = (roots * w_roots).sum() + (scores.clamp(min=-1e3) * w_scores).sum()
        loss = loss + (F.softmax(scores, -1)[..., None] * roots).sum()
        results.append((roots, scores, torch.autograd.grad(loss, inputs)))
    (r1, s1, g1), (r2, s2, g2) = results
    assert r1.device.type == torch.device(device).type and r1.dtype == torch.float64
    torch.testing.assert_close(r1, r2, atol=1e-10, rtol=1e-10)
    torch.testing.assert_close(s1, s2, atol=1e-10, rtol=1e-10)
    for a, c in zip(g1, g2):
        torch.testing.assert_close(a, c, atol=1e-9, rtol=1e-9)
    assert g1[0].abs().sum() > 0 and g1[1].abs().sum() > 0 and g1[-4].abs().sum() > 0


def check_model_matches_across_devices(name: str, dev_a, dev_b):
    """The same weights in eval (float64) give the same logits on ``dev_a`` and ``dev_b``."""
    model, _ = tiny_model(name, torch.float64)
    model.eval()
    out = []
    for dev, m in ((dev_a, model.to(dev_a)), (dev_b, copy.deepcopy(model).to(dev_b))):
        with torch.no_grad():
            logits = m(tiny_batch(dev)).logits
        assert logits.device.type == torch.device(dev).type and logits.dtype == torch.float64
        out.append(logits.cpu())
    torch.testing.assert_close(out[0], out[1], atol=1e-9, rtol=1e-7)
    assert out[0].std() > 0  # not a constant


def check_training_step(name: str, device, precision: str = "fp32"):
    """One training step on ``device`` at ``precision``: finite loss, a finite gradient on every parameter (nonzero on
    most), and the optimizer moves every parameter that got a nonzero gradient."""
    model, cfg = tiny_model(name)
    model.to(device).train()
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    batch = tiny_batch(device)
    torch.manual_seed(3)
    with autocast(precision, device):
        loss = loss_of(model, cfg, batch)
    assert loss.dtype == torch.float32 and torch.isfinite(loss), f"{name} at {precision}: loss {loss}"
    loss.backward()
    none = [n for n, p in model.named_parameters() if p.grad is None]
    assert not none, f"{name} at {precision}: no gradient reaches {none}"
    bad = [n for n, p in model.named_parameters() if not torch.isfinite(p.grad).all()]
    assert not bad, f"{name} at {precision}: non-finite gradient in {bad}"
    params = dict(model.named_parameters())
    zero = [n for n, p in params.items() if not p.grad.any()]
    assert len(zero) <= len(params) // 4, f"{name} at {precision}: zero gradient in {zero}"
    opt.step()
    still = [n for n, p in params.items() if n not in zero and torch.equal(p.detach(), before[n])]
    assert not still, f"{name} at {precision}: the step left {still} unchanged"


def check_search_scores_fp32_under_bf16(device):
    """Under bf16 autocast the fused and the reference search return float32 beam scores and roots."""
    d, b = 16, 3
    torch.manual_seed(0)
    tree = FusedBeamTree(GRC(d, 4, 0.1), Scorer(d, 8), b).to(device).train()
    x = torch.randn(3, 1, 6, d, device=device).bfloat16()  # what a bf16 leaf layer hands over
    lengths = torch.tensor([6, 3, 1], device=device)
    for fused in (True, False):
        tree.fused = fused
        with autocast("bf16", device):
            roots, scores = tree(x, lengths)
            ps = tree.scorer(x[:, 0, :-1], x[:, 0, 1:])
        assert scores.dtype == torch.float32 and ps.dtype == torch.float32, (fused, scores.dtype, ps.dtype)
        assert torch.isfinite(roots).all() and (scores[:, 0] > -1e3).all()
    with autocast("bf16", device):  # autocast is on: a plain linear layer does go to bf16
        assert tree.cell.w2(torch.randn(2, 4 * d, device=device)).dtype == torch.bfloat16


def check_dropout_draws_on_device(device):
    """Keep masks are drawn on ``device`` with the right rate and repeat under torch.manual_seed."""
    torch.manual_seed(5)
    bits = random_bits16(40001, device)
    assert bits.device.type == torch.device(device).type and bits.dtype == torch.int16 and bits.numel() == 40001
    mask = dropout_keep_mask((200, 500), 0.1, device)
    torch.manual_seed(5)
    assert torch.equal(random_bits16(40001, device), bits)
    assert torch.equal(dropout_keep_mask((200, 500), 0.1, device), mask)
    assert abs((~mask).float().mean().item() - 0.1) < 0.005
    b = bits.float()
    assert abs(b.mean().item()) < 800 and b.min() < -32000 and b.max() > 32000  # uniform over the int16 range


class HostReads:
    """Counts the torch calls that read a tensor's values on the host (each a synchronisation on CUDA), on CPU.

    A dispatch mode sees the aten ops, in autograd's backward too (nonzero, _local_scalar_dense behind item/bool/int,
    boolean indexing, bincount, unique, repeat_interleave by a tensor); ``tolist``, which reads CPU memory without
    an op, is seen by a function mode, outside backward only. ``calls``: the names, in order.
    """

    OPS = {"nonzero", "_local_scalar_dense", "masked_select", "bincount", "_unique2", "unique_dim",
           "unique_consecutive", "repeat_interleave"}

    def __init__(self):
        self.calls: list[str] = []
        reads = self

        class Ops(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                name = func.overloadpacket.__name__
                bool_index = name in ("index", "index_put", "index_put_") and any(
                    isinstance(i, torch.Tensor) and i.dtype == torch.bool for i in args[1])
                if name in HostReads.OPS or bool_index:
                    reads.calls.append(name)
                return func(*args, **(kwargs or {}))

        class Methods(TorchFunctionMode):
            def __torch_function__(self, func, types, args=(), kwargs=None):
                if getattr(func, "__name__", "") in ("tolist", "numpy"):
                    reads.calls.append(func.__name__)
                return func(*args, **(kwargs or {}))

        self.modes = [Ops(), Methods()]

    def __enter__(self):
        for m in self.modes:
            m.__enter__()
        return self

    def __exit__(self, *exc):
        for m in reversed(self.modes):
            m.__exit__(*exc)


def count_syncs(fn, device) -> int:
    """Host synchronisations of ``fn()``: CUDA's sync debug mode on a GPU, :class:`HostReads` on CPU."""
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.set_sync_debug_mode("warn")
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                fn()
        finally:
            torch.cuda.set_sync_debug_mode("default")
        return sum("synchroniz" in str(w.message) for w in caught)
    with HostReads() as reads:
        fn()
    return len(reads.calls)


def check_fused_search_syncs_do_not_grow_with_length(device):
    """Forward + backward of the fused search (training, dropout): the same number of host synchronisations for 8
    and for 40 merge steps, and at most 4 (the lengths read once, the live set's depth counts once)."""
    d, b = 16, 3
    torch.manual_seed(0)
    tree = FusedBeamTree(GRC(d, 2, 0.1), Scorer(d, 8), b).to(device).train()

    def search(length):
        def run():
            x = torch.randn(4, 1, length, d, device=device, requires_grad=True)
            lengths = torch.full((4,), length, device=device)
            roots, scores = tree(x, lengths)
            (roots.sum() + scores.clamp(min=-1e3).sum()).backward()
        return run

    search(9)()  # warm-up: cached column patterns, lazy CUDA initialisation
    search(41)()
    short, long = count_syncs(search(9), device), count_syncs(search(41), device)
    assert short == long <= 4, (short, long)
