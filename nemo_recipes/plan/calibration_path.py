"""Where the calibration file lives, apart from `plan.calibration` (which reads it): `plan` looks for the file at
every start, and imports the reader only when there is one to read."""

from __future__ import annotations

import os
from pathlib import Path

ENV_VAR = "NEMO_RECIPES_CALIBRATION"


def default_calibration_path() -> Path:
    """Where `plan --calibrate` writes and `plan` looks when no --calibration is given: `$NEMO_RECIPES_CALIBRATION`,
    else `calibration.json` beside the cluster profiles (`$XDG_CONFIG_HOME/nemo-recipes/`, else
    `~/.config/nemo-recipes/`)."""
    if os.environ.get(ENV_VAR):
        return Path(os.environ[ENV_VAR]).expanduser()
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return Path(base) / "nemo-recipes" / "calibration.json"
