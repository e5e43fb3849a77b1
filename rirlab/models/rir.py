"""Recursion in Recursion: the balanced k-ary outer recursion around an inner RvNN (RIR paper §2 eq. 5-7, §3,
§3.1 eq. 8-9, Appendix C, D, I).

Outer recursion: cut every sequence into chunks of about k items, run the inner RvNN over ALL chunks
of ALL sequences as one batch, string the chunk outputs back into a shorter sequence, repeat until
one item is left. The inner RvNN is a config value (``inner``, table :data:`INNERS`): ``ebt_grc``,
the EBT-GRC beam search (RIR-EBT-GRC, §3), or ``grc_rnn``, a GRC RNN over each chunk (RIR-GRC,
§4.1; with k = 2 it is the balanced binary tree BBT-GRC of eq. 3), ``om``, Ordered Memory (RIR-OM), or
``crvnn``, a CRvNN (RIR-CRvNN; both RIR Table 5). An inner RvNN maps
x (M, B_in, L, D), lengths (M,), beam scores (M, b) or None to roots (M, b, D) and scores (M, b) and
has a ``beam_size``; adding one (Ordered Memory, CRvNN, ...) is its module in its family file, one
:data:`INNERS` entry and its name in ``InnerName``; its RIR model is a config with ``inner`` defaulting to it.

The state between levels is a beam of sequences x (N, b, S, D) with a beam score per position
(N, b, S): the score of a chunk's input beam is the sum of its positions' scores, the inner search
adds the log-probabilities of its merges, so the final root score of a beam is the sum of the
scores of every merge in its tree. An inner RvNN with one beam (``grc_rnn``) carries score 0.

Chunking, one rule for every RIR model (the paper pads a sequence to a multiple of k, §2; the
authors' code also keeps a sequence shorter than k + k // 2 items, "1.5 chunks", whole, and we follow both): a
sequence that is chunked gets ceil(L/k) chunks, k items each but the last, which holds the remainder
(between 1 and k items: a short last chunk is encoded on its own like any chunk, and a chunk of one
item is its own root, in all b beams with equal scores, as in the authors' code, so that string-it alignment
and RIR inference keep every beam alive: :func:`rirlab.models.beam_tree.one_leaf_beams`); one that is not is one
chunk, so the inner RvNN sees it whole (chunk >= L is exactly the inner RvNN alone, and k = 2 is exactly the
balanced binary tree). Which sequences are chunked, at every level of the outer recursion, is ``chunk_by``:
- "batch" (default; the authors' code, HEBT_GRC.py / HGRC.py / HOM.py / HCRvNN.py, which produced the published
  numbers): all of them when the batch's padded length at that level, S, is at least k + k // 2 (S starts as the
  padded input length and becomes ceil(S / k) after a chunked level), none otherwise; so a sequence shorter than
  k + k // 2 in a long batch is chunked too, and its output depends on its batch (in training, and under RIR
  inference);
- "sequence" (rirlab before): those with L >= k + k // 2 themselves, so a padded batch gives each sequence what it
  gets alone (rirlab before wrote the threshold 2L >= 3k, the same for even k, one item less for odd k).

``pair_batch`` (pair tasks: logical inference, NLI, QQP, LRA Retrieval): "joint" (default; the authors' code,
``sentence_pair_framework`` with ``batch_pair``, on in every pair config of theirs: proplogic, SNLI, MNLI, QQP, AAN):
the two sentence batches of a pair batch are padded to the longer one and encoded as one batch of 2N
(rirlab.models.heads.TaskModel), so under ``chunk_by`` "batch" both sentences are chunked by max(S1, S2), as
theirs; "separate": one encoder call per sentence batch (rirlab before), each chunked by its own padded length.

``eval_batches``: "buckets" (default; the authors' dev/test loader, BeamRecursionFamily train.py ``load_dataloaders``
with shuffle off and the collaters' sort and cuts, rirlab.tasks.batching.bucket_batches): pools of ``bucket_factor``
x ``eval_batch_size`` examples in the split's order, each sorted by length and cut into batches of
``eval_batch_size``, a pair batch whose longest sentence has 70 tokens or more cut in halves (MNLI: quarters from 100);
under ``chunk_by`` "batch" with RIR inference (RIR-GRC always, RIR-EBT-GRC with ``inference`` rir) the batch fixes an
example's chunks, so this gives the authors' outputs; "length": the split sorted by length (rirlab before), batches
of ``eval_batch_size``. The specs set eval_batch_size to the authors' dev_batch_size.

Choices the paper leaves open (ours):
- Alignment (eq. 8-9) is applied only where a sequence has more than one chunk; a lone chunk's
  output is that sequence's final beam. ``random`` samples uniformly among the chunk's
  valid beams (a chunk with fewer possible trees than b has fewer valid beams).
- Position 0 of the aligned beams (``alignment_slot0``, for ``beam`` and ``random`` alike): §3.1 keeps the top
  beam, BS_new[0] = argmax of the chunk's beam scores; the authors' code (HEBT_GRC.py) keeps the chunk's beam 0,
  which in training is the first of the search's Gumbel-perturbed order (the stochastic top-b of its last merge),
  not always the top-scoring beam. That produced the published numbers, so ``beam0`` (default) does the same;
  ``argmax`` is the text's rule. In eval mode the two coincide (beams are sorted by score).
- Alignment in eval mode under RIR inference (``eval_alignment``): "sample" (default; the authors' code, HEBT_GRC.py,
  whose alignment (RBA) does not look at ``self.training`` and so runs in eval too under its default
  ``chunk_mode_inference`` True): positions 1.. are drawn as in training (eq. 8, or uniformly for ``random``), position
  0 is beam 0, the top beam in eval (beams are sorted there), so evaluation is stochastic; "string_it" (rirlab
  before): position i strings the i-th best beams, which keeps eval deterministic (and batch-independent under
  ``chunk_by`` sequence). The default ``inference`` of RIR-EBT-GRC, ``non_rir``, never aligns; one-beam inner
  RvNNs have nothing to align.
- ``inference="non_rir"`` (Appendix D) runs the inner RvNN over the whole sequence in eval mode; a batch whose
  padded length is 1 skips a one-beam inner RvNN that passes one item through (RIR-GRC, RIR-OM), as the authors'
  HGRC.py loops while S > 1.
- ``dev_inference``: the inference of the dev evaluations during training, which select the tested weights, drive
  the plateau schedule and stop early; None (default) is ``inference``, the paper's text (App. D: "by default only
  use non-RIR inference"). The authors' code trains and tests in separate runs of its ``train.py``, and its
  ``argparser.py`` defaults to ``--chunk_mode_inference True``: a run that trains with that default and tests with
  ``--chunk_mode_inference False`` selects by RIR-inference dev accuracy and reports non-RIR test accuracy,
  ``inference="non_rir", dev_inference="rir"``. Which of the two produced the published tables is not stated.
"""

from __future__ import annotations

import dataclasses
import itertools
from typing import Callable, Literal, Optional

import torch
import torch.nn.functional as F
from pydantic import Field, model_validator
from pydantic.dataclasses import dataclass
from torch import nn

from rirlab.config import STRICT
from rirlab.models import ebt_grc
from rirlab.models.crvnn import CRvNN
from rirlab.models.base import EncoderOutput
from rirlab.models.beam_tree import NEG, marginalize
from rirlab.models.om import ProjectedOrderedMemory
from rirlab.models.rnn_grc import GRCRNN
from rirlab.models.s4d import PreChunkConfig, leaf_layer
from rirlab.tasks.batching import EvalOrder

ALIGNMENTS = ("beam", "string_it", "random")
Slot0 = Literal["beam0", "argmax"]  # aligned position 0: the chunk's beam 0 (authors' code) or its top score (§3.1)
InnerName = Literal["ebt_grc", "grc_rnn", "om", "crvnn"]  # keys of INNERS
Inference = Literal["rir", "non_rir"]  # eval mode: the outer recursion, or the inner RvNN alone (Appendix D)


@dataclasses.dataclass(frozen=True)
class Inner:
    """An inner RvNN RIR can run: its builder from the model config, the config fields it reads, who has them."""

    build: Callable[..., nn.Module]  # cfg -> module (x, lengths, scores) -> (roots, scores), with ``beam_size``
    needs: tuple[str, ...]  # config fields beyond the GRC and RIR ones
    model: str  # the registered RIR model whose config has them


INNERS = {
    # EBT-GRC beam search (RIR §3)
    "ebt_grc": Inner(ebt_grc.search, ("beam_size", "d_s", "beam_select"), "rir_ebt_grc"),
    "grc_rnn": Inner(GRCRNN, (), "rir_grc"),  # GRC RNN over each chunk (RIR-GRC, §4.1; rnn_start: RIR-GRC's)
    # Ordered Memory with the authors' per-call input projection (RIR-OM, Table 5)
    "om": Inner(ProjectedOrderedMemory, ("om_slots", "om_memory_dropout", "om_mask", "om_ln"), "rir_om"),
    # CRvNN (RIR-CRvNN, Table 5)
    "crvnn": Inner(CRvNN, ("crvnn_halt", "crvnn_stop_threshold", "crvnn_window", "crvnn_max_steps"), "rir_crvnn"),
}


@dataclass(config=STRICT)
class RIRConfig(PreChunkConfig):
    """Settings of every RIR model: the outer recursion, its inner RvNN, and the S4D pre-chunk layer (§3.2, on)."""

    chunk_size: int = Field(30, ge=2)  # k
    inner: InnerName = "grc_rnn"
    alignment: Literal["beam", "string_it", "random"] = "beam"  # §3.1; no effect with a one-beam inner RvNN
    alignment_slot0: Slot0 = "beam0"  # the authors' code; "argmax": §3.1's BS_new[0] = the top beam
    chunk_by: Literal["batch", "sequence"] = "batch"  # chunk every sequence by the batch's padded length (the
    # authors' code) or each by its own length (module doc)
    inference: Inference = "rir"
    # the inference of the dev evaluations during training (what selects the tested weights, lowers the lr and stops
    # early; module doc); None: ``inference``, as the test splits
    dev_inference: Optional[Inference] = None
    eval_alignment: Literal["sample", "string_it"] = "sample"  # eval under RIR inference (module doc)
    pair_batch: Literal["joint", "separate"] = "joint"  # pairs: both sentences in one padded batch (module doc)
    eval_batches: EvalOrder = "buckets"  # evaluation batches: the authors' loader (module doc)
    s4d: bool = True

    @model_validator(mode="after")
    def _inner_fits(self):
        inner = INNERS[self.inner]
        missing = [f for f in inner.needs if not hasattr(self, f)]
        if missing:
            raise ValueError(f"inner={self.inner!r} needs the setting(s) {', '.join(missing)} that this model lacks; "
                             f"use model {inner.model} for that inner RvNN")
        return self


def n_chunks(length, k: int, padded=None):
    """ceil(L/k) chunks (the last one the remainder), or one chunk when the length that decides, ``padded`` (the
    batch's padded length; chunk_by batch) or else L itself, is below k + k // 2 (the authors' code). ``length``:
    an int or a tensor."""
    ceil = -(-length // k)
    whole = (length if padded is None else padded) < k + k // 2
    if isinstance(length, torch.Tensor):
        return torch.where(torch.as_tensor(whole, device=length.device), torch.ones_like(length), ceil)
    return 1 if whole else ceil


def align(scores: torch.Tensor, mode: str, sample: bool, generator=None, slot0: str = "beam0") -> torch.Tensor:
    """Beam indices (C, b) to string together per chunk, from chunk beam scores (C, b) (eq. 8-9); position 0 is
    the chunk's beam 0 (``slot0="beam0"``, the authors' code) or its top-scoring beam (``"argmax"``, §3.1).
    ``sample`` False: the beams in order (string-it; eval under ``eval_alignment`` string_it)."""
    c, b = scores.shape
    idx = torch.arange(b, device=scores.device).expand(c, b)
    if mode == "string_it" or not sample or b == 1:
        return idx
    if mode == "beam":
        probs = F.softmax(scores.detach().float(), dim=-1)  # normalize(BS_i), eq. 8
    elif mode == "random":
        probs = (scores.detach() > NEG / 2).float()  # uniform over valid beams (Appendix C)
    else:
        raise ValueError(f"unknown alignment {mode!r}; use one of {ALIGNMENTS}")
    idx = torch.multinomial(probs, b, replacement=True, generator=generator)  # (C, b) b draws with repetition
    if slot0 == "argmax":
        idx[:, 0] = scores.argmax(-1)  # BS_new[0]: the top beams, always kept (§3.1)
    elif slot0 == "beam0":
        idx[:, 0] = 0  # the search's first beam, as the authors' code keeps it
    else:
        raise ValueError(f"unknown alignment_slot0 {slot0!r}; use beam0 or argmax")
    return idx


def chunk_layout(lengths: list[int], k: int, padded) -> dict:
    """One level of the outer recursion, on the host: for sequences of ``lengths`` items (and the batch's padded
    length ``padded`` under chunk_by batch, else None) the chunks' ``rows`` (sequence of each chunk), ``starts``,
    ``sizes`` (the last chunk of a sequence: the remainder), ``counts`` (chunks per sequence), ``first`` (each
    sequence's first chunk), ``lone`` (a chunk that is its sequence's only one) and ``single`` (a chunk of a
    one-item sequence); and ``gidx`` (N, most): each sequence's chunks in order, its last repeated as padding."""
    counts = [n_chunks(n, k, padded) for n in lengths]
    rows, starts, sizes, first, gidx = [], [], [], [], []
    most = max(counts)
    for seq, (n, c) in enumerate(zip(lengths, counts)):
        first.append(len(rows))
        gidx.append([len(rows) + min(j, c - 1) for j in range(most)])
        for j in range(c):
            rows.append(seq)
            starts.append(j * k)
            sizes.append(k if j < c - 1 else n - j * k)
    return {"counts": counts, "rows": rows, "starts": starts, "sizes": sizes, "first": first, "gidx": gidx,
            "lone": [counts[r] == 1 for r in rows], "single": [lengths[r] == 1 for r in rows], "most": most}


def rir_encode(inner: nn.Module, x: torch.Tensor, lengths: torch.Tensor, k: int, alignment: str,
               slot0: str = "beam0", chunk_by: str = "batch", eval_alignment: str = "sample"):
    """Outer balanced k-ary recursion. x (N, S, D), lengths (N,) -> roots (N, b, D), scores (N, b).
    ``chunk_by``: "batch" decides chunking by the padded length S (then ceil(S / k) per level), "sequence" by
    each sequence's own length; ``eval_alignment``: "sample" aligns in eval mode as in training, "string_it" strings
    the beams in order there (module doc).

    The chunk layout decides tensor shapes, so it lives on the host: the lengths are read once per forward (one host
    synchronisation on CUDA, not several per level) and every level's layout (:func:`chunk_layout`) reaches the
    device in one non-blocking copy."""
    if chunk_by not in ("batch", "sequence"):
        raise ValueError(f"unknown chunk_by {chunk_by!r}; use batch or sequence")
    dev = x.device
    padded = x.size(1) if chunk_by == "batch" else None  # the authors' S
    x = x.unsqueeze(1)  # (N, 1, S, D): one beam until the first inner search
    pos_scores = None  # (N, b, S) once beams exist
    host_lengths = lengths.tolist()  # the one host read of the outer recursion
    while True:
        level = padded  # this level's padded length (chunk_by batch), else None
        lay = chunk_layout(host_lengths, k, level)
        if level is not None:
            padded = -(-level // k) if level >= k + k // 2 else 1
        c, n, most = len(lay["rows"]), len(host_lengths), lay["most"]
        flat = torch.tensor(lay["rows"] + lay["starts"] + lay["sizes"] + lay["lone"] + lay["single"]
                            + list(itertools.chain.from_iterable(lay["gidx"])), dtype=torch.long).to(dev, non_blocking=True)
        rows, starts, sizes, lone_chunk, single = flat[: 5 * c].view(5, c)  # (C,) each
        gidx = flat[5 * c:].view(n, most)  # (N, most)
        off = torch.arange(max(lay["sizes"]), device=dev)  # (Wc,)
        pos = (starts[:, None] + off).clamp(max=x.size(2) - 1)  # (C, Wc)
        xc = x.transpose(1, 2)[rows[:, None], pos].transpose(1, 2)  # (C, B, Wc, D)
        in_scores = None
        if pos_scores is not None:
            ok = off < sizes[:, None]  # (C, Wc)
            in_scores = (pos_scores.transpose(1, 2)[rows[:, None], pos] * ok[..., None]).sum(1)  # (C, b)
        roots, scores = inner(xc, sizes, in_scores)  # (C, b, D), (C, b)
        # a sequence that is one item does not enter the inner RvNN (the authors loop while S > 1): under chunk_by
        # batch only when the whole batch is (S = 1); a one-item sequence in a longer padded batch goes through it
        if getattr(inner, "single_passes_through", False) and (level is None or level == 1):
            roots = torch.where(single.bool()[:, None, None], xc[:, :, 0], roots)  # (C, 1, D)
        if (most if level is None else padded) == 1:  # batch: the authors' loop ends when S is 1
            return roots, scores
        if scores.size(1) > 1:  # beam alignment (eq. 8-9); one beam (a GRC RNN inside) has nothing to align
            sample = inner.training or eval_alignment == "sample"
            idx = align(scores, alignment, sample, slot0=slot0)  # (C, b)
            # the only chunk of its sequence keeps its beams in order (chunk_by sequence: as the sequence alone;
            # chunk_by batch: the authors realign every chunk of a chunked batch)
            lone = lone_chunk.bool()[:, None] & (level is None)  # (C, 1)
            idx = torch.where(lone, torch.arange(idx.size(1), device=dev), idx)  # (C, b)
            roots = roots.gather(1, idx[..., None].expand_as(roots))  # (C, b, D) eq. 9
            scores = scores.gather(1, idx)  # (C, b)
        # string the chunks back into sequences: (N, b, most, D)
        x = roots[gidx].transpose(1, 2)  # (N, b, most, D)
        pos_scores = scores[gidx].transpose(1, 2)  # (N, b, most)
        host_lengths = lay["counts"]


class RIREncoder(nn.Module):
    """Leaf layer (eq. 17, or the S4D pre-chunk layer eq. 13-17), the inner RvNN inside the outer recursion,
    softmax-marginalised root."""

    def __init__(self, cfg: RIRConfig):
        super().__init__()
        self.leaf = leaf_layer(cfg)
        self.tree = INNERS[cfg.inner].build(cfg)  # the inner RvNN
        self.chunk_size, self.alignment, self.inference = cfg.chunk_size, cfg.alignment, cfg.inference
        self.dev_inference = cfg.dev_inference  # read by the trainer's dev evaluations (rirlab.train.dev_inference)
        self.slot0, self.chunk_by, self.eval_alignment = cfg.alignment_slot0, cfg.chunk_by, cfg.eval_alignment

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> EncoderOutput:
        h = self.leaf(x, mask)  # (N, S, D)
        lengths = mask.sum(1)  # (N,)
        if self.training or self.inference == "rir":
            roots, scores = rir_encode(self.tree, h, lengths, self.chunk_size, self.alignment,
                                       self.slot0, self.chunk_by, self.eval_alignment)  # (N, b, D), (N, b)
        elif h.size(1) == 1 and getattr(self.tree, "single_passes_through", False):  # non-RIR, every sequence one
            # item: the authors loop while S > 1, so the leaf is the root (as rir_encode's one-item batch)
            roots, scores = h, h.new_zeros(h.size(0), 1)  # (N, 1, D): S = 1 is the one beam; (N, 1)
        else:  # non-RIR inference (RIR Appendix D): the inner RvNN over the whole sequence
            roots, scores = self.tree(h.unsqueeze(1), lengths)  # (N, b, D), (N, b)
        return EncoderOutput(marginalize(roots, scores))  # (N, D)
