"""The papers' training recipe: Ranger against a hand computation, recipe presets, the S4D lr group,
ReduceLROnPlateau + early stopping, best-dev selection, and an exact resume."""

from __future__ import annotations

import copy
import math

import pytest
import torch

from rirlab.config import TrainConfig, build
from rirlab.trial import resolve
from rirlab.errors import UserError
from rirlab.optim import Ranger, marked
from rirlab.train import Trainer, resumed_config, run_trial, selection_metric

TINY = {"task": "listops", "hidden_size": 16, "batch_size": 16, "n_train": 64, "n_dev": 32, "n_test": 32,
        "eval_splits": ["test"], "log_every": 1, "eval_every": 10**6, "num_threads": 1, "device": "cpu"}


# --- Ranger ---

def ranger_by_hand(x0: float, a: float, lr: float, wd: float, steps: int, k: int = 5, alpha: float = 0.8,
                   b1: float = 0.9, b2: float = 0.999, eps: float = 1e-8) -> list[float]:
    """Ranger on f(x) = a x^2 / 2 in plain floats, straight from RAdam Algorithm 2 and Lookahead Algorithm 1."""
    x, slow, m, v, out = x0, x0, 0.0, 0.0, []
    rho_inf = 2 / (1 - b2) - 1
    for t in range(1, steps + 1):
        g = a * x
        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * g * g
        x = x * (1 - lr * wd)
        rho = rho_inf - 2 * t * b2**t / (1 - b2**t)
        if rho > 5:
            r = math.sqrt((rho - 4) * (rho - 2) * rho_inf / ((rho_inf - 4) * (rho_inf - 2) * rho))
            x -= lr * r * (m / (1 - b1**t)) / (math.sqrt(v) / math.sqrt(1 - b2**t) + eps / math.sqrt(1 - b2**t))
        else:
            x -= lr * m / (1 - b1**t)
        if t % k == 0:
            slow = slow + alpha * (x - slow)
            x = slow
        out.append(x)
    return out


def ranger_steps(x0: float, a: float, lr: float, wd: float, steps: int, **kw) -> list[float]:
    p = torch.nn.Parameter(torch.tensor([x0], dtype=torch.float64))
    opt = Ranger([p], lr=lr, weight_decay=wd, **kw)
    out = []
    for _ in range(steps):
        opt.zero_grad()
        (0.5 * a * p**2).sum().backward()
        opt.step()
        out.append(p.item())
    return out


def test_ranger_matches_a_hand_computation_on_a_quadratic():
    x0, a, lr, wd = 2.0, 3.0, 0.1, 0.01
    got, want = ranger_steps(x0, a, lr, wd, 12), ranger_by_hand(x0, a, lr, wd, 12)
    assert got == pytest.approx(want, rel=1e-12, abs=1e-12)
    # step 1 is bias-corrected momentum SGD (rho_1 = 1 <= 5): x1 = x0 (1 - lr wd) - lr g0
    assert got[0] == pytest.approx(x0 * (1 - lr * wd) - lr * a * x0, rel=1e-12)
    # rectification starts at step 6 (rho_5 < 5 < rho_6 for beta2 = 0.999)
    assert Ranger.rectification(5, 0.999)[0] < 5 < Ranger.rectification(6, 0.999)[0]
    # without Lookahead (k huge) step 5 lands elsewhere: the sync at step 5 is really applied
    assert ranger_steps(x0, a, lr, wd, 5, k=10**6)[-1] != pytest.approx(got[4], rel=1e-6)


def test_the_paper_recipe_steps_ranger_with_the_authors_eps():
    """The authors' Ranger has eps 1e-8 (their agents pass none); rirlab had 1e-5 until 2026-12-06. Where the
    gradients are about 1e-6 (late in training) the two differ by about 10x in step length."""
    base = {"model": "rir_grc", **TINY, "recipe": "paper"}
    assert Trainer(resolve(base)).opt.defaults["eps"] == 1e-8
    assert Trainer(resolve({**base, "ranger_eps": 1e-5})).opt.defaults["eps"] == 1e-5
    x0, a = 1e-6, 1.0  # gradient a * x = 1e-6
    got = ranger_steps(x0, a, 1e-8, 0.0, 8)
    assert got == pytest.approx(ranger_by_hand(x0, a, 1e-8, 0.0, 8, eps=1e-8), rel=1e-12, abs=1e-20)
    moved = {eps: x0 - ranger_by_hand(x0, a, 1e-8, 0.0, 8, eps=eps)[-2] for eps in (1e-8, 1e-5)}
    assert moved[1e-8] > 5 * moved[1e-5] > 0


def test_ranger_without_lookahead_is_torch_radam_with_decoupled_weight_decay():
    torch.manual_seed(0)
    w0 = torch.randn(3, 4, dtype=torch.float64)
    runs = []
    for make in (lambda p: Ranger([p], lr=0.01, weight_decay=0.1, alpha=1.0, eps=1e-12),
                 lambda p: torch.optim.RAdam([p], lr=0.01, weight_decay=0.1, decoupled_weight_decay=True,
                                             eps=1e-12)):
        p = torch.nn.Parameter(w0.clone())
        opt = make(p)
        for i in range(10):
            opt.zero_grad()
            ((p - i) ** 2).sum().backward()
            opt.step()
        runs.append(p.detach())
    torch.testing.assert_close(runs[0], runs[1], rtol=1e-9, atol=1e-9)


# --- presets ---

def test_recipe_presets_fill_unset_fields_and_explicit_values_win():
    adamw, paper = TrainConfig(), TrainConfig(recipe="paper")
    assert (adamw.optimizer, adamw.scheduler, adamw.grad_clip, adamw.bucket_factor, adamw.select_by) == \
        ("adamw", "schedule", 5.0, 1, "last")
    assert (paper.optimizer, paper.scheduler, paper.grad_clip, paper.bucket_factor, paper.early_stop_patience,
            paper.select_by, paper.s4d_lr_cap) == ("ranger", "plateau", 1.0, 5, 4, "auto", 1e-3)
    mixed = TrainConfig(recipe="paper", optimizer="adamw", early_stop_patience=10)
    assert (mixed.optimizer, mixed.early_stop_patience, mixed.scheduler) == ("adamw", 10, "plateau")
    flat = resolve({"model": "rir_grc", **TINY, "recipe": "paper"}).flat()
    assert flat["optimizer"] == "ranger" and resolve(flat).flat() == flat  # filled values survive a re-resolve
    with pytest.raises(UserError, match="scheduler=plateau .* lr_decay='cosine'"):
        build(TrainConfig, {"recipe": "paper", "lr_decay": "cosine"}, "x")
    with pytest.raises(UserError, match="select_by"):
        build(TrainConfig, {"select_by": "best"}, "x")


def test_auto_selection_follows_the_papers_code():
    assert selection_metric("rir_ebt_grc", "auto") == selection_metric("rir_grc", "auto") == "accuracy"
    assert selection_metric("ebt_grc", "auto") == selection_metric("bbt_grc", "auto") == "loss"
    assert selection_metric("s4d", "auto") == "accuracy" and selection_metric("rir_om", "auto") == "loss"
    assert selection_metric("rir_grc", "loss") == "loss"


def test_s4d_parameters_get_their_own_group_with_capped_lr():
    base = {"model": "rir_ebt_grc", **TINY, "chunk_size": 6, "d_s": 8}
    trainer = Trainer(resolve({**base, "recipe": "paper", "lr": 3e-3, "s4d_weight_decay": 0.0}))
    s4d, rest = trainer.opt.param_groups
    assert isinstance(trainer.opt, Ranger) and (s4d["lr"], rest["lr"]) == (1e-3, 3e-3)
    assert (s4d["weight_decay"], rest["weight_decay"]) == (0.0, 1e-2)
    names = {n for n, p in trainer.model.named_parameters() if any(p is q for q in s4d["params"])}
    assert names and all(n.rsplit(".", 1)[-1] in ("log_dt", "b", "c", "log_a_real", "a_imag", "d") for n in names)
    assert len(s4d["params"]) + len(rest["params"]) == len(list(trainer.model.parameters()))
    plain = Trainer(resolve({**base, "lr": 3e-3}))
    assert len(plain.opt.param_groups) == 1 and isinstance(plain.opt, torch.optim.AdamW)
    assert marked(Trainer(resolve({**base, "s4d": False})).model, "s4d") == []


# --- plateau, early stopping, selection, resume ---

def test_plateau_halves_the_lr_and_early_stopping_ends_the_trial():
    cfg = {"model": "rir_grc", **TINY, "recipe": "paper", "lr": 1e-6, "epochs": 10, "plateau_patience": 0,
           "early_stop_patience": 1}  # lr ~0: dev never improves after epoch 1
    reports = []
    final = run_trial(cfg, lambda m, checkpoint=None: reports.append(m))
    assert final["early_stopped"] == 1 and final["stopped_epoch"] == 3 and final["step"] == 12
    assert final["best/epoch"] == 1 and final["best/step"] == 4
    lrs = {r["epoch"]: r["lr"] for r in reports if "dev/accuracy" in r or r.get("final")}
    assert lrs == pytest.approx({1.0: 1e-6, 2.0: 0.5e-6, 3.0: 0.25e-6})


def test_every_split_is_evaluated_with_the_best_dev_weights():
    # lr 1.0 overshoots after the first epoch (dev loss 2.31, then 2.36-2.44): the best epoch is well before the last,
    # by a margin numerics cannot flip (at lr 0.05 the last epochs tied to 1e-3 and a rounding change decided)
    cfg = {"model": "rir_grc", **TINY, "recipe": "paper", "select_by": "loss", "lr": 1.0, "epochs": 4,
           "early_stop_patience": 0}
    reports, ckpts = [], []
    final = run_trial(cfg, lambda m, checkpoint=None: (reports.append(m), ckpts.append(checkpoint)),
                      checkpoint_every=10**9)
    epoch_dev = [r["dev/loss"] for r in reports if "dev/loss" in r]
    assert final["best/step"] < final["step"]  # the last epoch was not the best: selection matters here
    assert final["best/dev_loss"] == min(epoch_dev)
    assert final["dev/loss"] == pytest.approx(final["best/dev_loss"], rel=1e-6)  # re-evaluated with best weights
    last = Trainer(resolve(cfg))
    last.model.load_state_dict(ckpts[-1]["model"])  # the last step's weights score differently on dev
    assert last.evaluate(last.dev_split())["loss"] != pytest.approx(final["dev/loss"], rel=1e-6)


def test_the_last_dev_evaluation_of_training_is_recorded_beside_the_final_one():
    """The dev evaluation at a trial's last step (the last weights, the one that ended an early-stopped trial) is in
    the final result as ``last/dev_*``: the final ``dev/*`` is the tested (best-dev) weights' and takes that step's
    place in the history, so without it the record loses the epoch that stopped the trial."""
    cfg = {"model": "rir_grc", **TINY, "recipe": "paper", "select_by": "loss", "lr": 1.0, "epochs": 4,
           "early_stop_patience": 0}  # as above: the best epoch is well before the last
    reports, ckpts = [], []
    final = run_trial(cfg, lambda m, checkpoint=None: (reports.append(m), ckpts.append(checkpoint)),
                      checkpoint_every=10**9)
    assert final["best/step"] < final["step"]
    last = Trainer(resolve(cfg))
    last.model.load_state_dict(ckpts[-1]["model"])
    dev = last.evaluate(last.dev_split())
    assert final["last/dev_loss"] == pytest.approx(dev["loss"], rel=1e-9)
    assert final["last/dev_accuracy"] == pytest.approx(dev["accuracy"], rel=1e-9)
    assert final["last/dev_loss"] != pytest.approx(final["dev/loss"], rel=1e-6)
    assert not any(k.startswith("last/") for r in reports[:-1] for k in r)  # the final result's alone


def test_resume_restores_best_weights_plateau_early_stop_counters_and_lookahead_exactly():
    cfg = {"model": "rir_grc", **TINY, "recipe": "paper", "lr": 0.05, "epochs": 4, "plateau_patience": 0,
           "early_stop_patience": 10}
    saved = {}

    def keep(metrics, checkpoint=None):
        if checkpoint is not None:
            saved[metrics["step"]] = copy.deepcopy(checkpoint)  # the trainable serialises it at once

    reference = run_trial(cfg, keep, checkpoint_every=7)  # step 7: mid-epoch 2, between Lookahead syncs
    mid = saved[7]
    assert mid["best_weights"] is not None and mid["opt"]["state"][0]["step"] == 7
    resumed_ckpts = {}
    resumed = run_trial(cfg, lambda m, checkpoint=None: resumed_ckpts.update({m["step"]: copy.deepcopy(checkpoint)}),
                        state=mid, checkpoint_every=7)
    keys = [k for k in reference if k.startswith(("dev/", "test/", "best/")) or k in ("step", "lr", "stopped_epoch")]
    assert {k: resumed[k] for k in keys} == {k: reference[k] for k in keys}
    a, b = saved[16], resumed_ckpts[16]
    for name in a["model"]:
        torch.testing.assert_close(a["model"][name], b["model"][name], rtol=0, atol=0)
    for i, st in a["opt"]["state"].items():
        torch.testing.assert_close(st["slow"], b["opt"]["state"][i]["slow"], rtol=0, atol=0)
    assert a["sched"] == b["sched"] and a["bad_epochs"] == b["bad_epochs"]


def test_a_resume_keeps_the_training_settings_its_checkpoint_was_trained_with(caplog):
    """A checkpoint of an earlier rirlab (Ranger's eps 1e-5 before 2026-12-06) resumed by this one: the run goes on
    with the checkpoint's eps, as its params recorded it, not half under each; runtime keys follow this run."""
    cfg = {"model": "rir_grc", **TINY, "recipe": "paper", "steps": 4}
    saved = {}
    run_trial(cfg, lambda m, checkpoint=None: checkpoint and saved.update({m["step"]: copy.deepcopy(checkpoint)}),
              checkpoint_every=2)
    assert resumed_config(cfg, saved[2]).flat() == resolve(cfg).flat()  # the same rirlab: nothing kept
    earlier = {**saved[2], "config": {**saved[2]["config"], "ranger_eps": 1e-5, "num_threads": 3, "gone": 1}}
    with caplog.at_level("WARNING"):
        cfg_resumed = resumed_config(cfg, earlier)
    assert cfg_resumed.train.ranger_eps == 1e-5 and cfg_resumed.flat()["num_threads"] == 1
    assert "ranger_eps=1e-05" in caplog.text and "ranger_eps=1e-08" in caplog.text and "num_threads" not in caplog.text
    resumed = {}
    run_trial(cfg, lambda m, checkpoint=None: checkpoint and resumed.update({m["step"]: checkpoint}), state=earlier,
              checkpoint_every=2)
    assert resumed[4]["config"]["ranger_eps"] == 1e-5  # what the trainer ran with, in its next checkpoint
    # a checkpoint from before batch_order existed shuffled all of an epoch's batches together: it goes on so
    before = {**saved[2], "config": {k: v for k, v in saved[2]["config"].items() if k != "batch_order"}}
    assert resolve(cfg).train.batch_order == "pools" and resumed_config(cfg, before).train.batch_order == "shuffled"


def test_bf16_precision_runs_the_forward_under_autocast_with_a_finite_fp32_loss():
    """precision: bf16 changes what the forward computes (bfloat16 matmuls) but the loss stays finite; fp32 does not
    round. The same seed and data under both: equal would mean the switch never reached the forward."""
    cfg = {"model": "rir_ebt_grc", **TINY, "steps": 3, "chunk_size": 5, "beam_size": 2, "d_s": 8}
    fp32 = run_trial({**cfg, "precision": "fp32"})
    bf16 = run_trial({**cfg, "precision": "bf16"})
    assert math.isfinite(bf16["train/loss"]) and math.isfinite(bf16["test/loss"])
    assert bf16["train/loss"] != fp32["train/loss"]
    assert run_trial({**cfg, "precision": "fp32"})["train/loss"] == fp32["train/loss"]  # deterministic otherwise


def test_ranger_steps_many_parameters_as_each_alone_in_launches_that_do_not_grow_with_them():
    """The multi-tensor step equals stepping each parameter with its own Ranger, bit for bit, through Lookahead
    syncs and weight decay, also when a parameter misses gradients on some steps (its step count lags: it is
    updated with its own t); and it dispatches as many ops for 30 parameters as for 3 (one launch per op on a GPU)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    torch.manual_seed(0)
    params = [torch.nn.Parameter(torch.randn(4, 3)) for _ in range(3)]
    alone = [torch.nn.Parameter(p.detach().clone()) for p in params]
    joint = Ranger(params, lr=0.01, weight_decay=0.1)
    single = [Ranger([p], lr=0.01, weight_decay=0.1) for p in alone]
    for step in range(1, 13):
        for i, (p, q) in enumerate(zip(params, alone)):
            if i == 2 and step % 3 == 0:  # no gradient this step
                p.grad = q.grad = None
                continue
            g = torch.randn(4, 3)
            p.grad, q.grad = g.clone(), g.clone()
        joint.step()
        for opt, q in zip(single, alone):
            if q.grad is not None:
                opt.step()
    assert all(torch.equal(p, q) for p, q in zip(params, alone))
    assert joint.state[params[2]]["step"] == 8 and joint.state[params[0]]["step"] == 12

    class Count(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.n = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.n += 1
            return func(*args, **(kwargs or {}))

    def ops(n_params: int) -> int:
        ps = [torch.nn.Parameter(torch.randn(5)) for _ in range(n_params)]
        opt = Ranger(ps, weight_decay=0.1, k=1)  # k 1: Lookahead on every step
        for p in ps:
            p.grad = torch.ones(5)
        opt.step()  # the first step creates the state
        with Count() as c:
            opt.step()
        return c.n

    assert ops(30) == ops(3) <= 12


def test_dev_inference_selects_by_rir_inference_and_tests_under_non_rir():
    """``dev_inference: rir`` (the authors' code run with its argparser default for training, then tested with
    ``--chunk_mode_inference False``): every dev evaluation during training runs RIR inference, the final splits
    the model's own ``inference``. Each epoch's dev figures equal those of the epoch's weights evaluated under RIR
    inference, not under non-RIR inference; the final dev is non-RIR's."""
    cfg = {"model": "rir_ebt_grc", **TINY, "chunk_size": 4, "beam_size": 2, "d_s": 8, "recipe": "paper",
           "epochs": 2, "early_stop_patience": 10, "eval_alignment": "string_it",  # deterministic RIR eval
           "inference": "non_rir", "dev_inference": "rir"}
    reports, ckpts = [], []
    final = run_trial(cfg, lambda m, checkpoint=None: (reports.append(m), ckpts.append(checkpoint)),
                      checkpoint_every=4)  # 4 steps an epoch: a checkpoint at each epoch end
    first = next(r for r in reports if "dev/loss" in r)  # epoch 1's dev, reported with its step's checkpoint
    weights = ckpts[reports.index(first)]["model"]
    by_mode = {}
    for mode in ("rir", "non_rir"):
        t = Trainer(resolve({**cfg, "inference": mode, "dev_inference": None}))
        t.model.load_state_dict(weights)
        by_mode[mode] = t.evaluate(t.dev_split())["loss"]
    assert by_mode["rir"] != pytest.approx(by_mode["non_rir"], rel=1e-6)  # the two modes differ on this model
    assert first["dev/loss"] == pytest.approx(by_mode["rir"], rel=1e-9)
    t = Trainer(resolve(cfg))  # the trained trial's final dev is under its own inference, non-RIR
    t.model.load_state_dict(weights if final["best/step"] == first["step"] else ckpts[-1]["model"])
    assert final["dev/loss"] == pytest.approx(t.evaluate(t.dev_split())["loss"], rel=1e-6)
    t = Trainer(resolve({**cfg, "inference": "rir", "dev_inference": None}))  # the stopping epoch's, under RIR
    t.model.load_state_dict(ckpts[-1]["model"])
    assert final["last/dev_loss"] == pytest.approx(t.evaluate(t.dev_split())["loss"], rel=1e-9)
