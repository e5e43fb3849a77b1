"""sweeps/driver/checkpoints.py: a restored trial's checkpoint that Tune deleted for a newer one before saving its
state again is put back from that newer one (the e2e case: tests/e2e/test_sweep_engine_runs.py, killed driver)."""

from __future__ import annotations

from rirlab import contract
from rirlab.sweeps.driver.checkpoints import restore_named_checkpoint


def _checkpoint(folder, k, state=b"weights"):
    d = folder / f"checkpoint_{k:06d}"
    d.mkdir(parents=True)
    if state is not None:
        (d / contract.CHECKPOINT_STATE_FILE).write_bytes(state)
    return d


def test_the_newest_complete_newer_checkpoint_takes_the_named_ones_place(tmp_path):
    _checkpoint(tmp_path, 3, b"three")
    _checkpoint(tmp_path, 4, b"four")
    _checkpoint(tmp_path, 5, state=None)  # being written when the machine died: not complete
    named = tmp_path / "checkpoint_000002"
    assert restore_named_checkpoint(named) == tmp_path / "checkpoint_000004"
    assert (named / contract.CHECKPOINT_STATE_FILE).read_bytes() == b"four"
    assert not (tmp_path / "checkpoint_000004").exists()
    assert (tmp_path / "checkpoint_000003").exists()


def test_a_named_checkpoint_that_exists_or_has_nothing_newer_is_left_alone(tmp_path):
    _checkpoint(tmp_path, 2, b"two")
    _checkpoint(tmp_path, 3, b"three")
    assert restore_named_checkpoint(tmp_path / "checkpoint_000002") is None  # present: Tune restores it
    assert (tmp_path / "checkpoint_000002" / contract.CHECKPOINT_STATE_FILE).read_bytes() == b"two"
    assert restore_named_checkpoint(tmp_path / "checkpoint_000007") is None  # deleted, only older ones: not ours
    assert not (tmp_path / "checkpoint_000007").exists()
    assert restore_named_checkpoint(tmp_path / "elsewhere" / "checkpoint_000001") is None
    assert restore_named_checkpoint(tmp_path / "notes") is None


def test_a_named_checkpoint_gone_with_nothing_newer_is_recreated_empty_so_the_trial_reports_it_damaged(tmp_path):
    from rirlab.sweeps.driver.checkpoints import recreate_missing_checkpoint

    (tmp_path / "checkpoint_000001").mkdir()
    assert recreate_missing_checkpoint(tmp_path / "checkpoint_000003")
    assert (tmp_path / "checkpoint_000003").is_dir() and not any((tmp_path / "checkpoint_000003").iterdir())
    assert not recreate_missing_checkpoint(tmp_path / "checkpoint_000001")  # present: left as it is
    assert not recreate_missing_checkpoint(tmp_path / "params.json")  # not a checkpoint folder
    assert not recreate_missing_checkpoint(tmp_path / "gone" / "checkpoint_000001")  # no trial folder
    assert not (tmp_path / "params.json").exists() and not (tmp_path / "gone").exists()
