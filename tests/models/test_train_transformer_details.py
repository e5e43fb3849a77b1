"""The dynamic-halt paper's code's smaller choices as config values (issue 20 items 7, 8): gate LayerNorm,
dropout placement, initialisation; halting statistics count kept layers, GUTLB's L_ACT per sequence."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from rirlab.models import registry
from rirlab.models.attention import FeedForward, GatedFeedForward
from rirlab.tasks.base import TaskInfo

D = 16


def build(name: str, **kw):
    entry = registry.get(name)
    cfg = entry.config(**{"hidden_size": D, "num_heads": 2, "dropout": 0.0, **kw})
    return entry.build(cfg, TaskInfo(12, 5, "classify"))


def batch(lengths, seed=0):
    g = torch.Generator().manual_seed(seed)
    mask = torch.arange(max(lengths))[None, :] < torch.tensor(lengths)[:, None]  # (N, S)
    return {"tokens": torch.randint(1, 12, mask.shape, generator=g) * mask, "mask": mask}


@pytest.mark.parametrize("name", ["gut", "gutlb"])
def test_gate_norm_shared_reads_the_feed_forwards_layernorm_own_does_not(name):
    for gate_norm, shared in (("shared", True), ("own", False)):
        model = build(name, gate_norm=gate_norm)
        ff = model.encoder.block.ff if name == "gut" else model.encoder.layers[0].ff
        assert isinstance(ff, GatedFeedForward) and (ff.ln is ff.ff.ln) == shared
        a = torch.randn(2, 5, D)
        before = ff.gate(a)
        with torch.no_grad():
            ff.ff.ln.weight.mul_(3.0)  # change only the feed-forward's LayerNorm
        assert torch.allclose(ff.gate(a), before) != shared  # the gate follows it exactly when shared
    own = build(name, gate_norm="own")
    shared_model = build(name)
    assert sum(p.numel() for p in own.parameters()) == sum(p.numel() for p in shared_model.parameters()) + 2 * D


def test_feed_forward_dropout_code_sits_before_the_gelu_post_gelu_after():
    torch.manual_seed(0)
    a = torch.randn(2, 3, D)
    p, dff = 0.5, 2 * D
    for at in ("code", "post_gelu"):
        ff = FeedForward(D, dff, p, dropout_at=at).train()
        torch.manual_seed(1)
        out = ff(a)
        torch.manual_seed(1)  # the same masks, in the order the module draws them
        m1 = F.dropout(torch.ones(2, 3, dff), p)
        m2 = F.dropout(torch.ones(2, 3, D), p)
        u = ff.w1(ff.ln(a))
        hidden = F.gelu(u * m1) if at == "code" else F.gelu(u) * m1
        torch.testing.assert_close(out, ff.w2(hidden) * m2 + a)
    # the two placements differ on the same masks: GELU(u / (1 - p)) != GELU(u) / (1 - p)
    u = torch.tensor([0.7])
    assert not torch.allclose(F.gelu(u / (1 - p)), F.gelu(u) / (1 - p))


def test_gate_dropout_code_before_the_gelu_and_on_the_logits_post_gelu_none():
    torch.manual_seed(0)
    a = torch.randn(2, 3, D)
    p, dff = 0.5, 2 * D
    code = GatedFeedForward(D, dff, p, shared_norm=True, dropout_at="code").train()
    torch.manual_seed(2)
    g = code.gate(a)
    torch.manual_seed(2)
    m1, m2 = F.dropout(torch.ones(2, 3, dff), p), F.dropout(torch.ones(2, 3, D), p)
    torch.testing.assert_close(g, torch.sigmoid(code.g2(F.gelu(code.g1(code.ln(a)) * m1)) * m2))
    assert (g == 0.5).any()  # a dropped logit gives sigmoid(0)
    post = GatedFeedForward(D, dff, p, shared_norm=True, dropout_at="post_gelu").train()
    torch.testing.assert_close(post.gate(a), post.eval().gate(a))  # no dropout in the gate


def test_models_default_to_the_codes_dropout_and_gate_norm():
    model = build("gut", dropout=0.3)
    ff = model.encoder.block.ff
    assert ff.ff.pre_gelu and isinstance(ff.drop, nn.Dropout) and ff.ln is ff.ff.ln
    old = build("gut", dropout=0.3, ff_dropout="post_gelu", gate_norm="own").encoder.block.ff
    assert not old.ff.pre_gelu and isinstance(old.drop, nn.Identity) and old.ln is not old.ff.ln


@pytest.mark.parametrize("name", ["transformer", "gut", "tlb"])
def test_init_scheme_code_vs_torch(name):
    torch.manual_seed(0)
    code = build(name, hidden_size=64, num_heads=4)
    torch.manual_seed(0)
    plain = build(name, hidden_size=64, num_heads=4, init_scheme="torch")
    assert code.embed.weight[1:].std().item() == pytest.approx(0.02, rel=0.1)  # N(0, 0.02^2)
    assert plain.embed.weight[1:].std().item() == pytest.approx(1.0, rel=0.1)  # nn.Embedding: N(0, 1)
    assert code.embed.weight[0].abs().max() == 0  # the padding row stays zero
    d = 64
    xavier_qkv = math.sqrt(6 / (2 * d)) / math.sqrt(2)  # Xavier-uniform bound, gain 1/sqrt(2)
    torch_bound = 1 / math.sqrt(d)  # nn.Linear's default (kaiming-uniform, a = sqrt(5))
    mha = next(m for m in code.modules() if m.__class__.__name__ == "MultiHeadAttention")
    mha_t = next(m for m in plain.modules() if m.__class__.__name__ == "MultiHeadAttention")
    assert xavier_qkv * 0.95 < mha.q.weight.abs().max() <= xavier_qkv
    assert mha_t.q.weight.abs().max() <= torch_bound < xavier_qkv * 0.95  # narrower than the code's
    ffs = [m for m in code.modules() if isinstance(m, FeedForward)]
    ffs_t = [m for m in plain.modules() if isinstance(m, FeedForward)]
    assert all(f.w1.bias.abs().max() < 1e-4 for f in ffs)  # biases N(0, 1e-6^2)
    assert all(f.w1.bias.abs().max() > 1e-2 for f in ffs_t)
    dff = ffs[0].w1.out_features
    assert ffs[0].w1.weight.abs().max() <= math.sqrt(6 / (d + dff))  # Xavier-uniform, gain 1


def constant_halt(halting, p: float) -> None:
    for lin in (halting.halt.w1, halting.halt.w2):
        nn.init.zeros_(lin.weight)
        nn.init.zeros_(lin.bias)
    nn.init.constant_(halting.halt.w2.bias, float(torch.logit(torch.tensor(p))))


@pytest.mark.parametrize("name", ["ut", "gut"])
def test_mean_layers_counts_kept_layers_not_the_crossing_one(name):
    """alpha_hat = 0.6: cumulative alpha 0.6, 0.84, then 0.936 >= 0.9 at layer 3, which is run and dropped."""
    model = build(name, max_layers=10, alpha_thresh=0.9, depth_cap_offset=None).eval()
    constant_halt(model.encoder.halting, 0.6)
    with torch.no_grad():
        out = model(batch([6, 3]))
    assert out.stats["mean_layers"] == 2.0 and out.stats["max_layers_used"] == 3.0
    kept = build(name, max_layers=10, alpha_thresh=0.9, depth_cap_offset=None, keep_crossing_layer=True).eval()
    constant_halt(kept.encoder.halting, 0.6)
    with torch.no_grad():
        assert kept(batch([6, 3])).stats["mean_layers"] == 3.0


def test_gutlb_mean_layers_per_chunk_and_act_loss_per_sequence_over_its_chunks():
    """Chunks of 4 (fixed): sequence 0 has two full chunks (depth cap 4 + 1 = 5 layers each), sequence 1 one chunk
    of 2 real tokens (cap 3) and an empty one (not counted); alpha_hat = 0.6 never reaches 0.999 first."""
    model = build("gutlb", chunk_size=4, memory_slots=3, chunking="fixed").eval()
    constant_halt(model.encoder.halting, 0.6)
    with torch.no_grad():
        out = model(batch([8, 2]))

    def act(k):  # L_ACT of one chunk keeping k layers: sum_j alpha_j (j + 1) + remainder * k
        alphas = [0.6 * 0.4 ** j for j in range(k)]
        return sum(a * (j + 1) for j, a in enumerate(alphas)) + (1 - sum(alphas)) * k

    assert out.stats["mean_layers"] == pytest.approx((5 + 5 + 3) / 3)  # kept layers per chunk with real tokens
    per_seq = [(act(5) + act(5)) / 2, act(3)]  # each sequence over its own chunks, then the batch
    assert out.aux_loss.item() == pytest.approx(sum(per_seq) / 2, rel=1e-5)
    assert out.aux_loss.item() != pytest.approx((2 * act(5) + act(3)) / 3, rel=1e-3)  # not over all chunks


def test_code_init_leaves_a_tasks_pretrained_embeddings_alone(monkeypatch):
    """Tasks with frozen word vectors (GloVe) give the head an embedding that is not a plain nn.Embedding."""
    import rirlab.models.attention as transformer

    vectors = torch.randn(12, 6)

    class Pretrained(transformer.TaskModel):
        def __init__(self, encoder, info, cfg):
            super().__init__(encoder, info, cfg)
            self.embed = nn.Sequential(nn.Embedding.from_pretrained(vectors.clone(), freeze=True), nn.Linear(6, D))

    monkeypatch.setattr(transformer, "TaskModel", Pretrained)
    model = build("gut")
    torch.testing.assert_close(model.embed[0].weight, vectors)
