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
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Optional

from nemo import lightning as nl
from nemo.lightning.pytorch.callbacks.model_checkpoint import ModelCheckpoint
from nemo.utils import logging

_STEP = re.compile(r"step=(\d+)")


class RecipeResume(nl.AutoResume):
    def _find_trainer_ckpt_path(self) -> Optional[Path]:
        try:
            return super()._find_trainer_ckpt_path()
        except ValueError as error:
            if "is unfinished" not in str(error):
                raise
            reason = str(error).split(".")[0]
        found = newest_finished(self._checkpoint_dir())
        if found is None and not self.resume_ignore_no_checkpoint:
            raise ValueError(f"{reason}, and no finished checkpoint is left to resume from.")
        logging.warning(
            f"{reason}: resuming from {found}, the newest finished checkpoint"
            if found
            else f"{reason}, and no finished checkpoint is left: training from scratch"
        )
        return found

    def _checkpoint_dir(self) -> Optional[Path]:
        if self.resume_from_directory:
            return Path(self.resume_from_directory)
        from nemo.utils.app_state import AppState

        log_dir = AppState().log_dir
        return Path(log_dir) / "checkpoints" if log_dir is not None else None


def newest_finished(directory: Optional[Path]) -> Optional[Path]:
    """The finished checkpoint directory with the highest global step in `directory` (modification time breaks a
    tie), or None."""
    if directory is None or not directory.is_dir():
        return None
    finished = [
        path
        for path in directory.iterdir()
        if path.is_dir()
        and not path.name.endswith(ModelCheckpoint.UNFINISHED_CHECKPOINT_SUFFIX)
        and not ModelCheckpoint.is_checkpoint_unfinished(path)
    ]

    def order(path: Path) -> tuple[int, float]:
        step = _STEP.search(path.name)
        return (int(step.group(1)) if step else -1, path.stat().st_mtime)

    return max(finished, key=order, default=None)
