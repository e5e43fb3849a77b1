"""Everything of Optuna (and of Ray's Optuna glue, for sweeps recorded before) that is not its public API, in one
place, with the versions it was checked on.

The searcher (``rirlab.sweeps.tune.optuna.OptunaSearcher``) drives Optuna through its public ask/tell API. What remains:

- ``trial_of``: after a --resume, the Optuna trial of a configuration still running is needed again (its pruner
  judges its reports, its runs are linked to it). ``Study.ask`` only creates trials; the way back from a trial's
  number is the storage API (public, for storage implementers) plus ``optuna.trial.Trial(study, trial_id)``, a
  documented constructor that Optuna says is not meant to be called directly.
- The legacy classes: a sweep recorded before the ask/tell searcher saved Ray's ``OptunaSearch`` under a
  ``Repeater`` (pickled in Tune's ``tuner.pkl`` by class name, ``rirlab.sweeps.tune.optuna.OptunaSearchEvalOnly`` /
  ``SeedRepeater`` / ``PerSeedGenerator``), and its searcher state as Ray's private attributes (``_ot_trials``,
  ``_completed_trials``, ``_trial_id_to_group``, ``_groups``; ``_total_samples`` of Ray's SearchGenerator). The
  classes below keep those names importable and turn what they unpickle into the new searcher, so that such a
  sweep still resumes (tests/sweeps/test_optuna_searcher.py restores one recorded by the old code).

``check()`` raises one line when the installed Optuna is outside ``SUPPORTED``.
"""

from __future__ import annotations

from typing import Optional

from rirlab.compat import Supported

# trial_of and the legacy unpickling were run on 5.1.0; 3.5 is the oldest rirlab has claimed (setup.cfg)
SUPPORTED = Supported("optuna", lowest="3.5", below="5.2")

# (module, attribute[, keywords passed]) of every non-public name used below, looked up by tests/train/test_compat.py
PRIVATE = (
    ("optuna.trial", "Trial"),  # constructed directly (documented as not meant to be)
    ("ray.tune.search.search_generator", "SearchGenerator"),  # its _total_samples (old sweeps only)
)


def check() -> None:
    """Raise one line (UnsupportedVersion) when the installed Optuna is outside ``SUPPORTED``: an upgrade may have
    changed what ``trial_of`` and the legacy state rely on."""
    SUPPORTED.check()


def trial_of(study, storage, number: int):
    """The ``optuna.trial.Trial`` of trial ``number`` of ``study`` (kept in ``storage``), to report to / ask the
    pruner about / set attributes on, as ``Study.ask`` returned it before a --resume."""
    import optuna

    study_id = storage.get_study_id_from_name(study.study_name)
    return optuna.trial.Trial(study, storage.get_trial_id_from_study_id_trial_number(study_id, number))


# ---- sweeps recorded before the ask/tell searcher (Ray's OptunaSearch under a Repeater). The classes that unpickle
# them keep their old names in rirlab.sweeps.tune.optuna (pickles name them there); what they read of Ray's state is here.

def _listed(value) -> list:
    return list(value) if isinstance(value, (list, tuple)) else [value]


def is_legacy_state(state) -> bool:
    """Whether a searcher-state file was written by Ray's OptunaSearch (the code before the ask/tell searcher)."""
    return isinstance(state, dict) and "_ot_trials" in state


def legacy_settings(state: dict) -> dict:
    """The new searcher's settings from the ``__dict__`` of Ray's OptunaSearch (as tuner.pkl or its searcher-state
    file holds it): metrics, modes, study name, storage URL, sampler, pruner and the Optuna distributions."""
    import optuna

    return {"metrics": _listed(state["_metric"]), "modes": _listed(state["_mode"]), "study_name": state["_study_name"],
            "storage": getattr(state.get("_storage"), "url", None), "sampler": state.get("_sampler"),
            "pruner": state.get("pruner") or optuna.pruners.NopPruner(), "space": dict(state.get("_space") or {})}


def legacy_groups(repeater_state: Optional[dict], optuna_state: dict) -> list[dict]:
    """The new searcher's seed groups (``OptunaSearcher`` group dicts) from Ray's Repeater state (which Tune trial
    ids repeat which suggestion, their seeds' scores) and OptunaSearch state (the Optuna trial of each group's first
    trial; which groups Optuna was told)."""
    ot_trials, told = optuna_state.get("_ot_trials", {}), set(optuna_state.get("_completed_trials", ()))
    if repeater_state is None:  # no Repeater state saved: each known trial is a group of its own
        return [{"number": t.number, "params": dict(t.params), "trials": [tid], "scores": {}, "told": tid in told}
                for tid, t in ot_trials.items()]
    members: dict[int, list[str]] = {}
    for tid, group in repeater_state.get("_trial_id_to_group", {}).items():  # (insertion order: the seed index)
        members.setdefault(id(group), []).append(tid)
    groups = []
    for group in repeater_state.get("_groups", []):
        ot_trial = ot_trials.get(group.primary_trial_id)
        if ot_trial is None:
            continue
        ids = members.get(id(group), [group.primary_trial_id])
        scores = {tid: [float(v) for v in _listed(score)] for tid, score in zip(ids, group.scores()) if score is not None}
        groups.append({"number": ot_trial.number, "params": dict(group.config), "trials": ids, "scores": scores,
                       "told": group.primary_trial_id in told})
    return groups


def scale_total_samples(generator, factor: int) -> None:
    """Ray's SearchGenerator counts Tune's num_samples; the old sweeps passed Tune the number of configurations and
    ran each once per seed (``PerSeedGenerator``): their total is ``factor`` times it. New sweeps pass Tune
    configurations x seeds instead (``Algorithm.tune_num_samples``) and need none of this."""
    generator._total_samples *= factor
