"""Silence around the import of the training stack where a verb needs a piece of it in its own process (Megatron's
dataset writer for `data prepare`, a checkpoint's index for `hf export`): torch's and Megatron-Core's import-time
notices (GPU libraries a CPU job does not use, deprecations) are nothing a user of the verb can act on."""

from __future__ import annotations

import contextlib
import logging
import warnings
from typing import Iterator


@contextlib.contextmanager
def library_notices_silenced() -> Iterator[None]:
    """Python warnings off and Megatron-Core's logger at ERROR inside the block; both as they were after it."""
    logger = logging.getLogger("megatron.core")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        logger.setLevel(level)
