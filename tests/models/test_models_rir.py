"""The RIR outer recursion (RIR paper §2-3, App. C, D, I) with its inner RvNNs: reductions to the inner model and to
the balanced binary tree, the one 1.5k chunk rule, alignment, padding, eval determinism. The search itself is
tested in test_models_beam_tree.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from rirlab.models import registry
from rirlab.models.beam_tree import NEG
from rirlab.models.rir import align, n_chunks, rir_encode
from rirlab.tasks.base import TaskInfo
from tests.helpers.devices import CUDA
from tests.helpers.models import batch_of, build, random_seqs


def same_weights(src, dst):
    dst.load_state_dict(src.state_dict())
    return dst


def test_rir_with_chunk_at_least_length_is_ebt_grc():
    torch.manual_seed(2)
    ebt = build("ebt_grc", hidden_size=32, beam_size=4, dropout=0.0).eval()
    rir = same_weights(ebt, build("rir_ebt_grc", hidden_size=32, beam_size=4, dropout=0.0, chunk_size=40, s4d=False,
                                  inference="rir")).eval()
    batch = batch_of(random_seqs([25, 13, 40, 1]))
    with torch.no_grad():
        assert torch.allclose(rir(batch).logits, ebt(batch).logits, atol=1e-5)
    ebt.train(), rir.train()  # training mode too: same Gumbel draws in the same order
    torch.manual_seed(5)
    a = ebt(batch).logits
    torch.manual_seed(5)
    assert torch.allclose(rir(batch).logits, a, atol=1e-5)


def test_non_rir_inference_is_ebt_grc_on_the_same_weights():
    torch.manual_seed(3)
    ebt = build("ebt_grc", hidden_size=32, beam_size=7, s4d=True).eval()
    rir = same_weights(ebt, build("rir_ebt_grc", hidden_size=32, chunk_size=5, inference="non_rir")).eval()
    batch = batch_of(random_seqs([60, 33, 7]))
    with torch.no_grad():
        assert torch.allclose(rir(batch).logits, ebt(batch).logits, atol=1e-5)
        rir.encoder.inference = "rir"
        assert not torch.allclose(rir(batch).logits, ebt(batch).logits, atol=1e-3)  # RIR inference differs


@pytest.mark.parametrize("mode", ["eval", "train"])
def test_chunk_2_is_the_balanced_binary_tree(mode):
    torch.manual_seed(4)
    bbt = build("bbt_grc", hidden_size=16, dropout=0.0)
    rir = build("rir_ebt_grc", hidden_size=16, dropout=0.0, chunk_size=2, s4d=False, inference="rir")
    missing = rir.load_state_dict(bbt.state_dict(), strict=False)
    assert set(missing.unexpected_keys) == set() and all("scorer" in k for k in missing.missing_keys)
    bbt.train(mode == "train"), rir.train(mode == "train")
    batch = batch_of(random_seqs([13, 8, 5, 1, 2]))
    assert torch.allclose(rir(batch).logits, bbt(batch).logits, atol=1e-5)


def test_chunking_rule():
    assert [n_chunks(L, 30) for L in (1, 30, 44, 45, 61, 100, 1000)] == [1, 1, 1, 2, 3, 4, 34]
    assert all(n_chunks(L, 2) == (L + 1) // 2 for L in range(1, 50))  # k = 2: ceil, as the binary tree
    lengths = torch.arange(1, 200)
    assert n_chunks(lengths, 7).tolist() == [n_chunks(L, 7) for L in range(1, 200)]  # the batched rule is the same
    # the authors' threshold is k + k // 2 (S >= 7 for k = 5, where 1.5k = 7.5); chunk_by batch: the padded length
    assert [n_chunks(L, 5) for L in (6, 7)] == [1, 2] and [n_chunks(L, 5, 12) for L in (3, 6, 12)] == [1, 2, 3]
    assert n_chunks(torch.tensor([3, 6]), 5, 6).tolist() == [1, 1]


def hebt(beam, task="classify", **kw):
    """RIR-EBT-GRC (d 64, k 5, RIR inference) filled as the pins below (tools: the authors' HEBT_GRC on its weights)."""
    from tests.models.test_tlb_code import fill

    e = registry.get("rir_ebt_grc")
    model = e.build(e.config(hidden_size=64, beam_size=beam, chunk_size=5, dropout=0.0, s4d_dropout=0.0,
                             inference="rir", **kw), TaskInfo(9, 3, task)).double().eval()
    fill(model, 7)
    return model


def rows(lengths, s, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(len(lengths), s, 64, generator=g, dtype=torch.float64)
    mask = torch.arange(s)[None] < torch.tensor(lengths)[:, None]
    return x * mask[..., None], mask


def matches(out, head, sums=None):
    """``out``'s first 4 features (and row sums) are the pinned numbers, to 1e-9."""
    torch.testing.assert_close(out[..., :4], torch.tensor(head, dtype=torch.float64), rtol=0, atol=1e-9)
    if sums is not None:
        torch.testing.assert_close(out.sum(-1), torch.tensor(sums, dtype=torch.float64), rtol=0, atol=1e-9)


# the authors' HEBT_GRC (chunk_mode_inference, RBA off: the aligned beams strung in order, as eval_alignment
# string_it) on the weights of the test's fill copied into it, float64, eval: the padded batch of lengths 12, 6, 3,
# and the length-6 sequence alone (one chunk of 6 alone; chunks 5 + 1 in the batch padded to 12)
HEBT_PADDED = [[0.8313105226769284, 0.3462656354624785, -1.3064288510607527, 0.28480966413604036],
               [1.323323758809558, 0.3659517880070075, -1.312394823463739, 0.27355136043474876],
               [0.6684890247586316, 0.40037227317546925, -0.9622812162662352, -0.6615702904085918]]
HEBT_PADDED_SUMS = [-2.074594225997014, 3.5856739314422503, 2.3900058368621133]
HEBT_SIX_ALONE = [1.2930277969764954, 0.36582958582366154, -1.3026609538393294, 0.2517956650842204]


def test_chunk_by_batch_is_the_authors_hebt_grc():
    """The authors' code chunks every sequence of a batch when the batch's padded length reaches k + k // 2
    (chunk_by batch, default): a 6-token sequence padded to 12 (k = 5) gets chunks 5 + 1, as theirs; chunk_by
    sequence chunks it as it is alone (one chunk). Pinned: the authors' HEBT_GRC on the same weights."""

    def encode(**kw):
        x, mask = rows([12, 6, 3], 12, 3)
        with torch.no_grad():
            return hebt(3, eval_alignment="string_it", **kw).encoder(x, mask).vec

    out = encode()
    matches(out, HEBT_PADDED, HEBT_PADDED_SUMS)
    own = encode(chunk_by="sequence")
    matches(own[1], HEBT_SIX_ALONE)
    assert (own[1] - out[1]).abs().max() > 1e-2


GRADS = Path(__file__).parent / "fixtures" / "hebt_grc_grads.json"


@pytest.mark.parametrize("inference", ["rir", "non_rir"])
def test_gradients_are_the_authors_hebt_grc(inference):
    """Training follows the authors' gradients, not only their function: every parameter's gradient of the encoder
    (the S4D pre-chunk layer's, its backward direction's zeros included, the GRC cell's, the scorer's through the
    beam scores) on the weights of ``hebt``'s fill, chunked (RIR) and whole (non-RIR), equals the authors'
    HEBT_GRC's on the same weights (pinned: the fixture's ``about``), to 1e-9 of each gradient's size."""
    model = hebt(3, eval_alignment="string_it")
    model.encoder.inference = inference
    x, mask = rows([23, 12, 6, 3], 23, 11)
    w = torch.randn(4, 64, generator=torch.Generator().manual_seed(12), dtype=torch.float64)
    (model.encoder(x, mask).vec * w).sum().backward()
    pins = json.loads(GRADS.read_text())["grads"][inference]
    got = {k: p.grad for k, p in model.named_parameters() if k.startswith("encoder.")}
    assert set(got) == set(pins)
    for name, (total, size) in pins.items():
        g = got[name]
        tol = 1e-9 * max(1.0, size)
        assert abs(g.sum().item() - total) <= tol and abs(g.abs().sum().item() - size) <= tol, (name, g.sum(), total)


def rnn(cell, items):
    """RIR eq. 2 as the authors' RecurrentGRCX runs it: h_0 = 0, the first token composed too."""
    h = torch.zeros_like(items[0])
    for x in items:
        h = cell(h, x)
    return h


def literal_rir_grc(cell, items, k):
    """RIR-GRC for one sequence, written out: L >= 1.5k -> chunks of k from the left (the last one the remainder),
    L < 1.5k -> one chunk; a GRC RNN over each chunk; repeat on the chunk outputs."""
    while len(items) > 1:
        chunks = [items] if 2 * len(items) < 3 * k else [items[i : i + k] for i in range(0, len(items), k)]
        items = [rnn(cell, c) for c in chunks]
    return items[0]


def literal_bbt(cell, items):
    """The balanced binary tree of RIR eq. 3: neighbours composed pairwise from the left, an odd last one goes up."""
    while len(items) > 1:
        items = [cell(items[i], items[i + 1]) if i + 1 < len(items) else items[i] for i in range(0, len(items), 2)]
    return items[0]


def encode_rows(model, lengths, d):
    """The encoder's output and its leaves (after the leaf layer) for random inputs of the given lengths."""
    x = torch.randn(len(lengths), max(lengths), d)
    mask = torch.arange(max(lengths))[None] < torch.tensor(lengths)[:, None]
    return model.encoder(x, mask).vec, model.encoder.leaf(x, mask)


def test_rir_grc_follows_the_one_and_a_half_k_chunk_rule():
    torch.manual_seed(8)
    model = build("rir_grc", hidden_size=16, chunk_size=6, s4d=False, dropout=0.0, chunk_by="sequence").eval()
    # each sequence as it is alone (chunk_by sequence); k = 6: L = 8 < 9 is one chunk (padding to a multiple of k would make chunks 6 + 2); 9 -> 6 + 3;
    # 13 -> 6 + 6 + 1 (a one-item last chunk is R(0, x), as the authors' padded chunk; a one-item sequence is
    # its own root); 40 -> 7 chunks -> one; 60 -> 10 chunks -> 6 + 4 -> 2
    lengths = [1, 3, 8, 9, 13, 40, 60]
    with torch.no_grad():
        out, leaves = encode_rows(model, lengths, 16)
        cell = model.encoder.tree.cell
        for i, L in enumerate(lengths):
            assert torch.allclose(out[i], literal_rir_grc(cell, list(leaves[i, :L]), 6), atol=1e-5), L
        padded = rnn(cell, list(leaves[2, :6])), cell(leaves[2, 6], leaves[2, 7])  # the two chunks of padding to 2k
        assert not torch.allclose(out[2], cell(*padded), atol=1e-3)


@pytest.mark.parametrize("mode", ["eval", "train"])
def test_bbt_grc_is_the_literal_balanced_binary_tree(mode):
    torch.manual_seed(9)
    model = build("bbt_grc", hidden_size=16, dropout=0.0).train(mode == "train")
    lengths = [1, 2, 3, 7, 8, 13]
    out, leaves = encode_rows(model, lengths, 16)
    for i, L in enumerate(lengths):
        assert torch.allclose(out[i], literal_bbt(model.encoder.tree.cell, list(leaves[i, :L])), atol=1e-5), L


def test_rir_grc_with_chunk_at_least_length_is_rnn_grc():
    torch.manual_seed(10)
    rnn_model = build("rnn_grc", hidden_size=16).eval()
    rir = build("rir_grc", hidden_size=16, chunk_size=40, s4d=False, chunk_by="sequence").eval()
    rir.encoder.tree.cell.load_state_dict(rnn_model.encoder.cell.state_dict())
    rir.encoder.leaf.load_state_dict(rnn_model.encoder.leaf.state_dict())
    rir.embed.load_state_dict(rnn_model.embed.state_dict()), rir.head.load_state_dict(rnn_model.head.state_dict())
    batch = batch_of(random_seqs([25, 13, 40, 1]))
    with torch.no_grad():
        ours, rnn_logits = rir(batch).logits, rnn_model(batch).logits
        assert torch.allclose(ours[:3], rnn_logits[:3], atol=1e-5)
        # one item: RIR-GRC's sequence is its own root (the authors loop while S > 1; literal_rir_grc above), while
        # the RNN composes R(0, x_1) (RIR eq. 2)
        assert not torch.allclose(ours[3:], rnn_logits[3:], atol=1e-3)
        # chunk_by batch (the authors' code): in a batch padded to 40 the one item goes through the GRC RNN too
        rir.encoder.chunk_by = "batch"
        assert torch.allclose(rir(batch).logits, rnn_logits, atol=1e-5)


def test_rir_grc_non_rir_inference_passes_a_batch_of_one_token_sequences_through():
    """Non-RIR inference (App. D) on a batch padded to one token: the authors' HGRC loops while S > 1, so each root
    is its leaf; a one-token sequence in a batch padded to two goes through the GRC RNN, R(0, x_1) (eq. 2)."""
    torch.manual_seed(11)
    model = build("rir_grc", hidden_size=16, inference="non_rir").eval()
    with torch.no_grad():
        out, leaves = encode_rows(model, [1, 1, 1], 16)
        assert torch.allclose(out, leaves[:, 0], atol=1e-6)
        out, leaves = encode_rows(model, [1, 2], 16)
        assert torch.allclose(out[0], rnn(model.encoder.tree.cell, [leaves[0, 0]]), atol=1e-5)
        assert not torch.allclose(out[0], leaves[0, 0], atol=1e-2)


def test_an_inner_rvnn_whose_settings_the_model_lacks_is_refused_naming_the_model_that_has_them():
    from rirlab.trial import resolve
    from rirlab.errors import UserError

    assert resolve({"model": "rir_ebt_grc", "task": "listops", "inner": "grc_rnn"}).model_cfg.inner == "grc_rnn"
    needs = r"inner='ebt_grc' needs the setting\(s\) beam_size, d_s, beam_select .*rir_ebt_grc"
    with pytest.raises(UserError, match=needs):
        resolve({"model": "rir_grc", "task": "listops", "inner": "ebt_grc"})


@pytest.mark.parametrize("name,kw", [("ebt_grc", {}), ("rir_ebt_grc", {"inference": "rir", "chunk_by": "sequence",
                                                                   "eval_alignment": "string_it"}),
                                     ("rir_ebt_grc", {}), ("egt_grc", {}), ("gt_grc", {}), ("s4d", {"n_layers": 2}),
                                     ("rir_grc", {"chunk_by": "sequence"})])
def test_eval_deterministic_and_padding_invariant(name, kw):
    """RIR inference is padding-invariant under chunk_by sequence and deterministic under eval_alignment string_it;
    under batch (the authors' code) a sequence's chunks follow its batch's padded length
    (test_chunk_by_batch_is_the_authors_hebt_grc), under sample (the authors' code) its alignment is drawn
    (test_rir_inference_samples_the_alignment_in_eval_as_the_authors_hebt_grc)."""
    torch.manual_seed(5)
    model = build(name, hidden_size=32, **({"chunk_size": 6} if "rir" in name else {}), **kw).eval()
    seqs = random_seqs([40, 9, 23, 1])
    with torch.no_grad():
        full = model(batch_of(seqs)).logits
        assert torch.equal(full, model(batch_of(seqs)).logits)
        for i, s in enumerate(seqs):
            assert torch.allclose(model(batch_of([s])).logits[0], full[i], atol=1e-5), (name, i)


@pytest.mark.parametrize("name", ["ebt_grc", "rir_ebt_grc", "egt_grc"])
def test_scorer_gets_gradients(name):
    torch.manual_seed(6)
    model = build(name, hidden_size=32, **({"chunk_size": 5} if "rir" in name else {})).train()
    batch = batch_of(random_seqs([30, 17]))
    F.cross_entropy(model(batch).logits, batch["labels"]).backward()
    scorer = model.encoder.tree.scorer
    # the output bias shifts every pair score alike and log-softmax ignores that: its gradient is 0 by design
    for p in (scorer.w1.weight, scorer.w1.bias, scorer.w2.weight):
        assert p.grad is not None and p.grad.abs().sum() > 0


@pytest.mark.parametrize("slot0", ["beam0", "argmax"])
def test_alignment_position_0_and_samples_follow_the_scores(slot0):
    """Position 0: the chunk's beam 0 (``beam0``, the authors' code, default) or its top-scoring beam (``argmax``,
    §3.1); positions 1.. sample normalize(BS) (eq. 8)."""
    scores = torch.tensor([[-0.1, -1.0, -2.0, -4.0]]).log_softmax(-1).repeat(20000, 1)
    perm = torch.tensor([2, 0, 3, 1])
    scores = scores[:, perm]  # top beam not at index 0
    g = torch.Generator().manual_seed(0)
    idx = align(scores, "beam", sample=True, generator=g, slot0=slot0)
    assert (idx[:, 0] == (0 if slot0 == "beam0" else 1)).all()  # argmax sits at index 1 after the permutation
    freq = torch.bincount(idx[:, 1:].reshape(-1), minlength=4).float() / idx[:, 1:].numel()
    assert torch.allclose(freq, scores[0].softmax(-1), atol=0.01)
    assert torch.equal(align(scores[:3], "string_it", sample=True), torch.arange(4).expand(3, 4))
    assert torch.equal(align(scores[:3], "beam", sample=False), torch.arange(4).expand(3, 4))  # in order


def test_random_alignment_ignores_scores():
    scores = torch.tensor([[0.0, -30.0, -60.0, -1e9]]).repeat(20000, 1)  # last beam impossible
    idx = align(scores, "random", sample=True, generator=torch.Generator().manual_seed(0))
    assert (idx[:, 0] == 0).all()
    freq = torch.bincount(idx[:, 1:].reshape(-1), minlength=4).float() / idx[:, 1:].numel()
    assert torch.allclose(freq, torch.tensor([1 / 3, 1 / 3, 1 / 3, 0.0]), atol=0.01)
    scores = scores[:, [1, 0, 2, 3]]  # the top beam at index 1: beam0 keeps index 0, argmax index 1
    assert (align(scores, "random", sample=True, generator=torch.Generator().manual_seed(0))[:, 0] == 0).all()
    assert (align(scores, "random", sample=True, slot0="argmax")[:, 0] == 1).all()


def test_slot0_under_the_default_is_the_first_beam_of_the_perturbed_search_order():
    """In training the EBT search returns its beams in the Gumbel-perturbed order of its last merge (as the authors'
    code), so its beam 0 is not always the top-scoring beam. With a fixed seed, over many chunks: under ``beam0``
    (default) aligned position 0 is the unperturbed argmax in only part of the chunks; under ``argmax`` in all."""
    torch.manual_seed(0)
    model = build("rir_ebt_grc", hidden_size=16, beam_size=4, dropout=0.0, chunk_size=6, s4d=False).train()
    search = model.encoder.tree
    x, lengths = torch.randn(400, 1, 6, 16), torch.full((400,), 6)
    with torch.no_grad():
        _, scores = search(x, lengths)  # (C, b) chunk beams, perturbed order
    top = scores.argmax(-1)
    rate = {s: (align(scores, "beam", True, torch.Generator().manual_seed(1), slot0=s)[:, 0] == top).float().mean()
            for s in ("beam0", "argmax")}
    assert rate["argmax"] == 1.0
    assert 0.2 < rate["beam0"] < 0.95, rate  # the perturbed order's first beam is often not the top one
    assert registry.get("rir_ebt_grc").config().alignment_slot0 == "beam0"




@pytest.mark.parametrize("train", [False, True])
def test_a_one_token_last_chunk_keeps_every_beam_alive(train):
    """L = 1 (mod k), L >= 1.5k: the last chunk holds one token; it yields b equal live beams (as in the authors'
    code), so under string-it alignment and RIR inference every beam of the next level stays alive (it used to
    return [0, NEG, ...] and string NEG into b - 1 beams)."""
    torch.manual_seed(8)
    k, b = 5, 4
    model = build("rir_ebt_grc", hidden_size=16, beam_size=b, chunk_size=k, s4d=False, inference="rir",
                  alignment="string_it").train(train)
    lengths = torch.tensor([11, 16, 26, 13])  # 5+5+1, 5+5+5+1, 5 x 5 + 1 (level 2: 5+1 chunks again), none
    h = torch.randn(len(lengths), 26, 16)
    torch.manual_seed(0)
    with torch.no_grad():
        roots, scores = rir_encode(model.encoder.tree, h, lengths, k, "string_it")
    assert (scores > NEG / 2).all(), scores  # every beam alive
    assert torch.isfinite(roots).all()


# the authors' HEBT_GRC in eval (RBA on, chunk_mode_inference: their defaults) on one sequence of 10 (k 5, beam 2:
# two chunks, position 1 of each drawn from its beams): its four distinct outputs over 4,000 seeds, [:4]
HEBT_EVAL_DRAWS = [[0.933443193, 0.332659148, -1.515053522, 0.35889748],
                   [0.95910164, 0.33341688, -1.540840678, 0.440742061],
                   [0.963166668, 0.332579975, -1.530060324, 0.448074576],
                   [0.954638482, 0.332915317, -1.536791468, 0.438214495]]  # the last: both chunks strung in order


def test_rir_inference_samples_the_alignment_in_eval_as_the_authors_hebt_grc():
    """Issue 31: the authors' HEBT_GRC aligns beams (RBA) in eval mode too (its default chunk_mode_inference runs RIR
    inference), so eval draws among the outputs of the possible alignments; eval_alignment "sample" (default) does
    the same: every output is one of theirs and all four occur; "string_it" (rirlab before) is the in-order one."""
    model = hebt(2)
    x, mask = rows([10], 10, 5)
    pinned = torch.tensor(HEBT_EVAL_DRAWS, dtype=torch.float64)
    hits = torch.zeros(len(pinned))
    with torch.no_grad():
        for seed in range(200):
            torch.manual_seed(seed)
            d = (model.encoder(x, mask).vec[0, :4] - pinned).abs().max(-1).values  # (4,)
            assert d.min() < 1e-8, d
            hits[d.argmin()] += 1
        assert (hits > 0).all(), hits
        model.encoder.eval_alignment = "string_it"
        torch.testing.assert_close(model.encoder(x, mask).vec[0, :4], pinned[3], rtol=0, atol=1e-8)
    assert registry.get("rir_ebt_grc").config().eval_alignment == "sample"


# the authors' sentence_pair_framework with batch_pair (zeros to the longer of the two, one encoder call) around
# HEBT_GRC (RBA off), eval: sentences 1 of lengths 12, 3 (padded 12), sentences 2 of lengths 6, 2 (padded 6, and 12
# in the joint batch, where the 6 is chunked 5 + 1); rows: the 2N encoded sentences, [:4] and their sums
PAIR_JOINT = [[0.8313105226769284, 0.3462656354624785, -1.3064288510607527, 0.28480966413604036],
              [0.8772841474627552, 0.36568900603396937, -1.0032711734422264, 0.07663531954935793],
              [1.0004570257774357, 0.28658275233783004, -1.341439614193034, -0.353767778867702],
              [0.9961493808794946, 0.2974086264080635, -1.0201979582403777, 0.5980233377346876]]
PAIR_JOINT_SUMS = [-2.074594225997014, 4.507565202511237, -0.16389359135481874, 5.939747478772899]
PAIR_SEPARATE_SIX = [0.9959204291597398, 0.28732849616985834, -1.3116129368999518, -0.28264971040314957]


@pytest.mark.parametrize("name", ["rir_ebt_grc", "rir_grc", "rir_om", "rir_crvnn"])
def test_rir_models_encode_a_pair_as_one_batch_by_default(name):
    assert registry.get(name).config().pair_batch == "joint"  # the authors' batch_pair, on in all their pair configs


def test_pair_batch_joint_is_the_authors_batch_pair():
    """Issue 31: the authors pad both sentence batches of a pair batch to the longer one and encode them as one batch
    (batch_pair); under chunk_by batch the 6-token second sentence is chunked by the joint padded length 12 (5 + 1),
    not by its own batch's 6 (one chunk). pair_batch "joint" (default) gives their vectors; "separate" does not."""
    x1, m1 = rows([12, 3], 12, 3)
    x2, m2 = rows([6, 2], 6, 4)
    batch = {"tokens": torch.zeros(2, 12, dtype=torch.long), "mask": m1, "tokens2": torch.zeros(2, 6, dtype=torch.long),
             "mask2": m2, "labels": torch.zeros(2, dtype=torch.long)}

    def encoded(**kw):
        model = hebt(3, "pair", eval_alignment="string_it", **kw)
        embedded = iter([x1, x2])
        model.embed.register_forward_hook(lambda mod, inp, out: next(embedded))  # the inputs as embedded tokens
        seen = []
        model.encoder.register_forward_hook(lambda mod, inp, out: seen.append(out.vec))
        with torch.no_grad():
            model(batch)
        return torch.cat(seen)  # (2N, D): sentences 1 then sentences 2

    joint = encoded()
    matches(joint, PAIR_JOINT, PAIR_JOINT_SUMS)
    separate = encoded(pair_batch="separate")
    matches(separate[2], PAIR_SEPARATE_SIX)
    assert (separate[2] - joint[2]).abs().max() > 1e-2


@pytest.mark.parametrize("device", ["cpu", CUDA])
@pytest.mark.parametrize("chunk_by", ["batch", "sequence"])
def test_the_outer_recursion_reads_the_lengths_once(device, chunk_by):
    """The chunk layout (shapes) is computed on the host from ONE read of the lengths per forward, whatever the number
    of levels (the H100 profile saw ~6 synchronising reads per level: repeat_interleave by counts, the largest chunk,
    the most chunks, a flag moved to the device); an inner RvNN without reads of its own shows only that one."""
    from tests.helpers.devices import count_syncs

    class MeanInner(torch.nn.Module):  # one beam: the chunk's mean over its real items, score 0
        def forward(self, x, sizes, in_scores=None):  # x (C, 1, Wc, D)
            keep = (torch.arange(x.size(2), device=x.device) < sizes[:, None]).to(x.dtype)  # (C, Wc)
            return (x[:, 0] * keep[..., None]).sum(1, keepdim=True) / sizes[:, None, None], x.new_zeros(x.size(0), 1)

    inner = MeanInner()
    x = torch.randn(3, 130, 4, device=device)
    for lengths, levels in (([7, 3, 5], 1), ([40, 12, 30], 2), ([130, 61, 9], 3)):  # chunk 5: 1, 2, 3 levels
        lens = torch.tensor(lengths, device=device)
        length = max(lengths)
        assert count_syncs(lambda: rir_encode(inner, x[:, :length], lens, 5, "beam", chunk_by=chunk_by), device) == 1
    # the layout itself against its rule: sizes sum to each length, every chunk but the last of a sequence is k
    from rirlab.models.rir import chunk_layout

    lay = chunk_layout([11, 3, 16], 5, None)
    assert lay["counts"] == [n_chunks(n, 5) for n in (11, 3, 16)] == [3, 1, 4]
    assert lay["rows"] == [0, 0, 0, 1, 2, 2, 2, 2] and lay["sizes"] == [5, 5, 1, 3, 5, 5, 5, 1]
    assert lay["first"] == [0, 3, 4] and lay["gidx"] == [[0, 1, 2, 2], [3, 3, 3, 3], [4, 5, 6, 7]]
    assert lay["lone"] == [False] * 3 + [True] + [False] * 4 and lay["single"] == [False] * 8
