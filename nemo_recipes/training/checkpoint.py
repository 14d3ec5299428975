"""The recipes' checkpoint callback: NeMo's `ModelCheckpoint`, saving on a step interval *and* a time interval
(whichever comes first), with the optimizer state in the end-of-training checkpoint.

Why not NeMo's callback as it is: Lightning refuses a step and a time interval together (although the check it runs
after every step honours both), and NeMo writes the checkpoint at the end of training without the optimizer
(`save_optim_on_train_end=False`), so a run shorter than the time interval leaves nothing that AutoResume can load.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any, Optional

from nemo import lightning as nl


class RecipeCheckpoint(nl.ModelCheckpoint):
    """`nl.ModelCheckpoint` with both triggers; every other argument is NeMo's."""

    def __init__(
        self,
        *,
        every_n_train_steps: Optional[int] = None,
        train_time_interval: Optional[timedelta] = None,
        save_optim_on_train_end: bool = True,
        **kwargs: Any,
    ) -> None:
        super().__init__(
            train_time_interval=train_time_interval,
            every_n_train_steps=None if train_time_interval else every_n_train_steps,
            save_optim_on_train_end=save_optim_on_train_end,
            **kwargs,
        )
        # Set after Lightning's mutual-exclusion check; its on_train_batch_end saves when either trigger fires.
        self._every_n_train_steps = every_n_train_steps or 0
