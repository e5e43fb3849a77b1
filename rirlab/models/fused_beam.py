"""EBT-GRC beam search (EBT paper §3, Algorithm 1; RIR eq. 10-12) as ONE autograd node with a hand-written backward.

Same search, same values and gradients as the op-by-op autograd version in
:mod:`rirlab.models.beam_tree` (the tests hold the two together and against a literal Algorithm 1);
what changes is the cost of a merge step, which decides the speed because a search is a long
chain of small steps (29 for a chunk of 30, 999 for a non-RIR pass over 1000 tokens):

- forward runs without autograd recording; every tensor the backward needs goes once into a
  preallocated buffer row (compose rows of all steps are one range, scorer rows another);
- every node vector is written once into a node pool and every pair score once into a score
  pool; a beam is a row of node ids and a row of score ids, so keeping beams, deleting the right
  child and shifting the cached pair scores are integer gathers, and a merge re-scores only the
  two pairs touching the new node;
- backward walks the steps in reverse: all reads of a node (or score) happen in later steps, so
  its gradient in the pool is complete when its step is reached; LayerNorm and GELU use ATen's
  fused backward kernels, the gate and GRC algebra is written out (no slice-backward zero fills);
- weight gradients are not formed per step: the per-row gradients are kept and each weight's
  gradient is ONE large matrix product over the rows of all steps at the end.

Rows are sorted by length so the rows still merging are a prefix; finished rows cost nothing.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from rirlab.models.grc import dropout_keep_mask, dropout_scale

NEG = -1e9  # score of an impossible beam or pair; finite so that no NaN can appear
_gelu_backward = torch.ops.aten.gelu_backward
_ln_backward = torch.ops.aten.native_layer_norm_backward


def gumbel_like(t: torch.Tensor) -> torch.Tensor:
    """Gumbel(0, 1) noise -log(-log U), U ~ U[0, 1) (U = 0 gives -inf: that pair is never drawn, p = 2^-24)."""
    return torch.rand_like(t).log_().neg_().log_().neg_()  # 4x cheaper on CPU than -log(exponential_())


class Search:
    """One EBT-GRC beam search over a batch of rows; ``save=True`` keeps what :meth:`backward` needs."""

    def __init__(self, tree, params, x, lengths, scores, save: bool):
        self.tree, self.save = tree, save
        (self.w1, self.b1, self.w2, self.b2, self.gamma, self.beta,
         self.sw1, self.sb1, self.sw2, self.sb2) = params
        self.p = tree.cell.drop.p if tree.training else 0.0
        self.scale = dropout_scale(self.p)
        self.eps = tree.cell.ln.eps
        self.ds = tree.scorer.ds
        m, b_in, w0, d = x.shape
        self.m, self.b_in, self.w0, self.d, self.b = m, b_in, w0, d, tree.beam_size
        lengths, self.order = lengths.sort(descending=True)
        self.x = x[self.order]
        self.scores0 = scores[self.order]
        self.lengths = lengths
        lens = lengths.tolist()
        self.n_merging = [sum(1 for L in lens if L > t + 1) for t in range(max(lens[0] - 1, 0) + 1)]
        self.n_leaf = m * b_in * w0
        self.n_rows = self.b * sum(self.n_merging[:-1])  # composed nodes over all steps
        self.n_sc0 = self.n_merging[0] * b_in * max(w0 - 1, 0)  # leaf pair scores
        dev, dt = x.device, x.dtype
        self.pool = x.new_empty(self.n_leaf + self.n_rows, d)
        self.spool = x.new_empty(self.n_sc0 + 2 * self.n_rows)
        if save:
            c, ds2 = self.w1.size(0), 2 * self.ds
            r, rs = self.n_rows, self.n_sc0 + 2 * self.n_rows
            e = lambda *s: torch.empty(*s, device=dev, dtype=dt)  # noqa: E731
            self.buf = {"pair": e(r, 2 * d), "h1": e(r, c), "act": e(r, c), "gh": e(r, 4 * d), "mixed": e(r, d),
                        "mean": e(r, 1), "rstd": e(r, 1), "sin": e(rs, ds2), "shp": e(rs, self.sw1.size(0))}
            if self.p > 0:
                self.buf["keep"] = torch.empty(r, c, device=dev, dtype=torch.bool)
            self.steps = []

    def slot(self, name: str, r0: int, r1: int, cols: int | None) -> torch.Tensor | None:
        """Rows r0..r1 of a saved buffer; without saving a fresh tensor (cols None: let the op allocate)."""
        if self.save:
            return self.buf[name][r0:r1]
        return None if cols is None else self.pool.new_empty(r1 - r0, cols)

    # ---- forward -------------------------------------------------------------------------------
    def score(self, inp: torch.Tensor, r0: int) -> torch.Tensor:
        """Scorer MLP (eq. 12) on (R, 2 d_s) pair inputs written at scorer rows r0.. -> (R,)."""
        r1 = r0 + inp.size(0)
        if self.save:
            self.buf["sin"][r0:r1] = inp
        hp = torch.addmm(self.sb1, inp, self.sw1.t(), out=self.slot("shp", r0, r1, self.sw1.size(0)))
        return torch.addmv(self.sb2, F.gelu(hp), self.sw2[0])

    def compose(self, r0: int, nb: int, child_ids: torch.Tensor) -> torch.Tensor:
        """GRC cell (eq. 10-11) on nb children pairs, results written to pool rows n_leaf + r0.."""
        d, r1 = self.d, r0 + nb
        pair = self.slot("pair", r0, r1, 2 * d)
        torch.index_select(self.pool, 0, child_ids.reshape(-1), out=pair.view(2 * nb, d))  # [left; right]
        h1 = torch.addmm(self.b1, pair, self.w1.t(), out=self.slot("h1", r0, r1, self.w1.size(0)))
        act = torch.ops.aten.gelu.out(h1, out=self.slot("act", r0, r1, h1.size(1)))
        if self.p > 0:  # dropout: 0/1 keep mask here, its 1/(1-p) scale folded into the W2 products
            keep = dropout_keep_mask(act.shape, self.p, act.device, out=self.slot("keep", r0, r1, None))
            act.mul_(keep)
        gh = torch.addmm(self.b2, act, self.w2.t(), alpha=self.scale, out=self.slot("gh", r0, r1, 4 * d))  # eq. 10
        gh[:, : 3 * d].sigmoid_()
        mixed = (gh[:, : 2 * d] * pair).view(nb, 2, d).sum(1).addcmul_(gh[:, 2 * d : 3 * d], gh[:, 3 * d :])
        new, mean, rstd = torch.native_layer_norm(mixed, (d,), self.gamma, self.beta, self.eps)  # eq. 11
        if self.save:
            self.buf["mixed"][r0:r1] = mixed
            self.buf["mean"][r0:r1] = mean.view(nb, 1)
            self.buf["rstd"][r0:r1] = rstd.view(nb, 1)
        self.pool[self.n_leaf + r0 : self.n_leaf + r1] = new
        return new

    def run(self):
        m, b_in, w0, d, b, ds = self.m, self.b_in, self.w0, self.d, self.b, self.ds
        dev = self.x.device
        self.pool[: self.n_leaf] = self.x.reshape(-1, d)
        ptr = torch.arange(self.n_leaf, device=dev).view(m, b_in, w0)
        if b_in == 1:
            ptr = ptr.expand(m, b, w0)
        scores = self.scores0
        pieces = []  # (root ids, scores) of finished row ranges, later-finishing ranges first in sorted order
        n = self.n_merging[0]
        if n < m:  # rows of length <= 1: the leaf is the root
            pieces.append((ptr[n:, :, 0], scores[n:]))
        ptr, scores, lengths = ptr[:n], scores[:n], self.lengths[:n]
        sid = None
        if n:
            xs = self.x[:n, :, :, :ds]
            inp = torch.cat([xs[:, :, :-1], xs[:, :, 1:]], -1).reshape(-1, 2 * ds)  # (n B_in (W-1), 2 d_s)
            ps0 = self.score(inp, 0).view(n, b_in, w0 - 1)
            self.valid0 = torch.arange(w0 - 1, device=dev) < (lengths - 1)[:, None, None]  # pairs inside the row
            self.spool[: self.n_sc0] = ps0.masked_fill(~self.valid0, NEG).reshape(-1)
            sid = torch.arange(self.n_sc0, device=dev).view(n, b_in, w0 - 1)
        offsets = torch.tensor([-1, 0, 1, 2], device=dev)
        r0, s0 = 0, self.n_sc0
        for t in range(len(self.n_merging) - 1):
            w = ptr.size(2)
            big_b = sid.size(1)
            logp = F.log_softmax(self.spool[sid], dim=-1)  # (n, B, W-1)
            key = logp + gumbel_like(logp) if self.tree.training else logp
            k1 = min(b, w - 1)
            top_pos = key.topk(k1, dim=-1).indices  # (n, B, k1) per-beam (stochastic) top-k
            cand = scores.view(n, b, 1) + logp.gather(-1, top_pos)  # (n, b, k1) accumulated log-scores
            new_scores, sel = cand.view(n, -1).topk(b, dim=-1)  # (n, b) best b of b x k1
            parent = torch.div(sel, k1, rounding_mode="floor")  # (n, b)
            j = top_pos.expand(n, b, k1).reshape(n, -1).gather(1, sel)  # (n, b) merged pair = (j, j+1)
            src = parent.clamp(max=big_b - 1)  # beam of the cached pair scores (B_in = 1: the one beam)

            ptr = ptr.gather(1, parent[..., None].expand(n, b, w))  # (n, b, W) the kept beams' node ids
            ids4 = ptr.gather(2, (j[..., None] + offsets).clamp(0, w - 1))  # (n, b, 4) j-1, j, j+1, j+2
            nb = n * b
            new = self.compose(r0, nb, ids4[..., 1:3])  # (nb, D)
            new_id = torch.arange(self.n_leaf + r0, self.n_leaf + r0 + nb, device=dev).view(n, b)
            # the two pairs touching the new node: (left neighbour, new), (new, right neighbour)
            trio = torch.stack([self.pool[ids4[..., 0].reshape(-1), :ds], new[:, :ds],
                                self.pool[ids4[..., 3].reshape(-1), :ds]], 1)  # (nb, 3, d_s)
            two = self.score(trio.view(nb, 3 * ds).as_strided((nb, 2, 2 * ds), (3 * ds, ds, 1)).reshape(-1, 2 * ds),
                             s0).view(n, b, 2)
            right_ok = (j + 1) < (lengths - 1 - t)[:, None]  # the right neighbour is a real node
            two[..., 1].masked_fill_(~right_ok, NEG)
            self.spool[s0 : s0 + 2 * nb] = two.reshape(-1)
            if self.save:
                self.steps.append((n, big_b, w, r0, s0, parent, src, j, ids4, sid, logp, right_ok))

            pos = torch.arange(w - 1, device=dev)
            jj = j[..., None]
            ptr = torch.where(pos == jj, new_id[..., None], ptr.gather(2, pos + (pos > jj)))  # (n, b, W-1)
            pos2 = pos[:-1]
            old = sid.gather(1, src[..., None].expand(n, b, w - 1)).gather(2, pos2 + (pos2 > jj))  # (n, b, W-2)
            two_id = torch.arange(s0, s0 + 2 * nb, device=dev).view(n, b, 2)
            sid = torch.where(pos2 == jj - 1, two_id[..., :1], torch.where(pos2 == jj, two_id[..., 1:], old))
            scores = new_scores
            r0, s0 = r0 + nb, s0 + 2 * nb
            n_next = self.n_merging[t + 1]
            if n_next < n:  # rows that just made their last merge
                pieces.append((ptr[n_next:, :, 0], scores[n_next:]))
                ptr, sid, scores, lengths = ptr[:n_next], sid[:n_next], scores[:n_next], lengths[:n_next]
                n = n_next
        self.root_ids = torch.cat([r for r, _ in reversed(pieces)])  # (M, b) sorted order
        inv = torch.empty_like(self.order)
        inv[self.order] = torch.arange(m, device=dev)
        roots = self.pool[self.root_ids.reshape(-1)].view(m, b, d)[inv]
        final = torch.cat([s for _, s in reversed(pieces)])[inv]
        return roots, final

    # ---- backward ------------------------------------------------------------------------------
    def score_backward(self, g: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
        """Scorer at rows ``rows`` with output gradient g (R,) -> input gradient (R, 2 d_s); keeps the row grads."""
        self.g_sc.index_copy_(0, rows, g)
        g_hp = _gelu_backward(g[:, None] * self.sw2[0], self.buf["shp"].index_select(0, rows))
        self.g_shp.index_copy_(0, rows, g_hp)
        return g_hp @ self.sw1

    def backward(self, g_roots: torch.Tensor, g_final: torch.Tensor):
        """Reverse pass over the steps. Only LIVE compositions are back-propagated: a node that is in no
        final beam's tree (its beam was pruned later) influences neither a root nor a final score, so its
        gradient is exactly zero; about two thirds of all compositions are such dead ends (b = 7)."""
        d, b, ds, buf, off = self.d, self.b, self.ds, self.buf, self.n_leaf
        dev = self.pool.device
        g_pool = torch.zeros_like(self.pool)
        g_spool = torch.zeros_like(self.spool)
        self.g_sc = torch.zeros_like(self.spool)
        self.g_shp = self.spool.new_zeros(self.spool.size(0), self.sw1.size(0))
        g_gh = self.pool.new_empty(self.n_rows, 4 * d)  # rows of live compositions, packed
        g_h1 = self.pool.new_empty(self.n_rows, self.w1.size(0))
        packed = []  # their compose-row indices, in packing order
        n_live = 0
        g_gamma = torch.zeros_like(self.gamma)
        g_beta = torch.zeros_like(self.beta)
        live = torch.zeros(self.pool.size(0), dtype=torch.bool, device=dev)
        live[self.root_ids.reshape(-1)] = True
        g_roots, g_final = g_roots[self.order], g_final[self.order]  # sorted order
        g_pool.index_add_(0, self.root_ids.reshape(-1), g_roots.reshape(-1, d))
        g_prev = None  # gradient of the beam scores the next-later step started from
        for t in range(len(self.steps) - 1, -1, -1):
            n, big_b, w, r0, s0, parent, src, j, ids4, sid, logp, right_ok = self.steps[t]
            nb, r1 = n * b, r0 + n * b
            n_after = self.n_merging[t + 1]  # rows still merging after this step
            g_new_scores = g_final[:n] if g_prev is None else torch.cat([g_prev, g_final[n_after:n]])
            idx = live[off + r0 : off + r1].nonzero().view(-1)  # live compositions of this step
            k = idx.numel()
            if k:
                ids = ids4.view(nb, 4).index_select(0, idx)  # (k, 4) left neighbour, children, right neighbour
                live[ids[:, 1:3].reshape(-1)] = True
                rows = idx + r0
                # scorer on the two new pairs; a masked right pair is a constant
                srows = (s0 + 2 * idx)[:, None] + torch.arange(2, device=dev)  # (k, 2)
                g_two = g_spool.index_select(0, srows.view(-1)).view(k, 2)
                g_two[:, 1].mul_(right_ok.view(nb).index_select(0, idx))
                g_sin = self.score_backward(g_two.view(-1), srows.view(-1)).view(k, 2, 2, ds)  # [pair][side]
                g_new = g_pool.index_select(0, rows + off)
                g_new[:, :ds] += g_sin[:, 0, 1] + g_sin[:, 1, 0]
                g_mixed, gg, gb = _ln_backward(g_new, buf["mixed"].index_select(0, rows), [d],
                                               buf["mean"].index_select(0, rows), buf["rstd"].index_select(0, rows),
                                               self.gamma, self.beta, [True, True, True])
                g_gamma += gg
                g_beta += gb
                gh, pair = buf["gh"].index_select(0, rows), buf["pair"].index_select(0, rows)
                gates = gh[:, : 3 * d]
                dsig = gates * (1 - gates)  # sigmoid'
                gm = g_mixed.unsqueeze(1)  # (k, 1, D)
                go = g_gh[n_live : n_live + k]
                torch.mul((pair.view(k, 2, d) * gm).view(k, 2 * d), dsig[:, : 2 * d], out=go[:, : 2 * d])
                torch.mul(gh[:, 3 * d :] * g_mixed, dsig[:, 2 * d :], out=go[:, 2 * d : 3 * d])
                torch.mul(gates[:, 2 * d :], g_mixed, out=go[:, 3 * d :])
                g_act = torch.mm(go, self.w2)
                if self.p > 0:
                    g_act.mul_(buf["keep"].index_select(0, rows)).mul_(self.scale)
                gh1 = torch.ops.aten.gelu_backward.grad_input(g_act, buf["h1"].index_select(0, rows),
                                                               grad_input=g_h1[n_live : n_live + k])
                g_pair = torch.addmm((gates[:, : 2 * d].view(k, 2, d) * gm).view(k, 2 * d), gh1, self.w1)
                g_pool.index_add_(0, ids[:, 1:3].reshape(-1), g_pair.view(2 * k, d))
                g_pool[:, :ds].index_add_(0, ids[:, 0:4:3].reshape(-1), g_sin[:, [0, 1], [0, 1]].reshape(-1, ds))
                packed.append(rows)
                n_live += k
            # beam scores: new = scores[parent] + logp[src, j]
            g_prev = torch.zeros(n, b, dtype=g_new_scores.dtype, device=dev)
            g_prev.scatter_add_(1, parent, g_new_scores)
            g_lp = torch.zeros(n, big_b * (w - 1), dtype=logp.dtype, device=dev)
            g_lp.scatter_add_(1, src * (w - 1) + j, g_new_scores)
            g_lp = g_lp.view(n, big_b, w - 1)
            g_ps = g_lp - logp.exp() * g_lp.sum(-1, keepdim=True)  # log_softmax backward
            g_spool.index_add_(0, sid.reshape(-1), g_ps.reshape(-1))
        n0 = self.n_merging[0]
        g_scores = g_final if g_prev is None else torch.cat([g_prev, g_final[n0:]])
        g_x = g_pool[:off].view(self.m, self.b_in, self.w0, d).clone()
        if self.n_sc0:
            g0 = g_spool[: self.n_sc0].view(n0, self.b_in, self.w0 - 1) * self.valid0
            g_in = self.score_backward(g0.reshape(-1), torch.arange(self.n_sc0, device=dev))
            g_in = g_in.view(n0, self.b_in, self.w0 - 1, 2 * ds)
            g_x[:n0, :, :-1, :ds] += g_in[..., :ds]
            g_x[:n0, :, 1:, :ds] += g_in[..., ds:]
        # weight gradients: one product over the live rows of all steps
        rows = torch.cat(packed) if packed else torch.zeros(0, dtype=torch.long, device=dev)
        g_gh, g_h1 = g_gh[:n_live], g_h1[:n_live]
        g_w1, g_b1 = g_h1.t() @ buf["pair"].index_select(0, rows), g_h1.sum(0)
        g_w2, g_b2 = torch.mm(g_gh.t(), buf["act"].index_select(0, rows)).mul_(self.scale), g_gh.sum(0)
        g_sw1, g_sb1 = self.g_shp.t() @ buf["sin"], self.g_shp.sum(0)
        g_sw2, g_sb2 = (self.g_sc @ F.gelu(buf["shp"]))[None], self.g_sc.sum().view(1)
        inv_x = torch.empty_like(g_x)
        inv_x[self.order] = g_x
        inv_s = torch.empty_like(g_scores)
        inv_s[self.order] = g_scores
        return inv_x, inv_s, (g_w1, g_b1, g_w2, g_b2, g_gamma, g_beta, g_sw1, g_sb1, g_sw2, g_sb2)


class _FusedSearch(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tree, x, lengths, scores, *params):
        search = Search(tree, params, x, lengths, scores, save=True)
        ctx.search = search
        return search.run()

    @staticmethod
    def backward(ctx, g_roots, g_final):
        g_x, g_scores, g_params = ctx.search.backward(g_roots, g_final)
        ctx.search = None
        return (None, g_x, None, g_scores, *g_params)


def tree_params(tree):
    c, s = tree.cell, tree.scorer
    return (c.w1.weight, c.w1.bias, c.w2.weight, c.w2.bias, c.ln.weight, c.ln.bias,
            s.w1.weight, s.w1.bias, s.w2.weight, s.w2.bias)


def fused_search(tree, x: torch.Tensor, lengths: torch.Tensor, scores: torch.Tensor):
    """roots (M, b, D), scores (M, b) of the beam search; one autograd node when gradients are wanted."""
    params = tree_params(tree)
    if torch.is_grad_enabled() and (x.requires_grad or scores.requires_grad or any(p.requires_grad for p in params)):
        return _FusedSearch.apply(tree, x, lengths, scores, *params)
    with torch.no_grad():
        return Search(tree, params, x, lengths, scores, save=False).run()
