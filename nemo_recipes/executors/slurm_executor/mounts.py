"""What a Slurm job's container sees of the cluster's file system: Pyxis mounts the paths `container_mounts` lists
("src:dst[:flags]", or one path mounted at itself) and NeMo-Run adds the job directory; nothing else of the nodes'
disks is there. A data path outside all of them names no file in the job, which fails when it reads it, after its
wait in the queue. Standard library only."""

from __future__ import annotations

import os
import shlex
from typing import Any, Optional, Sequence

from nemo_recipes.errors import WARNING, Problem


def destinations(executor: Any) -> Optional[list[str]]:
    """The container paths that mounts cover, or None when the job runs without a container (the node's own file
    system: every shared path is there)."""
    if not getattr(executor, "container_image", None):
        return None
    found = []
    for mount in getattr(executor, "container_mounts", None) or []:
        parts = str(mount).split(":")
        found.append(os.path.normpath(parts[1] if len(parts) > 1 else parts[0]))
    tunnel = getattr(executor, "tunnel", None)
    for job_dir in (getattr(executor, "job_dir", None), getattr(tunnel, "job_dir", None)):
        if job_dir:
            found.append(os.path.normpath(str(job_dir)))
    return found


def _under(path: str, directory: str) -> bool:
    return path == directory or path.startswith(directory.rstrip("/") + "/")


def unmounted(executor: Any, paths: Sequence[tuple[str, str]]) -> list[Problem]:
    """A warning for each (field, path) outside every mount of the executor's container. A warning, not a refusal:
    the image itself, or enroot's own configuration (ENROOT_MOUNT_HOME), may hold the path."""
    covered = destinations(executor)
    if covered is None:
        return []
    problems = []
    for field, path in paths:
        absolute = os.path.normpath(os.path.abspath(os.path.expanduser(path)))
        if any(_under(absolute, directory) for directory in covered):
            continue
        folder = absolute if os.path.isdir(absolute) else os.path.dirname(absolute)  # a prefix or file: its folder
        problems.append(
            Problem(
                field,
                path,
                f"lies outside every container mount of the Slurm job ({', '.join(covered) or 'none'}): unless the "
                "image holds it, the job will not find it, and fails when it reads it, after its wait in the queue.",
                f"mount it: container_mounts: [{shlex.quote(f'{folder}:{folder}')}] in the cluster profile (or "
                f"-E container_mounts=...), or move the file under a mounted path.",
                WARNING,
            )
        )
    return problems
