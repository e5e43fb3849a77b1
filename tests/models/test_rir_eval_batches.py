"""Issue 31 (RIR evaluation): the RIR models evaluate in the batches of the authors' dev/test loader
(BeamRecursionFamily train.py load_dataloaders, collaters/classifier_collater.py, sentence_pair_collater.py; pinned
below from running that code: /work/scratch/rirevalb_tools/authors_batches.py), which under chunk_by batch and RIR
inference decide a sequence's chunks and so its output."""

from __future__ import annotations

import pytest
import torch

from rirlab.models import registry
from rirlab.tasks import registry as tasks
from rirlab.tasks.batching import PAIR_CUTS, eval_batches
from tests.helpers.models import batch_of, build, random_seqs

SINGLE = [5, 3, 9, 1, 7, 2, 8, 4, 6, 10, 11, 12, 13]  # lengths, split order
PAIRS = [(3, 80), (5, 2), (1, 1), (70, 4), (2, 9), (6, 6), (4, 3), (8, 1), (2, 2), (75, 75), (1, 3), (9, 9), (3, 3),
         (100, 1), (2, 5), (7, 7)]
# the authors' loader's batches (as sorted index lists; it shuffles the batches of a pool): dev_batch_size 3 and
# bucket_size_factor 2 (single), dev_batch_size 4 and bucket_size_factor 2 (pairs, dataset SNLI / MNLIdev)
CODE_SINGLE = [[0, 2, 4], [1, 3, 5], [6, 7, 8], [9, 10, 11], [12]]
CODE_PAIRS = [[0, 3], [1, 2, 6, 7], [4, 5], [8, 10, 12, 14], [9, 13], [11, 15]]  # halved from 70 tokens
CODE_MNLI = [[0, 3], [1, 2, 6, 7], [4, 5], [8, 10, 12, 14], [9], [11], [13], [15]]  # quartered from 100


def single():
    return [([1] * n, 0) for n in SINGLE]


def pairs():
    return [([1] * a, [1] * b, 0) for a, b in PAIRS]


def as_code(batches):
    return sorted(sorted(b) for b in batches)


def test_buckets_are_the_authors_dev_batches():
    assert as_code(eval_batches(single(), 3, "buckets", 2)) == CODE_SINGLE
    assert as_code(eval_batches(pairs(), 4, "buckets", 2)) == CODE_PAIRS
    assert as_code(eval_batches(pairs(), 4, "buckets", 2, tasks.get("mnli").bucket_cuts)) == CODE_MNLI
    assert as_code(eval_batches(single(), 3, "length")) != CODE_SINGLE  # rirlab before: the split sorted


@pytest.mark.parametrize("name,extra", [("rir_grc", {}), ("rir_ebt_grc", {"inference": "rir"}),
                                        ("rir_om", {}), ("rir_crvnn", {})])
def test_rir_models_default_to_the_authors_batches(name, extra):
    assert registry.get(name).config(hidden_size=8, **extra).eval_batches == "buckets"


def test_the_batch_decides_a_sequence_output_under_rir_inference():
    """RIR-GRC, chunk 4: alone, a 5-token sequence (< 4 + 2) is one chunk; batched with a 9-token one it is chunked."""
    torch.manual_seed(0)
    model = build("rir_grc", hidden_size=8, chunk_size=4, s4d=False).eval()
    short, long = random_seqs([5, 9])
    with torch.no_grad():
        alone = model(batch_of([short])).logits[0]
        beside = model(batch_of([short, long])).logits[0]
    assert (alone - beside).abs().max() > 1e-4


def test_trainer_evaluates_in_the_models_order(tmp_path, monkeypatch):
    from rirlab.train import Trainer
    from rirlab.trial import resolve

    seen = []
    monkeypatch.setattr("rirlab.train.eval_batches",
                        lambda ex, size, order, factor, cuts: seen.append((size, order, factor, cuts)) or [[0]])
    tiny = {"task": "logic", "hidden_size": 8, "n_train": 8, "n_dev": 4, "n_eval": 4, "eval_splits": ["ops_7"],
            "device": "cpu", "cache_dir": str(tmp_path), "recipe": "paper", "eval_batch_size": 32}
    for extra, order in (({"model": "rir_grc"}, "buckets"), ({"model": "rir_ebt_grc", "eval_batches": "length"},
                                                                  "length")):
        trainer = Trainer(resolve({**tiny, **extra}))
        trainer.evaluate(trainer.dev_split())
        assert seen.pop() == (32, order, 5, PAIR_CUTS)  # logic's pair rule, not MNLI's
