"""Recursion in Recursion with beams kept alive (RIR paper §2 eq. 6-7, §3, §3.1 eq. 8-9, Appendix C, I).

Outer recursion: cut every sequence into chunks of about k items, run the inner RvNN (a
:class:`~rirlab.models.beam_tree.BeamTree`) over ALL chunks of ALL sequences as one batch,
string the chunk outputs back into a shorter sequence of beams, repeat until one item is left.

The state between levels is a beam of sequences x (N, b, S, D) with a beam score per
position (N, b, S): the score of a chunk's input beam is the sum of its positions' scores,
the inner search adds the log-probabilities of its merges, so the final root score of a beam
is the sum of the scores of every merge in its tree.

Chunking (the paper pads a sequence to a multiple of k, §2; the authors' code also keeps a
sequence shorter than 1.5 chunks whole, and we follow both): a sequence of L >= 1.5k items gets
ceil(L/k) chunks of k items, the last one holding the remainder (between 1 and k items; a chunk
of one item is its own root); a sequence of L < 1.5k items is one chunk, so the inner EBT-RvNN
sees it whole (chunk >= L is exactly EBT-RvNN, and k = 2 is exactly the balanced binary tree).
The rule is applied per sequence and at every level of the outer recursion.

Choices the paper leaves open (ours):
- Alignment (eq. 8-9) is applied only where a sequence has more than one chunk; a lone chunk's
  output is that sequence's final beam. Position 0 is always the string of every chunk's top
  beam, for ``beam`` and ``random`` alike. ``random`` samples uniformly among the chunk's
  valid beams (a chunk with fewer possible trees than b has fewer valid beams).
- In eval mode every alignment is ``string_it`` (beams are sorted, so position i strings the
  i-th best beams), which keeps eval deterministic and batch-independent.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from rirlab.models.beam_tree import NEG, BeamTree

ALIGNMENTS = ("beam", "string_it", "random")


def n_chunks(length: int, k: int) -> int:
    """ceil(L/k) chunks (the last one the remainder); one chunk when L < 1.5k."""
    return 1 if 2 * length < 3 * k else -(-length // k)


def align(scores: torch.Tensor, mode: str, training: bool, generator=None) -> torch.Tensor:
    """Beam indices (C, b) to string together per chunk, from chunk beam scores (C, b) (eq. 8-9)."""
    c, b = scores.shape
    idx = torch.arange(b, device=scores.device).expand(c, b)
    if mode == "string_it" or not training or b == 1:
        return idx
    if mode == "beam":
        probs = F.softmax(scores.detach().float(), dim=-1)  # normalize(BS_i), eq. 8
    elif mode == "random":
        probs = (scores.detach() > NEG / 2).float()  # uniform over valid beams (Appendix C)
    else:
        raise ValueError(f"unknown alignment {mode!r}; use one of {ALIGNMENTS}")
    idx = torch.multinomial(probs, b, replacement=True, generator=generator)  # (C, b) b draws with repetition
    idx[:, 0] = scores.argmax(-1)  # BS_new[0]: the top beams, always kept
    return idx


def rir_encode(tree: BeamTree, x: torch.Tensor, lengths: torch.Tensor, k: int, alignment: str):
    """Outer balanced k-ary recursion. x (N, S, D), lengths (N,) -> roots (N, b, D), scores (N, b)."""
    dev = x.device
    x = x.unsqueeze(1)  # (N, 1, S, D): one beam until the first inner search
    pos_scores = None  # (N, b, S) once beams exist
    lens = lengths.tolist()
    while True:
        counts = [n_chunks(L, k) for L in lens]
        rows, starts, sizes = [], [], []
        for r, (L, c) in enumerate(zip(lens, counts)):
            for i in range(c):
                rows.append(r)
                starts.append(i * k)
                sizes.append(k if i < c - 1 else L - i * k)
        width = max(sizes)
        rows_t = torch.tensor(rows, device=dev)
        sizes_t = torch.tensor(sizes, device=dev)
        off = torch.arange(width, device=dev)
        pos = (torch.tensor(starts, device=dev)[:, None] + off).clamp(max=x.size(2) - 1)  # (C, Wc)
        xc = x.transpose(1, 2)[rows_t[:, None], pos].transpose(1, 2)  # (C, B, Wc, D)
        in_scores = None
        if pos_scores is not None:
            ok = off < sizes_t[:, None]  # (C, Wc)
            in_scores = (pos_scores.transpose(1, 2)[rows_t[:, None], pos] * ok[..., None]).sum(1)  # (C, b)
        roots, scores = tree(xc, sizes_t, in_scores)  # (C, b, D), (C, b)
        if all(c == 1 for c in counts):
            return roots, scores
        idx = align(scores, alignment, tree.training)  # (C, b)
        lone = torch.tensor([counts[r] == 1 for r in rows], device=dev)
        idx = torch.where(lone[:, None], torch.arange(idx.size(1), device=dev), idx)
        roots = roots.gather(1, idx[..., None].expand_as(roots))  # (C, b, D) eq. 9
        scores = scores.gather(1, idx)  # (C, b)
        # string the chunks back into sequences: (N, b, max chunks, D)
        most = max(counts)
        first, last = [], []  # chunk ids of each row's first and last chunk
        for c in counts:
            first.append(last[-1] + 1 if last else 0)
            last.append(first[-1] + c - 1)
        j = torch.arange(most, device=dev)
        gidx = (torch.tensor(first, device=dev)[:, None] + j).minimum(torch.tensor(last, device=dev)[:, None])  # (N, most)
        x = roots[gidx].transpose(1, 2)  # (N, b, most, D)
        pos_scores = scores[gidx].transpose(1, 2)  # (N, b, most)
        lens = counts
