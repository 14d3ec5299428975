"""What a credential looks like, so that none is ever quoted back or written where a name belongs.

Standard library only and below every other module: error messages (errors.py) and the executors' secret policy
(executors/secrets.py) both ask it.
"""

from __future__ import annotations

import math
import os
import re
from typing import Iterable, Optional

#: Environment names treated as secrets whether or not the user marks them.
DEFAULT_SECRETS = frozenset(
    {
        "WANDB_API_KEY",
        "HF_TOKEN",
        "HUGGING_FACE_HUB_TOKEN",
        "HUGGINGFACE_HUB_TOKEN",
        "NGC_API_KEY",
        "NVIDIA_API_KEY",
        "OPENAI_API_KEY",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_SESSION_TOKEN",
        "GITHUB_TOKEN",
        "COMET_API_KEY",
        "NEPTUNE_API_TOKEN",
        "MLFLOW_TRACKING_PASSWORD",
    }
)
#: Words that make a key name a secret's (MY_SERVICE_TOKEN, db_password, WANDB_API_KEY): its value is never quoted.
#: Whole words only: `tokens`, `tokenizer_path` or a toleration's `key` are no secrets.
#: `pass` and `passphrase` too (DB_PASS, SMTP_PASS): an abbreviation is as secret as the word.
_SECRET_WORDS = frozenset(
    {"token", "secret", "password", "passwd", "pass", "passphrase", "credential", "credentials", "apikey"}
)
_SECRET_PAIRS = frozenset({("api", "key"), ("access", "key"), ("private", "key"), ("secret", "key")})
#: Shorter values of secret environment variables are not searched for in messages ("1", "x" would match anything).
_MIN_SECRET_CHARS = 6


def secret_key(name: str) -> bool:
    """Whether a key (an environment variable, a mapping key) names a secret by its words."""
    words = re.split(r"[^a-z0-9]+", re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", name).lower())  # camelCase too
    return (
        name in DEFAULT_SECRETS
        or not _SECRET_WORDS.isdisjoint(words)
        or not _SECRET_PAIRS.isdisjoint(zip(words, words[1:], strict=False))
    )


def secret_environment(environ: Optional[Iterable[tuple[str, str]]] = None) -> dict[str, str]:
    """{name: value} of this process's secret environment variables (by secret_key), longest value first."""
    items = os.environ.items() if environ is None else environ
    found = {name: value for name, value in items if secret_key(name) and len(value) >= _MIN_SECRET_CHARS}
    return dict(sorted(found.items(), key=lambda item: len(item[1]), reverse=True))


def secret_values(environ: Optional[Iterable[tuple[str, str]]] = None) -> list[str]:
    """The values of this process's secret environment variables (by secret_key), longest first: a message that
    holds one of them, under whatever field, quotes a secret."""
    return sorted(set(secret_environment(environ).values()), key=len, reverse=True)


def held_secret(text: str, environ: Optional[Iterable[tuple[str, str]]] = None) -> Optional[str]:
    """The name of the secret environment variable whose value `text` holds (a value given under another name, in a
    field or a path), or None. The name, never the value: it may be quoted in a message."""
    return next((name for name, value in secret_environment(environ).items() if value in text), None)


#: Prefixes that start API tokens and no Secret name or key: {prefix: whose token}. Errors name the prefix only.
_TOKEN_PREFIXES = {
    "hf_": "a Hugging Face token",
    "ghp_": "a GitHub token",
    "gho_": "a GitHub token",
    "ghu_": "a GitHub token",
    "ghs_": "a GitHub token",
    "ghr_": "a GitHub token",
    "github_pat_": "a GitHub token",
    "glpat-": "a GitLab token",
    "sk-": "an OpenAI-style API key",
    "sk_live_": "a Stripe key",
    "xoxb-": "a Slack token",
    "xoxp-": "a Slack token",
    "nvapi-": "an NVIDIA API key",
    "AKIA": "an AWS access key id",
    "ASIA": "an AWS access key id",
}
#: Runs of letters and digits (no separator) at least this long are checked for randomness: names are shorter words.
_RANDOM_RUN = 20
_HEX_RUN = re.compile(r"[0-9a-fA-F]{32,}")


def token_like(text: str) -> Optional[str]:
    """Why `text` (where a Secret's name or key belongs) looks like a secret value itself, or None.

    Secret names are DNS names people type ("wandb", "hf-token/HF_TOKEN"); tokens are long random strings, often
    with a vendor prefix (W&B keys are 40 hexadecimal digits). The reason never quotes the text."""
    for prefix, kind in _TOKEN_PREFIXES.items():
        # A random run after the prefix: "sk-team-secrets" is a Secret name, "sk-proj-Zq8Wm3Xn5Vb7Lk2J..." is not.
        if text.startswith(prefix) and re.search(r"[A-Za-z0-9]{16,}", text[len(prefix) :]):
            return f"starts like {kind} ({prefix}...)"
    hex_run = _HEX_RUN.search(text)
    if hex_run:
        return f"holds {len(hex_run.group())} hexadecimal digits in a row, like a W&B API key"
    for part in text.split("/"):
        for run in re.findall(r"[A-Za-z0-9+=]+", part):
            if len(run) >= _RANDOM_RUN and _random_looking(run):
                return f"holds a {len(run)}-character random-looking string"
    return None


def _random_looking(run: str) -> bool:
    """Cut into words the way a name is written (lower-case words, CamelCase words, numbers), a random string falls
    into pieces of one to three characters, or has digits in four or more places; "teamwandbkey2024" or
    "HuggingFaceHubToken" do neither. The spread of its characters (>= 3.5 bits each) rules out repetition."""
    words = re.findall(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])|[0-9]+|[^A-Za-z0-9]", run)
    counts = [run.count(c) for c in set(run)]
    entropy = -sum(n / len(run) * math.log2(n / len(run)) for n in counts)
    numbers = sum(w.isdigit() for w in words)
    return (len(run) / len(words) < 3 or numbers >= 4) and entropy >= 3.5
