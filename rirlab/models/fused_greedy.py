"""EGT-GRC's greedy straight-through search (EBT paper Table 2; beam 1 of Algorithm 1 with Choi et al.'s
straight-through Gumbel-softmax) as ONE autograd node with a hand-written backward.

Two straight-through gradients (:data:`rirlab.models.beam_tree.STGradient`): "mask" (the default; the authors'
code) and "node" (described next). Under "mask" every pair's Gumbel-softmax probability y_k gets the gradient of
the selection vector sel = onehot(j) + y - y.detach() through the children read (sum_k sel_k h_k), the parent and
the state update (sel_k new + (1 - cumsum(sel)_k) h_k + (cumsum(sel)_k - sel_k) h_k+1), with the pairs re-scored
from every step's state. In values every state is a copy of pool nodes, so the backward needs, per step, the
gradient of the next state's nodes from the later steps only: a node's pool gradient is that at the step's turn
when every step pushes its own pair scores' gradients into their nodes through the scorer's input Jacobian
(kept per pair: d score / d [left_ds; right_ds]), instead of once when the pair was scored. Then, per step with
a_k = <g_k, h_k>, b_k = <g_k, h_k+1>, g the next state's gradient, P the parent and (g_L, g_R) the cell's
children gradients, d sel_m = <g_L, h_m> + <g_R, h_m+1> + <g_m, P> - sum_{k>=m} a_k + sum_{k>m} b_k; softmax and
log-softmax backward take it to the pair scores.

The fast path of the reference :class:`rirlab.models.beam_tree.BeamTree` with ``beam_size=1,
straight_through=True``: same search, same draws (the reference's :class:`~rirlab.models.beam_tree.Noise`
stream), same values and gradients (the tests hold the two together). Its forward is the fused EBT search's
(:class:`rirlab.models.fused_beam.Search`: node and score pools, the cell on the chosen pair only, two
pairs re-scored per merge) plus the straight-through factor of each merge: the new node is
``cell(children) * (1 + p_j - p_j)`` (``p_j - p_j`` detached), p_j = softmax((logp + Gumbel) / tau)_j the
probability of the merged pair j, as the reference and the authors' ``st_gumbel_softmax`` make it: value 1
forward (up to rounding), gradient of p_j backward.

That gradient ties a merge's selection to every later use of its node, so the backward cannot batch by tree
depth as the EBT search's does; it runs the steps in reverse, each as one small batch: the step's two new
pair scores (their gradient is complete: only later steps read them), then the new node (complete too), the
straight-through term into the step's pair scores through softmax and log-softmax, and the GRC cell into
its children. The weights' gradients are, as there, one product over all compositions.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from rirlab.models.beam_tree import STGradient, checked_st_gradient
from rirlab.models.fused_beam import FusedBeamTree, Search, _gelu_backward, state_shift, take
from rirlab.models.grc import GRC
from rirlab.models.scorer import Scorer


class GreedySearch(Search):
    """One greedy straight-through search over a batch of rows (beam 1, one input beam)."""

    step_buffers = True  # its backward reads them step by step

    def run(self):
        """Per step: log-softmax of the cached pair scores, the (Gumbel-perturbed) argmax j, the cell on pair j,
        the straight-through factor, the two new pairs scored; the state update of the beam search."""
        dev, tau = self.x.device, self.tree.tau
        state, scores, lengths, pieces = self.start()  # (n, 1, 2W), (n, 1), (n,)
        offsets = self.tree.offsets  # j-1, j, j+1, j+2
        new_ids = self.new_ids()
        lim = (lengths - 2)[:, None]  # (n, 1) a merge at j has a right neighbour iff j < lim
        r0 = 0
        for t in range(len(self.n_merging) - 1):
            n, w = state.size(0), state.size(2) // 2
            sid = state[..., w : 2 * w - 1]  # (n, 1, W-1) score ids of the adjacent pairs
            logp = F.log_softmax(take(self.spool, sid), dim=-1)  # (n, 1, W-1)
            key = logp + self.noise.gumbel(logp.shape) if self.noise is not None else logp
            jj = key.topk(1, dim=-1).indices  # (n, 1, 1) the merged pair (j, j+1)
            scores = scores + logp.gather(-1, jj).view(n, 1)  # (n, 1) accumulated log-probability
            soft = F.softmax(key / tau, dim=-1)  # (n, 1, W-1) Gumbel-softmax over the pairs
            pj = soft.gather(-1, jj).view(n, 1)  # (n, 1)
            flat = state.view(n, -1)
            source, skey = state_shift(w, dev)
            ids = self.slot("ids", r0, r0 + n)
            at4 = (jj.view(n, 1) + offsets).clamp_(0, w - 1)  # (n, 4) j-1 .. j+2
            ids4 = torch.gather(flat, 1, at4, out=ids)
            four, new = self.compose(r0, n, ids4, self.noise and self.noise.keep_rows(n))  # (n, D) unscaled
            node = torch.mul(new, (1.0 + pj) - pj, out=self.new_nodes[r0])
            self.score_new_pairs(r0, four, node, jj, lim)
            if self.buf is not None:  # ("mask": the state's node ids too)
                nodes = state[:, 0, :w] if self.tree.mask_select else None
                self.steps.append((n, r0, jj, sid, logp, soft, pj, new, nodes))
            state = self.next_state(flat, source, skey, jj, new_ids[r0 : r0 + n])
            lim = lim - 1
            r0 += n
            state, scores, lim = self.drop_finished(t, pieces, state, scores, lim)
        return self.finish(pieces)

    def backward_buffers(self, g_roots: torch.Tensor, g_final: torch.Tensor):
        """The backward's accumulators: node and score pool gradients (the roots' gradients placed), the final
        scores' gradient in sorted order, the cell rows' buffers and the LayerNorm weight and bias gradients."""
        d = self.d
        g_pool = torch.zeros_like(self.pool)
        g_spool = torch.zeros_like(self.spool)
        self.sc_rows = []
        g_roots, g_final = g_roots[self.order], g_final[self.order]  # sorted order
        g_pool.index_add_(0, self.root_ids.reshape(-1), g_roots.reshape(-1, d))
        r_all, c = self.n_rows, self.w1.size(0)
        g_gh, g_h1 = self.pool.new_empty(r_all, 4 * d), self.pool.new_empty(r_all, c)
        pairs, acts = self.pool.new_empty(r_all, 2 * d), self.pool.new_empty(r_all, c)
        g_gamma, g_beta = torch.zeros_like(self.gamma), torch.zeros_like(self.beta)
        return g_pool, g_spool, g_final, g_gh, g_h1, pairs, acts, g_gamma, g_beta

    def backward(self, g_roots: torch.Tensor, g_final: torch.Tensor):
        """Steps in reverse order (see the module docstring); a row's final score is the sum of its steps' log-
        probabilities, so every step's chosen log-probability has the row's final-score gradient."""
        if self.tree.mask_select:
            return self.mask_backward(g_roots, g_final)
        ds, off, buf, tau = self.ds, self.n_leaf, self.buf, self.tree.tau
        g_pool, g_spool, g_final, g_gh, g_h1, pairs, acts, g_gamma, g_beta = self.backward_buffers(g_roots, g_final)
        for n, r0, jj, sid, logp, soft, pj, new, _ in reversed(self.steps):
            r1 = r0 + n
            ids = buf["ids"][r0:r1]  # (n, 4) left neighbour, children, right neighbour
            # 1. the two pairs this step scored: [left, node], [node, right] (a padding right pair is a constant)
            g_two = g_spool[self.n_sc0 + 2 * r0 : self.n_sc0 + 2 * r1].view(n, 2)
            g_two[:, 1].masked_fill_(buf["right_bad"][r0:r1], 0.0)
            g_sin = self.score_backward(g_two.reshape(-1), buf["sin"][2 * r0 : 2 * r1], buf["shp"][2 * r0 : 2 * r1],
                                        buf["sha"][2 * r0 : 2 * r1])  # (2n, 2 d_s)
            node_ids = torch.arange(off + r0, off + r1, device=ids.device)
            sin_ids = torch.stack([ids[:, 0], node_ids, node_ids, ids[:, 3]], 1)
            g_pool[:, :ds].index_add_(0, sin_ids.view(-1), g_sin.view(4 * n, ds))
            # 2. node = new * (1 + p_j - p_j): complete now; the straight-through term reaches the pair scores
            g_node = g_pool[off + r0 : off + r1]  # (n, D)
            g_pj = (g_node * new).sum(-1, keepdim=True)  # (n, 1)
            g_new = g_node * ((1.0 + pj) - pj)
            g_key = soft * (pj * g_pj).div_(-tau)[..., None]  # softmax backward: soft * (onehot_j - p_j) g_pj / tau
            g_key.scatter_add_(-1, jj, (pj * g_pj / tau + g_final[: jj.size(0)])[..., None])  # + the score's term
            g_ps = g_key - logp.exp() * g_key.sum(-1, keepdim=True)  # log-softmax backward
            g_spool.index_add_(0, sid.reshape(-1), g_ps.reshape(-1))
            # 3. the GRC cell into its children
            gg, gb, _ = self.children_backward(g_pool, g_new, ids, r0, n, pairs, acts, g_gh, g_h1)
            g_gamma += gg
            g_beta += gb
        return self.input_and_weight_grads(g_pool, g_spool, g_final, g_gamma, g_beta, g_gh, acts, g_h1, pairs)

    def children_backward(self, g_pool, g_new, ids, r0, n, pairs, acts, g_gh, g_h1):
        """The GRC cells of compositions r0..r0+n backward from their outputs' gradient g_new (n, D) into their
        children (ids[:, 1:3]): :meth:`Search.cell_backward` on this step's saved rows."""
        r1, d, buf = r0 + n, self.d, self.buf
        children = ids[:, 1:3].reshape(-1)
        pair = torch.index_select(self.pool, 0, children, out=pairs[r0:r1].view(2 * n, d)).view(n, 2 * d)
        h1 = buf["h1"][r0:r1]
        act = torch.ops.aten.gelu.out(h1, out=acts[r0:r1])
        keep = self.noise.keep[r0:r1] if self.p > 0 else None
        if keep is not None:
            act.mul_(keep)
        return self.cell_backward(g_pool, g_new, children, pair, h1, keep,
                                  *(buf[z][r0:r1] for z in ("mixed", "mean", "rstd", "gh")), g_gh[r0:r1], g_h1[r0:r1])

    def score_jacobian(self) -> torch.Tensor:
        """d score / d [left_ds; right_ds] (R, 2 d_s) of every scored pair, in score-pool order (the leaf pairs, then
        two per composition): the scorer MLP's input Jacobian at the pair's own hidden layer."""
        hp = torch.cat(([self.leaf_scorer[1]] if self.n_sc0 else []) + [self.buf["shp"]])  # (R, d_s)
        return _gelu_backward(self.sw2v.expand_as(hp), hp) @ self.sw1  # (R, 2 d_s)

    def mask_backward(self, g_roots: torch.Tensor, g_final: torch.Tensor):
        """The "mask" straight-through gradient (module docstring), steps in reverse order."""
        d, ds, off, buf, tau = self.d, self.ds, self.n_leaf, self.buf, self.tree.tau
        g_pool, g_spool, g_final, g_gh, g_h1, pairs, acts, g_gamma, g_beta = self.backward_buffers(g_roots, g_final)
        jac = self.score_jacobian()
        for n, r0, jj, sid, logp, soft, _, _, nodes in reversed(self.steps):
            r1, w1 = r0 + n, nodes.size(1) - 1
            ids = buf["ids"][r0:r1]  # (n, 4) left neighbour, children, right neighbour
            # 1. the weights' rows of the two pairs this step scored (their inputs got their gradients step by step)
            g_two = g_spool[self.n_sc0 + 2 * r0 : self.n_sc0 + 2 * r1].view(n, 2)
            g_two[:, 1].masked_fill_(buf["right_bad"][r0:r1], 0.0)
            self.score_backward(g_two.reshape(-1), buf["sin"][2 * r0 : 2 * r1], buf["shp"][2 * r0 : 2 * r1],
                                buf["sha"][2 * r0 : 2 * r1], inputs=False)
            # 2. the next state's gradient (the later steps' share of its nodes'), this state and the parent
            j = jj.view(n, 1)
            pos = torch.arange(w1, device=j.device)
            parent_ids = torch.arange(off + r0, off + r1, device=j.device)
            nxt = torch.where(pos < j, nodes[:, :-1], torch.where(pos == j, parent_ids[:, None], nodes[:, 1:]))
            g_next = take(g_pool, nxt)  # (n, W-1, D)
            h = take(self.pool, nodes)  # (n, W, D)
            parent = self.pool[off + r0 : off + r1]  # (n, D)
            # 3. the GRC cell into its children
            gg, gb, g_pair = self.children_backward(g_pool, g_pool[off + r0 : off + r1], ids, r0, n, pairs, acts,
                                                    g_gh, g_h1)
            g_gamma += gg
            g_beta += gb
            # 4. d sel (module docstring): with a_k - b_k summed over k >= m, minus b_m; then the Gumbel-softmax
            # and log-softmax backward into the pair scores
            b = torch.linalg.vecdot(g_next, h[:, 1:])  # (n, W-1) b_k
            a_b = torch.linalg.vecdot(g_next, h[:, :-1]).sub_(b)  # a_k - b_k
            reads = torch.bmm(h, g_pair.view(n, 2, d).transpose(1, 2))  # (n, W, 2): <h_k, g_L>, <h_k, g_R>
            g_sel = reads[:, :-1, 0] + reads[:, 1:, 1] + torch.linalg.vecdot(g_next, parent[:, None])
            g_sel -= a_b.flip(-1).cumsum(-1).flip(-1).add_(b)  # (n, W-1)
            y = soft.view(n, w1)
            g_key = y * (g_sel - (g_sel * y).sum(-1, keepdim=True)) / tau
            g_key.scatter_add_(-1, j, g_final[:n].view(n, 1))  # the row's score: the chosen log-probability
            g_ps = g_key - logp.view(n, w1).exp() * g_key.sum(-1, keepdim=True)  # (n, W-1)
            sid = sid.reshape(n, w1)
            g_spool.index_add_(0, sid.reshape(-1), g_ps.reshape(-1))
            # 5. ... and this step's share of each pair score into its nodes (first d_s features)
            g_in = g_ps[..., None] * take(jac, sid)  # (n, W-1, 2 d_s)
            g_at = F.pad(g_in[..., :ds], (0, 0, 0, 1))  # (n, W, d_s) as left child, plus ...
            g_at[:, 1:] += g_in[..., ds:]  # ... as right child
            g_pool[:, :ds].index_add_(0, nodes.reshape(-1), g_at.view(-1, ds))
        return self.input_and_weight_grads(g_pool, g_spool, g_final, g_gamma, g_beta, g_gh, acts, g_h1, pairs,
                                           leaf_inputs=False)


class FusedGreedyTree(FusedBeamTree):
    """The reference :class:`~rirlab.models.beam_tree.BeamTree` with beam 1 and straight-through selection (EGT-GRC)
    whose search runs as one autograd node (:class:`GreedySearch`); ``fused = False`` runs the reference."""

    search_class = GreedySearch

    def __init__(self, cell: GRC, scorer: Scorer, tau: float = 1.0, st_gradient: STGradient = "mask"):
        super().__init__(cell, scorer, 1)
        self.straight_through, self.tau, self.st_gradient = True, tau, checked_st_gradient(st_gradient)
