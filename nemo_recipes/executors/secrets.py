"""Environment variables and secrets for jobs: values reach the job unchanged, secrets never reach the disk.

Two problems of NeMo-Run 0.11 this module works around:

* `SlurmExecutor.env_vars` are written into the sbatch script as `export {KEY.upper()}={value}`: upper-cased and
  unquoted (NeMo-Run issue #234), so a value with a space, quote, `$`, backtick or newline is split, expanded or run
  as a command. We write such variables ourselves as `export NAME='quoted value'` lines in the executor's
  `setup_lines` (rendered verbatim after NeMo-Run's exports) with `shlex.quote`, keeping the name's case. Values
  that need no quoting stay in `env_vars`, where NeMo-Run renders them correctly.
* Anything in `env_vars` is written to disk (sbatch script, `*_executor.yaml`, TrainJob manifest). Secrets
  (`WANDB_API_KEY`, `HF_TOKEN`, ... and any name the user marks) therefore pass *by reference*: on Slurm the name is
  listed in `#SBATCH --export=ALL,NAME` and the value comes from the environment of the process that runs `sbatch`;
  on Kubernetes the container reads it from a Secret through `valueFrom.secretKeyRef`.
"""

from __future__ import annotations

import os
import re
import shlex
from typing import Any, Iterable, Mapping, Optional

from nemo_recipes.credentials import DEFAULT_SECRETS as DEFAULT_SECRETS  # one list, in credentials.py
from nemo_recipes.credentials import token_like  # noqa: F401  (part of this module's interface)
from nemo_recipes.errors import Problem

REDACTED = "<redacted>"
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")  # fullmatch: "$" would let a final newline through
BEGIN = "# >>> nemo-recipes environment (quoted: NeMo-Run leaves env_vars unquoted, issue #234)"
END = "# <<< nemo-recipes environment"


def secret_names(extra: Iterable[str] = ()) -> frozenset[str]:
    return DEFAULT_SECRETS | frozenset(extra)


def name_problems(field: str, names: Iterable[Any]) -> list[Problem]:
    return [
        Problem(
            f"{field}.{name}" if isinstance(name, str) else field,
            name,
            "is not a valid environment variable name.",
            "use letters, digits and underscores, not starting with a digit.",
        )
        for name in names
        if not isinstance(name, str) or not _NAME.fullmatch(name)
    ]


def secret_name_problems(names: Iterable[Any]) -> list[Problem]:
    """Names of secrets are written into job scripts (`--export=ALL,NAME`); a secret's value given where its name
    belongs is refused without being echoed."""
    problems = []
    for name in names:
        reason = token_like(name) if isinstance(name, str) else None
        if reason:
            problems.append(token_problem_for_name(reason))
        elif name_problems("secrets", [name]):
            # Not a name: perhaps the secret's value itself, which is why it is not quoted back.
            problems.append(
                token_problem_for_name("is not an environment variable name (letters, digits, '_'; not shown)")
            )
    return problems


def token_problem_for_name(reason: str) -> Problem:
    return Problem(
        "secrets",
        REDACTED,
        f"an entry looks like a secret value, not the name of an environment variable: it "
        f"{reason}. Written here it would be stored in the job script.",
        "list the variable's NAME (e.g. WANDB_API_KEY) in secrets and export its value in the submitting "
        "environment. If the value was shared (a profile, a shell history), revoke it and issue a new one.",
    )


def env_problems(env: Mapping[str, Any], secrets: Iterable[str], how: str, field: str = "env") -> list[Problem]:
    """Bad names, non-string values, NUL bytes, and secrets given by value (the value is never echoed)."""
    if not isinstance(env, Mapping):
        return [Problem(field, env, "must be a mapping of names to values.", f"give {field} as a dict.")]
    problems = name_problems(field, env)
    secret = secret_names(s for s in secrets if isinstance(s, str))
    for name, value in env.items():
        if name in secret:
            problems.append(
                Problem(
                    f"{field}.{name}",
                    REDACTED,
                    "is a secret: its value would be written into the job script, exported configs and logs.",
                    f"do not put it in {field}; {how}",
                )
            )
        elif not isinstance(value, str):
            problems.append(
                Problem(f"{field}.{name}", value, "must be a string.", f'quote the value: {name}: "{value}".')
            )
        elif "\0" in value:
            problems.append(
                Problem(
                    f"{field}.{name}",
                    value,
                    "contains a NUL byte, which no environment can hold.",
                    "remove the NUL byte.",
                )
            )
    return problems


def needs_quoting(name: str, value: str) -> bool:
    """True when NeMo-Run's `export {NAME.upper()}={value}` would not reproduce `name=value` exactly."""
    return name != name.upper() or value == "" or shlex.quote(value) != value


def export_lines(env: Mapping[str, str]) -> list[str]:
    return [f"export {name}={shlex.quote(value)}" for name, value in env.items()]


def add_setup_exports(setup_lines: Optional[str], env: Mapping[str, str]) -> Optional[str]:
    """`setup_lines` with a block exporting `env`, quoted; merged into our block when one is there already."""
    if not env:
        return setup_lines
    lines = (setup_lines or "").splitlines()
    if BEGIN in lines and END in lines:
        end = lines.index(END)
        lines[end:end] = export_lines(env)
    else:
        lines += [BEGIN, *export_lines(env), END]
    return "\n".join(lines)


def split_for_slurm(env: Mapping[str, str]) -> tuple[dict[str, str], dict[str, str]]:
    """(values NeMo-Run renders correctly, values that must be quoted by us)."""
    plain = {k: v for k, v in env.items() if not needs_quoting(k, v)}
    quoted = {k: v for k, v in env.items() if needs_quoting(k, v)}
    return plain, quoted


def export_names(current: Optional[str], names: Iterable[str]) -> str:
    """An sbatch `--export` value that keeps the submitting environment (ALL) and names each secret explicitly."""
    parts = [p for p in (current or "ALL").split(",") if p]
    if parts[0] == "NONE":
        parts[0] = "ALL"  # NONE would drop the secrets we pass by reference, and PATH with them
    for name in sorted(names):
        if name not in parts:
            parts.append(name)
    return ",".join(parts)


def exported_secrets(additional_parameters: Optional[Mapping[str, Any]]) -> list[str]:
    value = (additional_parameters or {}).get("export") or ""
    return [p for p in str(value).split(",") if p and p not in ("ALL", "NONE")]


def secure_slurm(
    executor: Any, task_env: Optional[dict[str, str]] = None, secrets: Iterable[str] = (), check_submit_env: bool = True
) -> list[Problem]:
    """Make a stock `run.SlurmExecutor` safe in place, after anyone (NeMo plugins included) changed its env:

    secrets found in `env_vars` or in the task's env are removed and passed by reference (`--export`); values that
    NeMo-Run would mangle move into a quoted block of `setup_lines`. Returns problems (a secret missing from the
    submitting environment) instead of raising, so that the caller reports everything at once.
    """
    problems: list[Problem] = []
    marked = secret_names([*secrets, *exported_secrets(executor.additional_parameters)])
    by_reference: set[str] = set()
    for source in (executor.env_vars, task_env if task_env is not None else {}):
        for name in [n for n in source if n in marked or n.upper() in marked]:
            del source[name]
            by_reference.add(name)
    by_reference |= set(exported_secrets(executor.additional_parameters))
    by_reference |= {s for s in secrets}
    if by_reference:
        params = dict(executor.additional_parameters or {})
        params["export"] = export_names(params.get("export"), by_reference)
        executor.additional_parameters = params
        if check_submit_env and _is_local_tunnel(executor):
            for name in sorted(by_reference):
                if name not in os.environ:
                    problems.append(
                        Problem(
                            f"secrets.{name}",
                            REDACTED,
                            "is passed by reference but is not set in this environment, "
                            "from which sbatch copies it into the job.",
                            f"export {name}=... before submitting.",
                        )
                    )
    moved: dict[str, str] = {}
    for source in (executor.env_vars, task_env if task_env is not None else {}):
        _, quoted = split_for_slurm({k: str(v) for k, v in source.items()})
        for name in quoted:
            del source[name]
        moved.update(quoted)
    executor.setup_lines = add_setup_exports(executor.setup_lines, moved)
    return problems


#: A Kubernetes Secret's name (a DNS subdomain).
SECRET_NAME = r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?"


def token_problem(field: str, reason: str, fix: str) -> Problem:
    """The refusal of a secret value given where a reference belongs; the value is never echoed."""
    return Problem(
        field,
        REDACTED,
        f"looks like a secret value, not the name of a Kubernetes Secret: it {reason}. "
        "Written here it would be stored in the TrainJob manifest and NeMo-Run's experiment files.",
        f"{fix} If the value was shared (a profile, a shell history), revoke it and issue a new one.",
    )


def kubernetes_secret_refs(secrets: Mapping[str, str]) -> tuple[list[dict[str, Any]], list[Problem]]:
    """`env` entries with `valueFrom.secretKeyRef` for {ENV_NAME: "secret-name" or "secret-name/key"}; a reference
    that looks like a secret value is refused without echoing it."""
    problems = name_problems("secrets", secrets)
    refs = []
    for name, ref in secrets.items():
        reason = token_like(ref) if isinstance(ref, str) else None
        if reason:
            problems.append(
                token_problem(
                    f"secrets.{name}",
                    reason,
                    "put the value in a Secret (kubectl create secret generic NAME "
                    f"--from-literal=KEY=...) and pass secrets={{'{name}': 'NAME/KEY'}}.",
                )
            )
            continue
        if not isinstance(ref, str) or not re.fullmatch(rf"{SECRET_NAME}(/[-._a-zA-Z0-9]+)?", ref):
            problems.append(
                Problem(
                    f"secrets.{name}",
                    ref,
                    "is not a Kubernetes Secret reference.",
                    "give 'secret-name' or 'secret-name/key' (kubectl create secret generic ...).",
                )
            )
            continue
        secret, _, key = ref.partition("/")
        refs.append({"name": name, "valueFrom": {"secretKeyRef": {"name": secret, "key": key or name}}})
    return refs, problems


def _is_local_tunnel(executor: Any) -> bool:
    from nemo_run import LocalTunnel

    return isinstance(getattr(executor, "tunnel", None), LocalTunnel)
