"""TLB / GUTLB and the recurrent Transformers' heads at the paper's code's defaults (issue 31 items 6-9).

Each pinned number is the output of the dynamic-halt paper's public code (JRC1995/InvestigatingRecurrentTransformers:
``TLBEncoder`` / ``UTLBEncoder`` with ``TLBBlock`` / ``GatedTLBBlock`` / ``CrossTransformerBlock``, and
``sentence_pair_framework`` with ``batch_pair``) on the same small case: weights filled by :func:`fill` and copied
into the code's modules, float64, eval, its flash attention computed densely. rirlab matches them to ~1e-9 (both
sides build xPos's sin/cos tables in float32); every alternative config value is checked to miss them.
"""

import pytest
import torch

from rirlab.models import registry
from rirlab.tasks.base import TaskInfo

LENGTHS = [5, 2, 7]
TOL = dict(rtol=0, atol=1e-7)

TLB_MEAN = [[0.24567201, -0.3413479, -0.43400711, -0.41286851], [0.64703832, -0.39199571, -0.36968236, 0.0074512],
            [0.27216754, -0.32413345, -0.44882076, -0.42299571]]
TLB_LAST_SLOT = [[0.07404513, -0.38091235, -0.40038141, -0.46233092], [0.4313322, -0.45524738, -0.30486633, 0.0102546],
                 [0.1839145, -0.35032759, -0.43076139, -0.45627007]]
GUTLB = ([[0.44566979, -0.56773093, -1.01400352, 1.39950643], [0.49827441, -0.5523071, -1.02570042, 1.40009848],
          [0.55361624, -0.5321112, -1.03537954, 1.39948414]], 1.37257924)
GUTLB_TOKEN_HALT = ([[0.44418741, -0.56792742, -1.01404098, 1.39950543], [0.49826362, -0.55225421, -1.02577832, 1.400101],
                     [0.55394279, -0.53195657, -1.03584669, 1.39954375]], 1.4016961)
PAIR_TLB_3 = [[-0.11735712, 0.83905444, 0.51011044], [0.13793348, 0.7667804, 0.53543085]]
PAIR_GUTLB_2 = [[-0.31592912], [-0.38474794]]  # the code's one logit z (sigmoid) for two classes


def fill(module, seed):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for _, p in sorted(module.named_parameters()):
            p.copy_(torch.randn(p.shape, generator=g, dtype=torch.float64) * 0.5)


def inputs(seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(3, 7, 4, generator=g, dtype=torch.float64)
    mask = torch.arange(7)[None] < torch.tensor(LENGTHS)[:, None]
    return x * mask[..., None], mask


def build(name, task="classify", classes=3, **kw):
    base = dict(hidden_size=4, num_heads=2, dropout=0.0, chunk_size=3, memory_slots=2, memory_layers=1)
    base.update(max_layers=3) if name == "gutlb" else base.update(num_layers=2)
    base.update(kw)
    return registry.get(name).build(registry.get(name).config(**base), TaskInfo(9, classes, task)).double().eval()


def encode(name, seed, **kw):
    model = build(name, **kw)
    fill(model, seed)
    with torch.no_grad():
        return model.encoder(*inputs(seed))


def t(rows):
    return torch.tensor(rows, dtype=torch.float64)


def test_tlb_memory_cross_attentions_have_two_layernorms_as_the_code():
    """Item 6: queries and memory keys/values normalised apart (the code's LN11 / LN12), in the chunk layers and the
    memory update; memory_norm=shared (one LayerNorm, rirlab before) misses the code's output."""
    torch.testing.assert_close(encode("tlb", 0).vec, t(TLB_MEAN), **TOL)
    enc = build("tlb").encoder
    assert all(a.ln_kv is not None and a.ln_kv is not a.ln for a in [*enc.update.attn,
                                                                      *(l.mem_attn for l in enc.layers)])
    shared = encode("tlb", 0, memory_norm="shared").vec
    assert (shared - t(TLB_MEAN)).abs().max() > 1e-3
    assert not any("ln_kv" in k for k in build("tlb", memory_norm="shared").state_dict())  # old checkpoints load


def test_gutlb_matches_the_code_and_takes_keys_values_from_s_without_global_halt():
    """Item 6: GUTLB (gated block with two memory LayerNorms) and GUTLB -Global Halt, whose chunk self-attention
    reads keys/values from S_{l-1} as the code's UTLBEncoder (``kv_sequence = next_sequence``)."""
    out = encode("gutlb", 1)
    torch.testing.assert_close(out.vec, t(GUTLB[0]), **TOL)
    torch.testing.assert_close(out.aux_loss, torch.tensor(GUTLB[1], dtype=torch.float64), **TOL)
    out = encode("gutlb", 1, global_halt=False)
    torch.testing.assert_close(out.vec, t(GUTLB_TOKEN_HALT[0]), **TOL)
    torch.testing.assert_close(out.aux_loss, torch.tensor(GUTLB_TOKEN_HALT[1], dtype=torch.float64), **TOL)
    model = build("gutlb", global_halt=False)
    fill(model, 1)
    model.encoder.kv_from_state = False  # keys/values from H: what rirlab did before
    with torch.no_grad():
        before = model.encoder(*inputs(1)).vec
    assert (before - t(GUTLB_TOKEN_HALT[0])).abs().max() > 1e-5


def test_pooling_start_or_end_reads_the_last_memory_slot():
    """Item 9: with readout memory, pooling start/end (the code's "cls"/"end", its LRA Image configs) is the last
    slot of LayerNorm(final memory); unset it is the mean over slots."""
    torch.testing.assert_close(encode("tlb", 0, pooling="start").vec, t(TLB_LAST_SLOT), **TOL)
    torch.testing.assert_close(encode("tlb", 0, pooling="end").vec, t(TLB_LAST_SLOT), **TOL)
    torch.testing.assert_close(encode("tlb", 0, pooling="mean").vec, t(TLB_MEAN), **TOL)


def pair(name, seed, classes, **kw):
    model = build(name, "pair", classes, **kw)
    fill(model, seed)
    t1 = torch.tensor([[3, 4, 5, 6, 7, 8, 2], [2, 3, 0, 0, 0, 0, 0]])
    t2 = torch.tensor([[5, 5, 6, 7], [8, 2, 0, 0]])  # alone: 2 chunks of 2; with t1's 7: chunks of 3
    with torch.no_grad():
        return model({"tokens": t1, "mask": t1 > 0, "tokens2": t2, "mask2": t2 > 0, "labels": torch.zeros(2)}).logits


def test_pairs_are_encoded_in_one_batch_with_the_codes_head():
    """Items 7, 8: both sentences padded together and encoded as one batch (the code's batch_pair: the chunks follow
    the longer side's length), then Linear-ReLU-Linear without dropout; two classes: the logits are [0, z] with the
    code's single logit z (softmax cross-entropy of [0, z] = its BCEWithLogits)."""
    torch.testing.assert_close(pair("tlb", 2, 3), t(PAIR_TLB_3), **TOL)
    logits = pair("gutlb", 3, 2)
    torch.testing.assert_close(logits[:, 1:], t(PAIR_GUTLB_2), **TOL)
    assert logits[:, 0].abs().max() == 0
    assert (pair("tlb", 2, 3, pair_batch="separate") - t(PAIR_TLB_3)).abs().max() > 1e-3
    assert (pair("tlb", 2, 3, head="gelu") - t(PAIR_TLB_3)).abs().max() > 1e-3


@pytest.mark.parametrize("name", ["transformer", "ut", "gut", "tlb", "gutlb"])
def test_the_codes_head_is_the_default_and_gelu_the_option(name):
    """Item 7: classify / pair / lm (flip-flop) heads are Linear-ReLU-Linear without dropout by default; head=gelu
    keeps rirlab's MLP (dropout, GELU) and its single linear layer per token."""
    from rirlab.models.heads import MLP, CodeHead

    entry = registry.get(name)
    for kind, classes, d_in in (("classify", 5, 8), ("pair", 3, 32), ("lm", 6, 8)):
        head = entry.build(entry.config(hidden_size=8, num_heads=2), TaskInfo(9, classes, kind)).head
        assert isinstance(head, CodeHead) and head.l1.in_features == d_in and head.l2.out_features == classes
        old = entry.build(entry.config(hidden_size=8, num_heads=2, head="gelu"), TaskInfo(9, classes, kind)).head
        assert isinstance(old, torch.nn.Linear if kind == "lm" else MLP)
    head = CodeHead(8, 8, 5).train()
    x = torch.randn(4, 8)
    torch.testing.assert_close(head(x), head.l2(torch.relu(head.l1(x))))  # no dropout, even in training


FLIPFLOP_IDS = [[1, 4, 3, 5, 1, 4, 3, 5, 2, 4, 2, 4], [1, 4, 2, 4, 3, 4, 1, 5, 3, 5, 2, 5]]  # w 0 i 1 w 0 ...
FLIPFLOP_LOSS, FLIPFLOP_CORRECT = 0.5697995945811272, 3  # the code's BCE over the 4 reads; 3 of 4 right


def test_flipflop_reads_the_bit_through_the_codes_single_sigmoid_output():
    """Issue 31 item 1: the code's flip-flop framework emits one logit z per token (Linear-ReLU-Linear(d, 1)),
    trained with BCEWithLogits on the read bits (0/1) and right where sigmoid(z) >= 0.5; the pinned loss and count
    are the code's (``flipflop_agent.loss_fn`` / ``eval_fn`` on this model's token states, its position t reading
    the state of t - 1, as its shifted input). read_target=token (rirlab before): six classes over the vocabulary."""
    from rirlab.tasks import flipflop as ff
    from rirlab.train import training_loss

    ids = torch.tensor(FLIPFLOP_IDS).numpy().astype("int8")
    batch = ff.collate_lm(ff.examples(ff.to_table(ids), input_layout="plain"))  # the pin's states: rirlab's inputs
    assert sorted(batch["labels"].unique().tolist()) == [-100, 0, 1]
    entry = registry.get("transformer")
    model = entry.build(entry.config(hidden_size=4, num_heads=2, num_layers=1, dropout=0.0), TaskInfo(6, 2, "lm"))
    model = model.double().eval()
    fill(model, 4)
    with torch.no_grad():
        _, loss, logits, labels, out = training_loss(model, batch, "fp32", torch.device("cpu"), 0.0)
    assert out.logits.shape == (2, 12, 2) and out.logits[..., 0].abs().max() == 0  # [0, z]
    assert abs(loss.item() - FLIPFLOP_LOSS) < 1e-6  # training_loss's float32
    assert (logits.argmax(-1) == labels).sum().item() == FLIPFLOP_CORRECT
    assert ff.FlipFlopConfig().read_target == "bit"
    token = ff.collate_lm(ff.examples(ff.to_table(ids), "token", "plain"))["labels"]
    assert sorted(token.unique().tolist()) == [-100, ff.ZERO, ff.ZERO + 1]


PAIR_SPLIT = [([3, 4, 5], [6], 0), ([7], [8, 2, 3, 4], 1), ([5, 6], [2], 2), ([8, 7, 6], [5, 4], 0), ([2], [3], 1)]
CODE_EVAL_BATCHES = [[0, 1], [2, 3], [4]]  # the code's dev loader (batch 2, shuffle off) + sentence_pair_collater


def test_pairs_are_evaluated_in_the_codes_batches(tmp_path, monkeypatch):
    """Issue 31 (pair evaluation): the code evaluates consecutive runs of dev_batch_size in the split's order (its
    collater sorts only within a batch), so each pair's padded length, hence its chunks, follows its neighbours in
    the file; TLB/GUTLB's eval_batches "file" (default) uses those batches, "length" (the split sorted by length,
    rirlab before) gives pair 0 another padded length and another output. The trainer evaluates by the value."""
    from rirlab.tasks.base import collate_pair
    from rirlab.tasks.batching import eval_batches
    from rirlab.train import Trainer
    from rirlab.trial import resolve

    assert eval_batches(PAIR_SPLIT, 2, "file") == CODE_EVAL_BATCHES
    model = build("tlb", "pair", 3)
    fill(model, 0)

    def logits(batches):
        out = torch.zeros(len(PAIR_SPLIT), 3, dtype=torch.float64)
        with torch.no_grad():
            for idx in batches:
                out[idx] = model(collate_pair([PAIR_SPLIT[i] for i in idx])).logits
        return out

    code = logits(CODE_EVAL_BATCHES)
    assert (logits(eval_batches(PAIR_SPLIT, 2, "length")) - code)[0].abs().max() > 1e-3
    seen = []
    monkeypatch.setattr("rirlab.train.eval_batches", lambda ex, size, order, *rest: seen.append(order) or [[0]])
    tiny = {"task": "logic", "hidden_size": 8, "num_heads": 2, "n_train": 8, "n_dev": 4, "n_eval": 4,
            "eval_splits": ["ops_7"], "device": "cpu", "cache_dir": str(tmp_path)}
    for model_name, extra, order in (("tlb", {}, "file"), ("gutlb", {"eval_batches": "length"}, "length"),
                                     ("gut", {}, "length")):
        trainer = Trainer(resolve({**tiny, "model": model_name, **extra}))
        trainer.evaluate(trainer.dev_split())
        assert seen.pop() == order
