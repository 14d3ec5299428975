"""Which rank a task of `executors/ranks.py` is: torchrun's variables first, then srun's, else a lone process."""

from __future__ import annotations

import pytest

from nemo_recipes.executors.ranks import rank_and_world


@pytest.mark.parametrize(
    "env, expected",
    [
        ({"RANK": "3", "WORLD_SIZE": "8", "SLURM_PROCID": "0", "SLURM_NTASKS": "2"}, (3, 8)),  # torchrun under srun
        ({"SLURM_PROCID": "1", "SLURM_NTASKS": "2"}, (1, 2)),  # a plain srun task
        ({"RANK": "1"}, (0, 1)),  # half a pair is no rank
        ({"RANK": "", "WORLD_SIZE": "2"}, (0, 1)),
        ({}, (0, 1)),
    ],
)
def test_rank_and_world_come_from_the_launcher(env, expected):
    assert rank_and_world(env) == expected
