"""Resuming after a job was stopped mid-save: NeMo's AutoResume refuses, the recipes' RecipeResume takes the newest
finished checkpoint (or starts afresh when none is finished); stopped while a superseded checkpoint was being
deleted: AutoResume takes the half-deleted one, RecipeResume the whole one. Real NeMo classes on real checkpoint
directories (weights written by torch.distributed.checkpoint, as Megatron's torch_dist format does). A checkpoint
whose pickles would run code (issue 47) is refused, whether NeMo's choice, ours, or `restore_from`'s, before NeMo
unpickles it."""

from __future__ import annotations

import json
import os
import shutil
import time

import pytest
import torch
import torch.distributed.checkpoint as dcp
from _pickles import PLANTS, plant_index
from nemo import lightning as nl
from nemo.lightning.pytorch.callbacks.model_checkpoint import ModelCheckpoint

from nemo_recipes.errors import InvalidInputError
from nemo_recipes.training.resume import RecipeResume, newest_finished, weights_whole


def _checkpoint(directory, name, *, finished=True):
    path = directory / name
    weights = path / "weights"
    # (and an object, as Megatron saves its layers' extra state: pickled among the tensors)
    dcp.save({"w": torch.arange(4096.0), "b": torch.ones(8), "extra": {"fp8": None}}, checkpoint_id=str(weights),
             no_dist=True)  # fmt: skip
    torch.save({"iteration": 1}, weights / "common.pt")
    (weights / "metadata.json").write_text(json.dumps({"sharded_backend": "torch_dist", "common_backend": "torch"}))
    (path / "context").mkdir()
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


def _half_deleted(path, keep_files: int):
    """What a deletion thread leaves when the job dies in it: some files gone, no marker, the directory touched."""
    files = sorted(f for f in path.rglob("*") if f.is_file())
    for f in files[keep_files:]:
        f.unlink()
    os.utime(path, (time.time() + 5, time.time() + 5))  # removing entries touches the directory


@pytest.mark.parametrize("keep_files", [0, 1, 2, 3])
def test_a_checkpoint_half_deleted_when_the_job_died_is_not_resumed_from(tmp_path, keep_files):
    whole = _checkpoint(tmp_path, "m--step=14-consumed_samples=60.0-last")
    superseded = _checkpoint(tmp_path, "m--step=9-consumed_samples=40.0-last")
    _half_deleted(superseded, keep_files)
    assert not weights_whole(superseded / "weights") and weights_whole(whole / "weights")
    # NeMo: two "-last" without a marker, the newest by modification time wins: the half-deleted one.
    assert _resumes(nl.AutoResume, tmp_path) == superseded
    assert _resumes(RecipeResume, tmp_path) == whole


def test_a_checkpoint_whose_files_are_cut_short_is_not_whole(tmp_path):
    path = _checkpoint(tmp_path, "m--step=4-consumed_samples=20.0-last")
    assert weights_whole(path / "weights")
    data = path / "weights" / "__0_0.distcp"
    with open(data, "r+b") as file:
        file.truncate(data.stat().st_size - 1)
    assert not weights_whole(path / "weights")
    (path / "weights" / ".metadata").write_bytes(b"\x80\x04")  # an index cut short
    assert not weights_whole(path / "weights")


def test_with_no_whole_checkpoint_left_a_run_starts_afresh_or_is_refused(tmp_path):
    only = _checkpoint(tmp_path, "m--step=9-consumed_samples=40.0-last")
    shutil.rmtree(only / "weights")
    assert _resumes(RecipeResume, tmp_path) is None
    strict = RecipeResume(resume_if_exists=True, resume_ignore_no_checkpoint=False, resume_from_directory=str(tmp_path))
    with pytest.raises(ValueError, match="no finished checkpoint is left"):
        strict._find_trainer_ckpt_path()


@pytest.mark.parametrize("where", ["index", "common.pt", "object"])
def test_a_checkpoint_whose_pickles_would_run_code_is_not_resumed_from_and_runs_nothing(where, tmp_path):
    directory = tmp_path / "checkpoints"
    _checkpoint(directory, "m--step=4-consumed_samples=20.0")
    newest = _checkpoint(directory, "m--step=9-consumed_samples=40.0-last")
    planted = PLANTS[where](newest / "weights", tmp_path / "ran", "builtins.exec")
    with pytest.raises(InvalidInputError) as refused:
        _resumes(RecipeResume, directory)
    [problem] = refused.value.problems
    assert (problem.field, problem.value) == ("resume", str(planted)) and "names builtins.exec" in problem.message
    assert not (tmp_path / "ran").exists()


def test_a_restore_from_whose_pickles_would_run_code_is_refused_before_nemo_loads_it(tmp_path):
    imported = _checkpoint(tmp_path / "checkpoints", "imported")
    planted = PLANTS["object"](imported / "weights", tmp_path / "ran", "pathlib.Path.touch")
    resume = RecipeResume(restore_config=nl.RestoreConfig(path=str(imported)))
    with pytest.raises(InvalidInputError, match="restore_from=") as refused:
        resume.setup(trainer=None)  # refused before NeMo's setup reads the trainer
    assert refused.value.problems[0].value == str(planted) and not (tmp_path / "ran").exists()


def test_the_smoke_judge_reads_checkpoint_indexes_without_running_them(tmp_path):
    from nemo_recipes.smoke_training.worker import inspect_checkpoints

    directory = tmp_path / "smoke" / "checkpoints"
    _checkpoint(directory, "m--step=4-consumed_samples=20.0")
    plant_index(_checkpoint(directory, "m--step=9-consumed_samples=40.0") / "weights", tmp_path / "ran", "os.system")
    whole, planted = inspect_checkpoints(tmp_path)
    assert whole["tensors"] == 2 and whole["read"]["items"] == 3, whole
    assert "UnsafePickle" in planted["error"] and "system" in planted["error"], planted
    assert not (tmp_path / "ran").exists()
