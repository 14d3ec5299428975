"""Resuming after a job was stopped mid-save: NeMo's AutoResume refuses, the recipes' RecipeResume takes the newest
finished checkpoint (or starts afresh when none is finished). Real NeMo classes on real checkpoint directories."""

from __future__ import annotations

import pytest
from nemo import lightning as nl
from nemo.lightning.pytorch.callbacks.model_checkpoint import ModelCheckpoint

from nemo_recipes.training.resume import RecipeResume, newest_finished


def _checkpoint(directory, name, *, finished=True):
    path = directory / name
    (path / "weights").mkdir(parents=True)
    if not finished:
        ModelCheckpoint.format_checkpoint_unfinished_marker_path(path).touch()
    return path


def _resumes(cls, directory):
    return cls(
        resume_if_exists=True, resume_ignore_no_checkpoint=True, resume_from_directory=str(directory)
    )._find_trainer_ckpt_path()


def test_a_save_cut_short_resumes_from_the_newest_finished_checkpoint(tmp_path):
    # Lightning keeps one "-last" checkpoint: the one being written when the node went away.
    older = _checkpoint(tmp_path, "m--step=4-consumed_samples=20.0")
    _checkpoint(tmp_path, "m--step=2-consumed_samples=10.0")
    _checkpoint(tmp_path, "m--step=9-consumed_samples=40.0-last", finished=False)
    with pytest.raises(ValueError, match="Last checkpoint is unfinished"):
        _resumes(nl.AutoResume, tmp_path)
    assert _resumes(RecipeResume, tmp_path) == older


def test_a_job_stopped_before_its_first_save_finished_starts_afresh(tmp_path):
    _checkpoint(tmp_path, "m--step=4-consumed_samples=20.0-last", finished=False)
    with pytest.raises(ValueError, match="unfinished"):
        _resumes(nl.AutoResume, tmp_path)
    assert _resumes(RecipeResume, tmp_path) is None
    strict = RecipeResume(resume_if_exists=True, resume_ignore_no_checkpoint=False, resume_from_directory=str(tmp_path))
    with pytest.raises(ValueError, match="no finished checkpoint is left"):
        strict._find_trainer_ckpt_path()


def test_finished_last_checkpoints_resume_as_nemo_does(tmp_path):
    last = _checkpoint(tmp_path, "m--step=9-consumed_samples=40.0-last")
    _checkpoint(tmp_path, "m--step=4-consumed_samples=20.0")
    assert _resumes(RecipeResume, tmp_path) == _resumes(nl.AutoResume, tmp_path) == last


def test_newest_finished_orders_by_global_step_not_by_name(tmp_path):
    _checkpoint(tmp_path, "m--step=9-consumed_samples=40.0")
    ten = _checkpoint(tmp_path, "m--step=10-consumed_samples=44.0")
    _checkpoint(tmp_path, "m--step=11-consumed_samples=48.0", finished=False)
    assert newest_finished(tmp_path) == ten
    assert newest_finished(tmp_path / "missing") is None
