"""Models. ``registry`` maps a name to its entry (config dataclass, builder, and what the trainer, bench and dry run
need: rirlab.models.registry.ModelEntry); every module here is imported on first use.

One file per model family: config dataclass + encoder + an ``@register(...)`` builder that declares the rest. The
catalogue is the registry itself: ``rirlab models`` lists every registered model with its task kinds and what it is
(and any plugin of $RIRLAB_PLUGINS); adding a family is its file, its spec and its test, no list to edit.

Shared building blocks, each with the config base of its concept:
  grc.py (GRC cell eq. 10-11, leaf transform eq. 17, GRC recurrence; GRCConfig), scorer.py (pair scorer eq. 12),
  beam_tree.py (the reference beam search), fused_beam.py (its fast path), rir.py (the outer recursion; RIRConfig),
  s4d.py (S4D layer, pre-chunk layer eq. 13-17; PreChunkConfig), halting.py (dynamic halting loop; HaltConfig),
  heads.py (embedding + task heads), base.py (what encoders and models return), attention.py (the recurrent
  Transformers' positions, attention, feed-forward and readout blocks; RTConfig),
  parent_attention.py (the EBT search recording tree nodes, parent attention; TreeGAUConfig; EBT §4, eq. 21-29).

Papers cited in the docstrings (equation and algorithm numbers are theirs):
  "RIR paper": Recursion in Recursion: Two-Level Nested Recursion for Length Generalization with Scalability,
    J. Ray Chowdhury and C. Caragea, NeurIPS 2023, arXiv:2311.04449.
  "EBT paper": Efficient Beam Tree Recursion, J. Ray Chowdhury and C. Caragea, NeurIPS 2023, arXiv:2307.10779.
  "Recurrent Transformers paper": Investigating Recurrent Transformers with Dynamic Halt, J. Ray Chowdhury and
    C. Caragea, arXiv:2402.00976.
"""
