"""AutoResume that survives a job stopped while its newest checkpoint was being written.

NeMo's AutoResume (nemo/lightning/resume.py, `_find_trainer_ckpt_path`) considers only the `*-last` (and `*-end`)
checkpoints and raises "Last checkpoint is unfinished and cannot be used to resume the training" when each of them
still carries its unfinished marker. With asynchronous saves that is the normal state of a job that lost its node or
was preempted during a save: the requeued job then fails at set-up instead of resuming, even when an older finished
checkpoint is on disk, and one killed before its first save finished cannot even start again from scratch. Seen on
the two-node test cluster (tests/test_slurm_two_nodes.py).

`RecipeResume` resumes from the newest finished checkpoint instead (by global step), and starts from scratch when
none is finished, as AutoResume does when there is no checkpoint at all. NeMo's ModelCheckpoint removes the unfinished
directories when training starts.

A checkpoint without the marker is not always whole either. With asynchronous saves ModelCheckpoint deletes a
superseded "-last" checkpoint in a thread and takes the marker off as soon as that thread has started, so a job that
dies during the deletion leaves a half-deleted directory that looks finished; and since deleting touches the
directory, it is also the newest by modification time, which is how AutoResume chooses among several "-last"
checkpoints. So among the checkpoints without a marker, RecipeResume takes the one of the highest global step whose
weights are whole: the index (`.metadata`), `common.pt` and `metadata.json` present, and every file holding the
bytes the index points to.

NeMo loads the checkpoint it is handed with plain pickle (its index, and the objects among its tensors), so the one
chosen to resume from, and the one `restore_from` names, are first read through the package's reader of pickles
(`checkpoint_pickles`): one that names anything a checkpoint does not hold (a file made to run code) is refused.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Optional

from nemo import lightning as nl
from nemo.lightning.pytorch.callbacks.model_checkpoint import ModelCheckpoint
from nemo.utils import logging

from nemo_recipes.checkpoint_pickles import UnsafePickle, read_index, refuse_unsafe
from nemo_recipes.errors import InvalidInputError
from nemo_recipes.families.megatron_names import short_files
from nemo_recipes.plan.restore import weights_of

_STEP = re.compile(r"step=(\d+)")
UNSAFE_FIX = "remove that checkpoint, or give one you trust; nothing of it was loaded."


class RecipeResume(nl.AutoResume):
    def setup(self, trainer: Any, model: Any = None) -> None:
        if self.restore_config is not None:
            _refuse_unsafe(Path(self.restore_config.path).expanduser(), "restore_from")
        super().setup(trainer, model)

    def _find_trainer_ckpt_path(self) -> Optional[Path]:
        found = self._choice()
        if found is not None:
            _refuse_unsafe(Path(found), "resume")
        return found

    def _choice(self) -> Optional[Path]:
        try:
            found = super()._find_trainer_ckpt_path()
        except ValueError as error:
            if "is unfinished" not in str(error):
                raise
            found, reason = None, str(error).split(".")[0]
        else:
            if found is None or not Path(found).name.endswith("-last"):
                return found  # an "-end" checkpoint, or none: NeMo's answer
            reason = f"{found} is the newest by modification time but not a whole checkpoint of the highest step"
        whole = newest_finished(self._checkpoint_dir())
        if whole is not None and whole == found:  # NeMo's choice was the right one
            return found
        if whole is None and not self.resume_ignore_no_checkpoint:
            raise ValueError(f"{reason}, and no finished checkpoint is left to resume from.")
        logging.warning(
            f"{reason}: resuming from {whole}, the newest finished checkpoint"
            if whole
            else f"{reason}, and no finished checkpoint is left: training from scratch"
        )
        return whole

    def _checkpoint_dir(self) -> Optional[Path]:
        if self.resume_from_directory:
            return Path(self.resume_from_directory)
        from nemo.utils.app_state import AppState

        log_dir = AppState().log_dir
        return Path(log_dir) / "checkpoints" if log_dir is not None else None


def _refuse_unsafe(checkpoint: Path, field: str) -> None:
    weights = weights_of(checkpoint)
    if weights is not None:
        refuse_unsafe(weights, field, UNSAFE_FIX)


def newest_finished(directory: Optional[Path]) -> Optional[Path]:
    """The finished checkpoint directory with the highest global step in `directory` (modification time breaks a
    tie): no unfinished marker, and its weights whole. None when there is none."""
    if directory is None or not directory.is_dir():
        return None
    finished = [
        path
        for path in directory.iterdir()
        if path.is_dir()
        and not path.name.endswith(ModelCheckpoint.UNFINISHED_CHECKPOINT_SUFFIX)
        and not ModelCheckpoint.is_checkpoint_unfinished(path)
        and weights_whole(path / "weights")
    ]

    def order(path: Path) -> tuple[int, float]:
        step = _STEP.search(path.name)
        return (int(step.group(1)) if step else -1, path.stat().st_mtime)

    return max(finished, key=order, default=None)


def weights_whole(weights: Path) -> bool:
    """Whether a distributed checkpoint's `weights` directory holds everything a resume reads. An index that names
    what no checkpoint holds is refused (InvalidInputError): that is no damage to resume past in silence."""
    if not all((weights / name).is_file() for name in (".metadata", "common.pt", "metadata.json")):
        return False
    try:
        return not short_files(weights, read_index(weights))
    except UnsafePickle as error:
        raise InvalidInputError([error.problem("resume", UNSAFE_FIX)], context=f"checkpoint {weights.parent}") from None
    except Exception:  # noqa: BLE001  (an index cut short or damaged: any unpickling error means the same, as in hf export)
        return False
