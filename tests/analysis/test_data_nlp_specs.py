"""The specs of RIR Tables 4, 6, 7 and EBT Tables 3-4 and their published numbers (analysis/references/rir_nlp.yaml,
ebt_nlp.yaml): every published row the specs can build finds a row of ours, reference columns are our split
names, every spec validates (a quick sweep of a sentence-pair spec end to end: tests/e2e/test_nlp_sweep.py)."""

from __future__ import annotations

import pytest

from rirlab.analysis import references as refs
from rirlab.tasks import registry as tasks
from rirlab.sweeps.spec.load import load_spec
from rirlab.sweeps.spec.trials import expand
from tests.helpers.cli import REPO, invoke
from tests.helpers.nlp_specs import SPECS, TABLE_SPECS, spec_path


def test_every_reference_table_has_specs():
    assert {f"{base}:{t.id}" for base in ("rir_nlp", "ebt_nlp") for t in refs.load(base)} == set(TABLE_SPECS)


@pytest.mark.parametrize("table_ref", sorted(TABLE_SPECS))
def test_every_published_row_finds_a_row_of_ours(table_ref):
    """Pairing by configuration (rirlab.analysis.references.pair) over each spec's resolved trial configs: every
    published row the specs can build is run by one of our rows, and each of our rows gets its own."""
    from rirlab.trial import resolve

    (table,) = refs.load(table_ref)
    covered = set()
    for name in TABLE_SPECS[table_ref]:
        spec = load_spec(spec_path(name)).spec
        assert spec.task == table.task
        configs = [resolve(t.config).flat() for t in expand(spec) if t.swept["seed"] == spec.seed_list[0]]
        pairing = refs.pair([table], configs)
        assert not pairing.shared, [(r.name, ix) for r, ix in pairing.shared]
        covered |= {r.name for r in pairing.paper.values()}
    want = [r.name for r in table.rows if r.model]
    assert [n for n in want if n not in covered] == [], (table_ref, sorted(covered))


@pytest.mark.parametrize("name", SPECS)
def test_spec_validates_and_rows_carry_the_reference_config(name):
    spec = load_spec(spec_path(name)).spec
    trials = expand(spec)
    assert len(trials) == len(spec.variants) * 3
    configs = {t["swept"]["variant"]: t["config"] for t in trials}
    table_refs = [r for r, specs in TABLE_SPECS.items() if name in specs]
    for table_ref in table_refs:
        (table,) = refs.load(table_ref)
        raw = {r["name"]: r for r in __import__("yaml").safe_load(
            (REPO / "analysis/references" / f"{table_ref.split(':')[0]}.yaml").read_text())["tables"][table.id]["rows"]}
        for row in table.rows:
            if row.name in configs:
                cfg = configs[row.name]
                assert cfg["model"] == row.model
                assert all(cfg.get(k) == v for k, v in raw[row.name]["config"].items()), (row.name, cfg)
        ours = {s for s, _ in tasks.get(spec.task).splits}
        assert set(table.columns) <= ours and set(table.columns) <= set(trials[0]["config"]["eval_splits"])


@pytest.mark.parametrize("name", SPECS)
def test_quick_profile_runs_on_stand_in_data_and_keeps_a_published_row(name):
    from rirlab.trial import resolve

    spec = load_spec(spec_path(name), quick=True).spec
    if spec.task != "logic":
        assert spec.fixed["generated"] is True
    tables = [t for r, specs in TABLE_SPECS.items() if name in specs for t in refs.load(r)]
    configs = [resolve(t.config).flat() for t in expand(spec)]
    assert refs.pair(tables, configs).paper


def test_a_spec_dry_runs_through_the_cli(workdir):
    r = invoke("sweep", spec_path("rir_table7_mnli"), "--dry-run")  # in-process: the command's own output
    assert r.exit_code == 0, r.output
    assert "RIR-EBT-GRC" in r.stdout
