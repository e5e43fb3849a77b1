"""Models. ``registry`` maps a name to its config dataclass and builder; every module here is imported on first use.

One file per model family (config dataclass + encoder + ``@register`` builder):
  ebt_grc.py      ebt_grc      EBT-GRC: beam search over merge orders (EBT paper §3, Algorithm 1)
  gt_grc.py       gt_grc       the original Gumbel-Tree GRC (Choi et al.): greedy, scorer on composed parents
  egt_grc.py      egt_grc      GT-GRC with the EBT fixes (scorer on the sliced child pair; EBT paper §3)
  bt_grc.py       bt_grc, bt_grc_os  Beam Tree Recursive Cells and their OneSoft variant (BT-RvNN, ICML 2023)
  om.py           om           Ordered Memory (Shen et al., NeurIPS 2019) with the GRC cell
  crvnn.py        crvnn        Continuous Recursive Neural Network (Ray Chowdhury & Caragea, ICML 2021)
  rir_om.py, rir_crvnn.py      rir_om, rir_crvnn: OM / CRvNN inside the RIR outer recursion (RIR Table 5)
  mega.py         mega         MEGA: moving-average equipped gated attention (Ma et al., ICLR 2023)
  rnn_grc.py      rnn_grc      the GRC cell as an RNN (RIR eq. 2); RIR-GRC's inner RvNN
  rir_grc.py      rir_grc      RIR with a GRC RNN inside (RIR §4.1); bbt_grc, the same with k = 2 (eq. 3)
  rir_ebt_grc.py  rir_ebt_grc  RIR with EBT-GRC inside (RIR §3)
  s4d_stack.py    s4d          stacked bidirectional S4D
  transformer.py  transformer  pre-LN Transformer (Recurrent Transformers paper eq. 1-4), with its blocks
  gut.py          ut, gut      Universal / Gated Universal Transformer (Algorithm 1, 3)
  tlb.py          tlb, gutlb   Temporal Latent Bottleneck and its GUT variant (Algorithm 2, 4)
  gau.py          gau          GAU block (EBT App. F.2 eq. 8-15) and the GAU sentence-interaction baseline (eq. 16-20)
  egt_gau.py      egt_gau      EGT-GAU: EGT-GRC tree nodes as parent attention, then GAU interaction (eq. 21-25)
  ebt_gau.py      ebt_gau      EBT-GAU: EBT-GRC beams of tree nodes as parent attention (EBT §4, eq. 26-29)
Shared building blocks, each with the config base of its concept:
  grc.py (GRC cell eq. 10-11, leaf transform eq. 17, GRC recurrence; GRCConfig), scorer.py (pair scorer eq. 12),
  beam_tree.py (the reference beam search), fused_beam.py (its fast path), rir.py (the outer recursion; RIRConfig),
  s4d.py (S4D layer, pre-chunk layer eq. 13-17; PreChunkConfig), halting.py (dynamic halting loop; HaltConfig),
  heads.py (embedding + task heads), base.py (what encoders and models return),
  parent_attention.py (the EBT search recording tree nodes, parent attention; TreeGAUConfig; EBT §4, eq. 21-29).

Papers cited in the docstrings (equation and algorithm numbers are theirs):
  "RIR paper": Recursion in Recursion: Two-Level Nested Recursion for Length Generalization with Scalability,
    J. Ray Chowdhury and C. Caragea, NeurIPS 2023, arXiv:2311.04449.
  "EBT paper": Efficient Beam Tree Recursion, J. Ray Chowdhury and C. Caragea, NeurIPS 2023, arXiv:2307.10779.
  "Recurrent Transformers paper": Investigating Recurrent Transformers with Dynamic Halt, J. Ray Chowdhury and
    C. Caragea, arXiv:2402.00976.
"""
