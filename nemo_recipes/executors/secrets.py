"""Environment variables and secrets for jobs: values reach the job unchanged, secrets never reach the disk.

Two problems of NeMo-Run 0.11 this module works around:

* `SlurmExecutor.env_vars` are written into the sbatch script as `export {KEY.upper()}={value}`: upper-cased and
  unquoted (NeMo-Run issue #234), so a value with a space, quote, `$`, backtick or newline is split, expanded or run
  as a command. We write such variables ourselves as `export NAME='quoted value'` lines in the executor's
  `setup_lines` (rendered verbatim after NeMo-Run's exports) with `shlex.quote`, keeping the name's case. Values
  that need no quoting stay in `env_vars`, where NeMo-Run renders them correctly.
* Anything in `env_vars` is written to disk (sbatch script, `*_executor.yaml`, TrainJob manifest). Secrets
  (`WANDB_API_KEY`, `HF_TOKEN`, ..., any name the user marks, and whatever `secret_reason` recognises by
  credentials.py's rules) therefore pass *by reference*: on Slurm the name is
  listed in `#SBATCH --export=ALL,NAME` and the value comes from the environment of the process that runs `sbatch`;
  on Kubernetes the container reads it from a Secret through `valueFrom.secretKeyRef`.
"""

from __future__ import annotations

import dataclasses
import os
import re
import shlex
from typing import Any, Iterable, Mapping, Optional

from nemo_recipes.credentials import DEFAULT_SECRETS as DEFAULT_SECRETS  # one list, in credentials.py
from nemo_recipes.credentials import (
    held_secret,
    secret_key,
    token_like,  # noqa: F401  (part of this module's interface)
)
from nemo_recipes.errors import Problem, secret_value_problems

REDACTED = "<redacted>"
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")  # fullmatch: "$" would let a final newline through
BEGIN = "# >>> nemo-recipes environment (quoted: NeMo-Run leaves env_vars unquoted, issue #234)"
END = "# <<< nemo-recipes environment"


def secret_names(extra: Iterable[str] = ()) -> frozenset[str]:
    return DEFAULT_SECRETS | frozenset(extra)


def secret_reason(name: Any, value: Any, marked: Iterable[str] = ()) -> Optional[str]:
    """Why the environment entry `name=value` is a secret, or None: the rules of credentials.py (the same that
    redact messages), applied to every environment a job gets. A name marked secret (`secrets=[...]`, WANDB_API_KEY,
    ...), a name that says it is one (`*_TOKEN`, `DB_PASS`, `MY_SERVICE_APIKEY`), or a value of one of this
    process's secret environment variables under any name."""
    if not isinstance(name, str):
        return None
    if name in marked or name.upper() in marked or name in DEFAULT_SECRETS:
        return "marked as one"
    if secret_key(name):
        return "by its name"
    holder = held_secret(value) if isinstance(value, str) else None
    if holder:
        return f"the value of the secret environment variable {holder}"
    return None


def executor_value_problems(executor: Any, task: Any) -> list[Problem]:
    """Every field of a built executor and its task that would carry a secret's value into the job's files: what
    Python callers set directly and plugins add, past the checks of the presets. Their environments are left to
    the secret policy (secure), which passes secrets by reference."""
    problems = []
    if dataclasses.is_dataclass(executor):
        for f in dataclasses.fields(executor):
            if f.name not in ("env_vars", "env_list"):
                problems += secret_value_problems(f.name, getattr(executor, f.name, None))
    arguments = getattr(task, "__arguments__", None)
    if arguments is not None:  # a recipe (run.Partial): its configuration is written as it is
        problems += secret_value_problems("task", arguments)
    else:  # a run.Script: its text and arguments
        for name in ("inline", "path", "args", "entrypoint"):
            problems += secret_value_problems(f"task.{name}", getattr(task, name, None))
    return problems


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
    marked = secret_names(s for s in secrets if isinstance(s, str))
    for name, value in env.items():
        reason = secret_reason(name, value, marked)
        if reason:
            problems.append(
                Problem(
                    f"{field}.{name}",
                    REDACTED,
                    f"is a secret ({reason}): its value would be written into the job script, exported configs "
                    "and logs.",
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
    marked = secret_names([*secrets, *exported_secrets(executor.additional_parameters)])
    check = check_submit_env and _is_local_tunnel(executor)
    taken, problems = take_secrets([executor.env_vars, task_env or {}], marked, check_values=check)
    by_reference = set(taken)
    by_reference |= set(exported_secrets(executor.additional_parameters))
    by_reference |= {s for s in secrets}
    if by_reference:
        params = dict(executor.additional_parameters or {})
        params["export"] = export_names(params.get("export"), by_reference)
        executor.additional_parameters = params
        if check:
            for name in sorted(by_reference - {p.field.partition(".")[2] for p in problems}):
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


def take_secrets(
    sources: Iterable[dict[str, Any]], marked: Iterable[str], *, check_values: bool = True
) -> tuple[list[str], list[Problem]]:
    """Remove every secret (secret_reason) from `sources` (an executor's and a task's env, which NeMo-Run writes to
    disk), for the job to read it from the environment that starts it. Returns the names taken and, with
    `check_values`, a problem for each value that this environment does not hold under its name: the job would get
    another value, or none."""
    marked = frozenset(marked)
    taken: list[str] = []
    problems: list[Problem] = []
    for source in sources:
        for name in [n for n in source if secret_reason(n, source[n], marked)]:
            value = source.pop(name)
            taken.append(name)
            if check_values and name in os.environ and os.environ[name] != value:
                problems.append(
                    Problem(
                        f"env.{name}",
                        REDACTED,
                        f"is a secret ({secret_reason(name, value, marked)}), passed by reference from the "
                        "environment that starts the job, which holds another value under that name.",
                        f"export {name}=... with the value the job needs in the environment that starts it, and "
                        "leave it out of env.",
                    )
                )
            elif check_values and name not in os.environ:
                problems.append(
                    Problem(
                        f"env.{name}",
                        REDACTED,
                        f"is a secret ({secret_reason(name, value, marked)}): it is not written into job files, and "
                        "the environment that starts the job does not hold it.",
                        f"export {name}=... in the environment that starts the job.",
                    )
                )
    return taken, problems


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
