"""Embedding + encoder + task head: sentence classifier, siamese pair classifier, token-level LM head."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from rirlab.models.base import EncoderOutput, ModelOutput
from rirlab.tasks.base import TaskInfo


class MLP(nn.Module):
    def __init__(self, d_in: int, d_hidden: int, d_out: int, dropout: float):
        super().__init__()
        self.l1 = nn.Linear(d_in, d_hidden)
        self.l2 = nn.Linear(d_hidden, d_out)
        self.drop = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.l2(self.drop(F.gelu(self.l1(self.drop(x)))))


class CodeHead(nn.Module):
    """The dynamic-halt paper's code's classifier (``classifier_block`` of its classifier, sentence-pair and flip-flop
    frameworks): Linear(d_in, d) - ReLU - Linear(d, C), no dropout. For two classes the code emits one logit z and
    trains with a sigmoid (BCEWithLogits); here the logits are [0, z], whose softmax cross-entropy is that loss
    exactly and whose argmax is z > 0 (the code's sigmoid(z) >= 0.5, but for z = 0 exactly)."""

    def __init__(self, d_in: int, d_hidden: int, num_classes: int):
        super().__init__()
        self.binary = num_classes == 2
        self.l1 = nn.Linear(d_in, d_hidden)
        self.l2 = nn.Linear(d_hidden, 1 if self.binary else num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        z = self.l2(F.relu(self.l1(x)))  # (..., C) or (..., 1)
        return torch.cat([torch.zeros_like(z), z], dim=-1) if self.binary else z  # (..., C)


class TrainableUnk(nn.Module):
    """Frozen word vectors whose ``unk_id`` token reads a trainable vector instead (standard normal init), as the
    authors' public code (JRC1995/BeamRecursionFamily, ``unk_embed``): words without a GloVe vector share it."""

    def __init__(self, frozen: nn.Embedding, unk_id: int):
        super().__init__()
        self.frozen, self.unk_id = frozen, unk_id
        self.unk = nn.Parameter(torch.randn(frozen.embedding_dim))

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.frozen(tokens)  # (N, S, E)
        return torch.where((tokens == self.unk_id).unsqueeze(-1), self.unk.to(x.dtype), x)


class TaskModel(nn.Module):
    """Embeds tokens, runs ``encoder(x, mask) -> EncoderOutput`` and applies the task's head.

    ``cfg``: the model config (its ``hidden_size`` and ``dropout``; ``in_dropout`` and ``head``, where it has them).

    ``head`` "code" (the recurrent Transformers' default, their paper's code): :class:`CodeHead` on the sentence
    vector, the pair features or (lm, the flip-flop framework) every token state; "gelu" (every other model, and
    rirlab's recurrent Transformers before): the MLP with dropout below, and one linear layer per token for lm.

    classify: MLP on the sentence vector; pair: siamese, MLP on [u; v; |u-v|; u*v], the two sentences' auxiliary
    losses summed, or averaged where ``cfg.pair_act == "mean"`` (halting models; the dynamic-halt paper's code);
    pair with a sentence-interaction encoder (``encoder.joint_pair``: gau, egt_gau, ebt_gau): MLP on ``encoder.pair``'s
    vector of the two sequences read together (EBT paper App. F.2 eq. 20);
    lm: a linear layer on every token state (the encoder must return (N, S, D)).
    ``pair_batch`` "joint" (TLB/GUTLB and the RIR models; both papers' code's ``batch_pair``): both sentences of a
    pair, padded to the longer of the two batches, go through the encoder as one batch of 2N, so a sentence's chunks
    (TLB's torch.chunk of the padded length, RIR's chunk_by batch) are those of the code; "separate" (every other
    model): one encoder call per sentence batch.
    """

    def __init__(self, encoder: nn.Module, info: TaskInfo, cfg):
        super().__init__()
        d, dropout = cfg.hidden_size, cfg.dropout  # every model config has both
        self.kind = info.kind
        self.pair_act_mean = getattr(cfg, "pair_act", "sum") == "mean"  # halting models: the code averages
        self.pair_joint = info.kind == "pair" and getattr(cfg, "pair_batch", "separate") == "joint"
        if getattr(info, "embeddings", None) is None:
            self.embed = nn.Embedding(info.vocab_size, d, padding_idx=info.pad_id)
            if getattr(info, "pad_is_token", False):  # a real token's row (flip-flop's "w"): drawn, frozen
                with torch.no_grad():
                    nn.init.normal_(self.embed.weight[info.pad_id])
        else:  # the task's frozen pretrained vectors (GloVe; rirlab.tasks.text), a trainable map to the model width
            vectors = torch.as_tensor(info.embeddings, dtype=torch.float32)  # (V, 300)
            frozen = nn.Embedding.from_pretrained(vectors, freeze=True, padding_idx=info.pad_id)
            unk = getattr(info, "unk_id", None)
            self.embed = nn.Sequential(frozen if unk is None else TrainableUnk(frozen, unk),
                                       nn.Linear(vectors.shape[1], d))
        # the embedded tokens' dropout, the papers' code's in_dropout (its logic configs: 0.4, OM 0.1; ListOps: 0.1;
        # the head's MLP uses dropout, their out_dropout): in_dropout where the model config sets it, else dropout
        in_dropout = getattr(cfg, "in_dropout", None)
        self.drop = nn.Dropout(dropout if in_dropout is None else in_dropout)
        self.encoder = encoder
        # sentence interaction (EBT paper App. F.2): the encoder reads both sequences of a pair at once, ``pair(x1,
        # mask1, x2, mask2)``, and returns the pair's vector; the head is eq. 20 on it (no siamese features)
        self.joint_pair = info.kind == "pair" and getattr(encoder, "joint_pair", False)
        if getattr(cfg, "head", "gelu") == "code":
            if info.kind not in ("classify", "pair", "lm"):
                raise ValueError(f"unknown task kind {info.kind!r}")
            self.head = CodeHead(4 * d if info.kind == "pair" and not self.joint_pair else d, d, info.num_classes)
        elif info.kind == "classify" or self.joint_pair:
            self.head = MLP(d, d, info.num_classes, dropout)
        elif info.kind == "pair":
            self.head = MLP(4 * d, d, info.num_classes, dropout)
        elif info.kind == "lm":
            self.head = nn.Linear(d, info.num_classes)
        else:
            raise ValueError(f"unknown task kind {info.kind!r}")

    def artifacts(self) -> dict:
        """JSON-able objects the encoder wants stored with the run (e.g. a halting-depth histogram)."""
        return getattr(self.encoder, "artifacts", dict)()

    def encode(self, tokens: torch.Tensor, mask: torch.Tensor) -> EncoderOutput:
        return self.encoder(self.drop(self.embed(tokens)), mask)  # (N, S, D) in

    def forward(self, batch: dict) -> ModelOutput:
        if self.joint_pair:
            embed = [self.drop(self.embed(batch[k])) for k in ("tokens", "tokens2")]  # (N, S1, D), (N, S2, D)
            out = self.encoder.pair(embed[0], batch["mask"], embed[1], batch["mask2"])  # vec (N, D)
            return ModelOutput(self.head(out.vec), out.aux_loss, out.stats)
        if self.pair_joint:
            return self.joint(batch)
        a = self.encode(batch["tokens"], batch["mask"])
        if self.kind != "pair":
            return ModelOutput(self.head(a.vec), a.aux_loss, a.stats)
        b = self.encode(batch["tokens2"], batch["mask2"])
        u, v = a.vec, b.vec  # (N, D) each
        logits = self.head(torch.cat([u, v, (u - v).abs(), u * v], dim=-1))  # (N, C)
        aux = None if a.aux_loss is None else (a.aux_loss + b.aux_loss) / (2 if self.pair_act_mean else 1)
        stats = {k: (a.stats[k] + b.stats.get(k, a.stats[k])) / 2 for k in a.stats}
        return ModelOutput(logits, aux, stats)

    def joint(self, batch: dict) -> ModelOutput:
        """Pair through one encoder call (``pair_batch: joint``): [x1; x2] padded to max(S1, S2), split after."""
        x1, x2 = (self.drop(self.embed(batch[k])) for k in ("tokens", "tokens2"))  # (N, S1, D), (N, S2, D)
        m1, m2 = batch["mask"], batch["mask2"]
        n, s = x1.size(0), max(x1.size(1), x2.size(1))
        x = torch.cat([F.pad(x1, (0, 0, 0, s - x1.size(1))), F.pad(x2, (0, 0, 0, s - x2.size(1)))])  # (2N, S, D)
        mask = torch.cat([F.pad(m1, (0, s - m1.size(1)), value=False), F.pad(m2, (0, s - m2.size(1)), value=False)])
        out = self.encoder(x, mask)
        u, v = out.vec[:n], out.vec[n:]  # (N, D) each
        logits = self.head(torch.cat([u, v, (u - v).abs(), u * v], dim=-1))  # (N, C)
        # L_ACT: the mean over the 2N sentences is the code's mean of the two halves' means (pair_act mean)
        aux = None if out.aux_loss is None else out.aux_loss * (1 if self.pair_act_mean else 2)
        return ModelOutput(logits, aux, out.stats)
