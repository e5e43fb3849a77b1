"""Dynamic halting (Recurrent Transformers paper Algorithm 1, 3, eq. 5-17) and the halting models."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from rirlab.models import registry
from rirlab.models.halting import DepthHalting
from rirlab.models.attention import Block
from rirlab.tasks.base import TaskInfo

D = 16


def build(name: str, kind: str = "classify", **kw):
    entry = registry.get(name)
    cfg = entry.config(**{"hidden_size": D, "num_heads": 2, "dropout": 0.0, **kw})
    return entry.build(cfg, TaskInfo(12, 5, kind))


def batch(lengths, seed=0, s=None):
    g = torch.Generator().manual_seed(seed)
    s = s or max(lengths)
    mask = torch.arange(s)[None, :] < torch.tensor(lengths)[:, None]  # (N, S)
    tokens = torch.randint(1, 12, (len(lengths), s), generator=g) * mask
    return {"tokens": tokens, "mask": mask}


class PositionWise(nn.Module):
    """A step that treats every position on its own, so each position's halting can be replayed alone."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(D, D)

    def forward(self, h, _s):
        return torch.tanh(self.lin(h))


def literal_algorithm_1(step, halt, h0, max_layers, thresh, transition, keep_crossing):
    """Algorithm 1 for ONE position, written as a loop (scalars, break on threshold). keep_crossing=False: the
    paper's code (the layer whose cumulative alpha reaches thresh is computed, then discarded)."""
    h, s, cum, remain, acc, depth = h0, h0, 0.0, 1.0, torch.zeros_like(h0), 0
    for _ in range(max_layers):
        if not cum < thresh:
            break
        h_new = step(h[None, None], None)[0, 0]
        x = torch.cat([h, h_new]) if transition else h
        a_hat = halt(x).item()
        alpha = a_hat * remain
        if not keep_crossing and cum + alpha >= thresh:
            break
        remain *= 1 - a_hat
        acc = acc + alpha * h
        cum += alpha
        h, depth = h_new, depth + 1
        s = (1 - cum) * h + acc
    return s, depth


@pytest.mark.parametrize("keep_crossing", [False, True])
@pytest.mark.parametrize("transition", [False, True])
def test_token_halting_matches_the_literal_algorithm_and_weights_sum_to_one(transition, keep_crossing):
    torch.manual_seed(0)
    step = PositionWise()
    halting = DepthHalting(D, max_layers=8, alpha_thresh=0.9, transition=transition, keep_crossing=keep_crossing)
    nn.init.normal_(halting.halt.w2.weight, std=3.0)  # halting probabilities that differ by position
    h0 = torch.randn(3, 7, D)
    mask = torch.arange(7)[None, :] < torch.tensor([7, 4, 2])[:, None]
    res = halting(step, h0, mask, keep_weights=True)
    w = res.weights  # (calls + 1, N, S)
    assert w.shape[1:] == (3, 7) and (w >= 0).all()
    torch.testing.assert_close(w.sum(0)[mask], torch.ones(int(mask.sum())))
    cum = w[:-1].cumsum(0)  # (calls, N, S): cumulative alpha over kept layers
    for n, t in mask.nonzero().tolist():
        d = int(res.depth[n, t])
        if keep_crossing:  # a position stops right after its cumulative alpha reaches thresh, and not before
            assert d == 8 or cum[d - 1, n, t] >= 0.9
            assert d == 1 or cum[d - 2, n, t] < 0.9
        else:  # the crossing layer is dropped: kept layers never reach thresh
            assert d == 0 or cum[d - 1, n, t] < 0.9
    assert len({int(x) for x in res.depth[mask]}) > 1, "positions should halt at different depths"
    with torch.no_grad():
        for n, t in mask.nonzero().tolist():
            s, d = literal_algorithm_1(step, halting.halt, h0[n, t], 8, 0.9, transition, keep_crossing)
            torch.testing.assert_close(res.states[n, t], s)
            assert int(res.depth[n, t]) == d


def constant_halting(p: float, **kw) -> DepthHalting:
    """A DepthHalting whose halting unit outputs alpha_hat = p everywhere."""
    halting = DepthHalting(D, **kw)
    for lin in (halting.halt.w1, halting.halt.w2):
        nn.init.zeros_(lin.weight)
        nn.init.zeros_(lin.bias)
    nn.init.constant_(halting.halt.w2.bias, float(torch.logit(torch.tensor(p))))
    return halting


@pytest.mark.parametrize("keep_crossing,act_from,depth,offset,act", [
    (False, 1, 2, 0.56, 0.6 * 1 + 0.24 * 2 + 0.16 * 2),  # the code: layer 3 crosses 0.9 and is dropped
    (True, 0, 3, 0.624, 0.24 * 1 + 0.096 * 2 + 0.064 * 3),  # rirlab before: kept, eq. 8 indexing
    (False, 0, 2, 0.56, 0.24 * 1 + 0.16 * 2),
])
def test_threshold_crossing_layer_and_act_indexing(keep_crossing, act_from, depth, offset, act):
    """alpha_hat = 0.6: alpha = 0.6, 0.24, 0.096 (cum 0.936 >= 0.9 at layer 3). H_l = H_0 + l."""
    halting = constant_halting(0.6, max_layers=10, alpha_thresh=0.9, keep_crossing=keep_crossing, act_from=act_from)
    h0 = torch.randn(1, 1, D)
    res = halting(lambda h, s: h + 1, h0, torch.ones(1, 1, dtype=torch.bool))
    assert int(res.depth) == depth
    torch.testing.assert_close(res.states, h0 + offset)
    assert res.act_loss.item() == pytest.approx(act, rel=1e-5)
    assert halting.stats(res)["mean_layers"] == depth  # kept layers


@pytest.mark.parametrize("global_halt", [False, True])
def test_depth_cap_stops_each_example_after_its_length_plus_offset(global_halt):
    halting = constant_halting(1e-6, max_layers=20, global_halt=global_halt, cap_offset=1)
    mask = torch.arange(6)[None, :] < torch.tensor([2, 5])[:, None]
    res = halting(lambda h, s: h + 1, torch.zeros(2, 6, D), mask)
    assert res.depth[:, 0].tolist() == [3, 6]  # length + 1 layers kept
    torch.testing.assert_close(res.states[:, 0, 0], torch.tensor([3.0, 6.0]), atol=1e-4, rtol=0)
    assert res.calls == 6  # the loop stops at the longest cap: no 7th block computed only to be dropped
    halting.cap_offset = None
    assert halting(lambda h, s: h + 1, torch.zeros(2, 6, D), mask).depth[:, 0].tolist() == [20, 20]


def test_global_halting_is_one_distribution_per_sequence():
    torch.manual_seed(0)
    block = Block(D, 2, 2 * D, 0.0, gate=True)
    halting = DepthHalting(D, max_layers=10, alpha_thresh=0.999, global_halt=True, transition=True)
    h0 = torch.randn(4, 9, D)
    mask = torch.arange(9)[None, :] < torch.tensor([9, 3, 6, 1])[:, None]
    res = halting(lambda h, s: block(h, mask), h0, mask, keep_weights=True)
    assert res.weights.shape[1:] == (4, 1)  # one halting probability per sequence and layer
    torch.testing.assert_close(res.weights.sum(0), torch.ones(4, 1))
    assert res.act_loss.item() == pytest.approx(
        ((torch.arange(res.calls + 1)[:, None, None] * res.weights)[:-1].sum(0)
         + res.weights[-1] * res.depth).mean().item(), rel=1e-5)


@pytest.mark.parametrize("name", ["ut", "gut"])
def test_early_exit_skips_block_calls_when_halting_at_once(name):
    model = build(name, max_layers=12).eval()
    nn.init.constant_(model.encoder.halting.halt.w2.bias, 30.0)  # alpha_hat = 1 at the first layer
    calls = []
    model.encoder.block.register_forward_hook(lambda *a: calls.append(1))
    b = batch([9, 4, 6])
    with torch.no_grad():
        out = model(b)
    assert len(calls) == 1 < 12
    # the one layer computed crosses alpha_thresh and is dropped (the paper's code): no layer kept, S = H_0
    assert out.stats["max_layers_used"] == 1.0 and out.stats["mean_layers"] == 0.0
    # "upper bound" (§7): same model without the break runs every layer and gives the same output
    model.encoder.halting.mode = "upper_bound"
    calls.clear()
    with torch.no_grad():
        out_ub = model(b)
    assert len(calls) == 12
    torch.testing.assert_close(out_ub.logits, out.logits)


def test_gut_gate_forced_to_zero_leaves_states_unchanged():
    torch.manual_seed(0)
    block = Block(D, 2, 2 * D, 0.0, gate=True)
    nn.init.zeros_(block.ff.g2.weight)
    nn.init.constant_(block.ff.g2.bias, -200.0)  # G = sigmoid(-200) = 0, eq. 10
    h = torch.randn(2, 5, D)
    mask = torch.ones(2, 5, dtype=torch.bool)
    out = block(h, mask)
    torch.testing.assert_close(out, h, rtol=0, atol=1e-6)
    nn.init.constant_(block.ff.g2.bias, 0.0)
    assert not torch.allclose(block(h, mask), h, atol=1e-3)  # the gate is what kept it


@pytest.mark.parametrize("name", ["transformer", "ut", "gut", "tlb", "gutlb"])
def test_causal_variant_does_not_leak(name):
    torch.manual_seed(0)
    kw = {"chunk_size": 4, "memory_slots": 3} if "tlb" in name else {}
    model = build(name, kind="lm", **kw).eval()
    b = batch([13, 13])
    b2 = {k: v.clone() for k, v in b.items()}
    b2["tokens"][:, 9] = (b2["tokens"][:, 9] % 11) + 1  # change token 9 only
    with torch.no_grad():
        y1, y2 = model(b).logits, model(b2).logits  # (N, S, C)
    torch.testing.assert_close(y1[:, :9], y2[:, :9])
    assert not torch.allclose(y1[:, 9:], y2[:, 9:])


@pytest.mark.parametrize("name", ["transformer", "ut", "gut", "tlb", "gutlb"])
def test_padding_does_not_change_a_sequence(name):
    """START/END are placed after each sequence's last real token; padded batch == sequence alone (TLB/GUTLB
    with fixed chunks of g; the paper's torch.chunk depends on the padded length, see the next test)."""
    torch.manual_seed(0)
    kw = {"chunk_size": 4, "memory_slots": 3, "chunking": "fixed"} if "tlb" in name else {}
    model = build(name, **kw).eval()
    b = batch([11, 5])
    alone = {"tokens": b["tokens"][1:, :5], "mask": b["mask"][1:, :5]}
    with torch.no_grad():
        both, one = model(b), model(alone)
    torch.testing.assert_close(both.logits[1:], one.logits, rtol=1e-4, atol=1e-5)
    assert "mean_layers" in both.stats or name in ("transformer", "tlb")


def test_halting_depth_histogram_accumulates_over_evaluation_passes():
    model = build("gut", max_layers=6)
    model.train()
    with torch.no_grad():
        model(batch([5, 3]))
    assert model.artifacts() == {}  # training passes are not counted
    model.eval()
    with torch.no_grad():
        model(batch([5, 3]))
        model(batch([4, 4, 2]))
    hist = model.artifacts()["halting_depth.json"]
    assert sum(hist["counts"]) == 5 and hist["unit"] == "sequence"
    assert len(hist["edges"]) == len(hist["counts"]) + 1


def test_raising_beta_lowers_mean_depth():
    """Short fixed-seed toy run: the ACT loss weight beta pulls the expected halting depth down."""

    def train(beta: float) -> float:
        torch.manual_seed(0)
        model = build("gut", max_layers=8)
        opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
        for i in range(40):
            b = batch([8] * 16, seed=i)
            b["labels"] = b["tokens"][:, 0] % 5  # toy: classify the first token
            out = model(b)
            loss = F.cross_entropy(out.logits, b["labels"]) + beta * out.aux_loss
            opt.zero_grad()
            loss.backward()
            opt.step()
        model.eval()
        with torch.no_grad():
            out = model(batch([8] * 64, seed=999))
        return out.stats["act_loss"], out.stats["mean_layers"]

    (e0, m0), (e1, m1) = train(0.0), train(1.0)
    print(f"beta=0: E[depth]={e0:.2f} layers={m0:.2f}; beta=1: E[depth]={e1:.2f} layers={m1:.2f}")
    assert e1 < e0 - 0.5, (e0, e1)
    assert m1 <= m0, (m0, m1)


def test_config_rejects_heads_that_do_not_divide_hidden_size():
    from rirlab.config import build as build_cfg
    from rirlab.errors import UserError

    with pytest.raises(UserError, match="num_heads"):
        build_cfg(registry.get("gut").config, {"hidden_size": 30, "num_heads": 8}, "spec")


@pytest.mark.parametrize("model,task", [("gut", "flipflop"), ("gutlb", "logic")])
def test_halting_models_train_through_the_trainer_and_log_depth(model, task):
    from rirlab.tasks import registry as tasks
    from rirlab.train import run_trial

    reports = []
    cfg = {"model": model, "task": task, **dict(tasks.get(task).quick), "hidden_size": D, "num_heads": 2,
           "steps": 4, "batch_size": 8, "log_every": 2, "eval_every": 100, "max_eval_examples": 16, "num_threads": 1}
    final = run_trial(cfg, lambda m, checkpoint=None: reports.append(m))
    assert {"train/mean_layers", "train/max_layers_used", "train/act_loss"} <= set(reports[0])
    # kept layers: 0 when the first layer already crosses alpha_thresh (the paper's code drops that layer)
    assert 0 <= reports[0]["train/mean_layers"] <= reports[0]["train/max_layers_used"] <= cfg.get("max_layers", 15)
    hist = final["artifact:halting_depth.json"]
    assert sum(hist["counts"]) > 0
    assert 0 <= final["dev/accuracy"] <= 100


def test_language_modelling_refuses_a_bidirectional_model():
    from rirlab.errors import UserError

    with pytest.raises(UserError, match="causal"):
        build("gut", kind="lm", causal=False)


def test_tlb_fixed_recurrence_uses_the_same_number_of_chunks_at_any_length():
    model = build("tlb", kind="lm", num_chunks=5, memory_slots=3).eval()
    calls = []
    model.encoder.update.register_forward_hook(lambda *a: calls.append(1))
    with torch.no_grad():
        for length in (20, 43):
            calls.clear()
            model(batch([length]))
            assert len(calls) == 5


@pytest.mark.parametrize("name", ["tlb", "gutlb"])
def test_tlb_chunking_torch_follows_the_padded_length_fixed_does_not(name):
    """Algorithm 2/4: k = ceil(len(H_0)/g), torch.chunk(H_0, k): padded length 25, g = 10 -> chunks 9, 9, 7."""
    sizes = []
    for chunking, want in (("torch", [9, 9, 7]), ("fixed", [10, 10, 5])):
        model = build(name, chunk_size=10, memory_slots=3, chunking=chunking).eval()
        model.encoder.update.register_forward_hook(lambda m, a, out: sizes.append(int(a[2][0].sum())))
        sizes.clear()
        with torch.no_grad():
            model(batch([25, 12]))
        assert sizes == want  # real tokens of sequence 0 in each chunk
    model = build(name, chunk_size=10, memory_slots=3).eval()  # torch chunking (default)
    b = batch([25, 12])
    alone = {"tokens": b["tokens"][1:, :12], "mask": b["mask"][1:, :12]}
    with torch.no_grad():
        assert not torch.allclose(model(b).logits[1:], model(alone).logits, atol=1e-4)  # chunks 9+3 vs 10+2


@pytest.mark.parametrize("name", ["tlb", "gutlb"])
def test_tlb_reads_out_the_mean_of_the_normalised_final_memory(name):
    model = build(name, chunk_size=4, memory_slots=3).eval()
    enc = model.encoder
    assert enc.update.ff[0].w1.out_features == D  # memory-update feed-forward d -> d -> d
    assert not hasattr(enc.readout, "start")  # no START/END tokens
    assert torch.count_nonzero(enc.memory0) == 0
    mems = []
    enc.update.register_forward_hook(lambda m, a, out: mems.append(out))
    b = batch([11, 5])
    with torch.no_grad():
        vec = enc(model.embed(b["tokens"]), b["mask"]).vec
    final = torch.stack([mems[2][0], mems[1][1]])  # sequence 0: 3 chunks of 4; sequence 1: 2 chunks
    torch.testing.assert_close(vec, enc.mem_norm(final).mean(1))
    tokens = build(name, chunk_size=4, memory_slots=3, readout="tokens").eval()
    assert hasattr(tokens.encoder.readout, "start")


def test_gutlb_act_loss_is_averaged_per_sequence_over_its_chunks():
    model = build("gutlb", chunk_size=4, memory_slots=3, chunking="fixed").eval()
    nn.init.zeros_(model.encoder.halting.halt.w2.weight)
    nn.init.constant_(model.encoder.halting.halt.w2.bias, float(torch.logit(torch.tensor(0.6))))
    nn.init.zeros_(model.encoder.halting.halt.w1.weight)
    # alpha 0.6, 0.24, then 0.096 crosses 0.999? no: cumulative 0.6, 0.84, 0.936, 0.9744, ... up to the cap
    b = batch([8, 2])  # sequence 0: chunks of 4 real tokens (cap 5 layers); sequence 1: one chunk of 2 (cap 3)
    with torch.no_grad():
        out = model(b)

    def act(k):  # L_ACT of one chunk that keeps k layers, act_index_from = 1
        alphas = [0.6 * 0.4 ** j for j in range(k)]
        return sum(a * (j + 1) for j, a in enumerate(alphas)) + (1 - sum(alphas)) * k

    assert out.aux_loss.item() == pytest.approx((act(5) + act(3)) / 2, rel=1e-4)  # not mean over 3 chunks
