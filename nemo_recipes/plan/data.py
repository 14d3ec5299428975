"""What the files say about a recipe's data, before any GPU hour: each source's tokens and documents (its manifest,
else its `.idx` header), how many epochs of it the planned training tokens make, and the tokenizer's vocabulary.

The only planner module that opens files, and still on the fast path: it reads manifests and `.idx` headers
(`data.manifest`, standard library) and fingerprints the tokenizer's files; `data.tokenizers.describe` reads the
tokenizer's vocabulary with `tokenizers` or `sentencepiece` (tens of milliseconds); and `restore_from`'s checkpoint
index (plan.restore, a millisecond). `plan`, `launch`, the recipe
plugin and `smoke` call `read_data`; a recipe is still built without touching a file (its model config leaves the
vocabulary to NeMo, which takes the tokenizer's at configure time).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from itertools import pairwise
from pathlib import Path
from typing import Any, Optional

from nemo_recipes import budget
from nemo_recipes.catalog import RecipeSpec, data_problems
from nemo_recipes.errors import ERROR, WARNING, InvalidInputError, Problem

#: Epochs of one source above which the plan warns. Muennighoff et al. 2023 ("Scaling Data-Constrained Language
#: Models", Fig. 3-4): up to about 4 epochs, repeated tokens are worth almost as much as new ones; beyond that their
#: value falls off quickly and the model starts to memorise.
EPOCHS_WARNING = 4.0
#: PreTrainingDataModule's default train/validation/test split, which the recipes keep; Megatron cuts it by document.
SPLIT = (900, 50, 50)


@dataclass(frozen=True)
class Source:
    """One prefix of the blend."""

    path: str
    weight: float  # normalised: the share of training samples Megatron draws from it
    tokens: Optional[int]  # None when the prefix could not be read
    documents: Optional[int]
    max_token_id: Optional[int]  # None without a manifest
    manifest: bool
    planned_tokens: float  # the recipe's training tokens x weight
    asked_tokens: Optional[float] = None  # what a budget (data_epochs, data_tokens) asks of it, in tokens

    @property
    def epochs(self) -> Optional[float]:
        return self.planned_tokens / self.tokens if self.tokens else None

    @property
    def asked_epochs(self) -> Optional[float]:
        return self.asked_tokens / self.tokens if self.asked_tokens is not None and self.tokens else None

    def to_dict(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "weight": self.weight,
            "tokens": self.tokens,
            "documents": self.documents,
            "max_token_id": self.max_token_id,
            "manifest": self.manifest,
            "planned_tokens": round(self.planned_tokens),
            "epochs": self.epochs,
            "asked_tokens": None if self.asked_tokens is None else round(self.asked_tokens),
            "asked_epochs": self.asked_epochs,
        }


@dataclass(frozen=True)
class Budget:
    """What a budget asked (`nemo_recipes.budget`) and the weights it gives."""

    field: str  # data_epochs or data_tokens
    asked: tuple[float, ...]  # as given, one entry per source
    asked_tokens: float  # their sum in tokens
    trained_tokens: int  # train_steps x global batch x sequence: what the run trains
    weights: tuple[float, ...]  # normalised; empty when they could not be computed

    def to_dict(self) -> dict[str, Any]:
        return {
            "field": self.field,
            "asked": list(self.asked),
            "asked_tokens": round(self.asked_tokens),
            "trained_tokens": self.trained_tokens,
            "weights": list(self.weights),
        }

    def format(self) -> str:
        asked = ", ".join(f"{a:g}" for a in self.asked)
        weights = ", ".join(f"{w:.3f}" for w in self.weights) if self.weights else "none (see problems)"
        return (
            f"budget {self.field}=[{asked}]: {self.asked_tokens:,.0f} tokens asked, the run trains "
            f"{self.trained_tokens:,} (train_steps x global batch x sequence); weights {weights}"
        )


@dataclass(frozen=True)
class DataReport:
    """What the recipe's data files and tokenizer say: each source, the tokenizer, the budget and the problems."""

    sources: tuple[Source, ...] = ()
    tokenizer: Optional[Any] = None  # data.manifest.TokenizerInfo of tokenizer_path
    vocab_size: Optional[int] = None  # the model's vocabulary before padding, when the tokenizer decides it
    problems: tuple[Problem, ...] = field(default_factory=tuple)
    budget: Optional[Budget] = None  # when data_epochs or data_tokens decided the weights

    @property
    def errors(self) -> list[Problem]:
        return [p for p in self.problems if p.severity == ERROR]

    def to_dict(self) -> dict[str, Any]:
        return {
            "sources": [s.to_dict() for s in self.sources],
            "tokenizer": None
            if self.tokenizer is None
            else {
                "path": self.tokenizer.path,
                "kind": self.tokenizer.kind,
                "fingerprint": self.tokenizer.fingerprint,
                "vocab_size": self.tokenizer.vocab_size,
                "eod_id": self.tokenizer.eod_id,
            },
            "vocab_size": self.vocab_size,
            "budget": None if self.budget is None else self.budget.to_dict(),
            "problems": [p.to_dict() for p in self.problems],
        }

    def format(self) -> tuple[str, ...]:
        lines = []
        if self.tokenizer is not None:
            t = self.tokenizer
            lines.append(f"tokenizer {t.path} ({t.kind}): vocabulary {t.vocab_size:,}, EOD id {t.eod_id}")
        if self.budget is not None:
            lines.append(self.budget.format())
        for s in self.sources:
            if s.tokens is None:
                continue
            epochs = f"{s.epochs:,.1f}" if s.epochs is not None else "-"
            asked = ""
            if s.asked_tokens is not None:
                asked_epochs = f"{s.asked_epochs:,.2f}" if s.asked_epochs is not None else "-"
                asked = f"asked {asked_epochs} epochs ({s.asked_tokens:,.0f} tokens), "
            lines.append(
                f"{s.path}: {s.tokens:,} tokens, {s.documents:,} documents, {asked}weight {s.weight:.3f}: "
                f"{epochs} epochs of it in {s.planned_tokens:,.0f} planned tokens"
                + ("" if s.manifest else " (no manifest: counted from the .idx)")
            )
        return tuple(lines)


def read_data(spec: RecipeSpec, *, vocab_given: bool = False) -> tuple[RecipeSpec, DataReport]:
    """`spec` with the tokenizer's vocabulary (when `tokenizer_path` names one), and what its data files say.

    `vocab_given`: the user set vocab_size themselves (on the command line, in Python); one that disagrees with the
    tokenizer is a problem. Problems never raise here: they are in the report, errors and warnings together."""
    if not spec.data_paths and spec.tokenizer_path is None:
        return spec, DataReport(problems=tuple(_restore_problems(spec)))
    from nemo_recipes.data import tokenizers  # hashlib and the manifest reader: only where there is data to read

    problems = list(data_problems(spec))
    given = spec  # what the user wrote, for the problems that name a path the system refuses to look up
    spec = resolved_paths(spec)
    info = None
    if spec.tokenizer_path is not None and spec.tokenizer_path.strip():
        try:
            info = tokenizers.describe(spec.tokenizer_path)
        except InvalidInputError as error:
            problems += error.problems
        except OSError as error:  # a path the system refuses to look up (too long, a loop, no permission)
            what = "a tokenizer's directory (tokenizer.json or tokenizer.model) or the file itself"
            problems.append(_unreadable("tokenizer_path", given.tokenizer_path or "", error, what))
    if info is not None:
        if vocab_given and spec.vocab_size != info.vocab_size:
            problems.append(
                Problem(
                    "vocab_size",
                    spec.vocab_size,
                    f"disagrees with the tokenizer at {spec.tokenizer_path}, whose vocabulary has "
                    f"{info.vocab_size:,} entries (the model's embedding is sized from the tokenizer).",
                    "leave vocab_size out when tokenizer_path is given.",
                )
            )
        spec = spec.replace(vocab_size=info.vocab_size)
    vocab = info.vocab_size if info is not None else spec.vocab_size
    shape_is_valid = not any(
        p.severity == ERROR for p in problems if p.field in ("data_paths", "data_weights")
    ) and not budget.shape_problems(spec.data_paths, spec.data_weights, spec.data_epochs, spec.data_tokens)
    sources: tuple[Source, ...] = ()
    asked = None
    if spec.data_paths and shape_is_valid:
        sources = tuple(
            _source(str(path), info, vocab, problems, str(as_given))
            for path, as_given in zip(spec.data_paths, given.data_paths, strict=True)
        )
        spec, asked = _budget(spec, sources, problems)
        sources = _planned(spec, sources, asked, problems)
    problems += _restore_problems(spec)  # with the tokenizer's vocabulary: the embedding's shape follows it
    return spec, DataReport(
        sources=sources,
        tokenizer=info,
        vocab_size=info.vocab_size if info else None,
        problems=tuple(problems),
        budget=asked,
    )


def resolved_paths(spec: RecipeSpec) -> RecipeSpec:
    """`spec` with its data prefixes and tokenizer as the job must be given them: absolute, against the working
    directory they are checked in. A Slurm job runs in its experiment directory (`--chdir`) and a pod in its image's,
    where a relative path names nothing. A `tokenizer.json` becomes its directory (`data.tokenizers.canonical`)."""
    from nemo_recipes.data import tokenizers

    paths = tuple(str(Path(p).expanduser().absolute()) if str(p).strip() else p for p in spec.data_paths)
    tokenizer = spec.tokenizer_path
    if tokenizer is not None and tokenizer.strip():
        tokenizer = str(tokenizers.canonical(tokenizer))
    if (paths, tokenizer) == (spec.data_paths, spec.tokenizer_path):
        return spec
    return spec.replace(data_paths=paths, tokenizer_path=tokenizer)


def job_paths(spec: RecipeSpec) -> list[tuple[str, str]]:
    """(field, path) of every file or prefix a job of `spec` reads: its data prefixes, tokenizer and the checkpoint
    it starts from, as the spec holds them."""
    found = [("data_paths", str(p)) for p in spec.data_paths if str(p).strip()]
    for name in ("tokenizer_path", "restore_from"):
        value = getattr(spec, name)
        if value is not None and str(value).strip():
            found.append((name, str(value)))
    return found


def checked_data(spec: RecipeSpec, *, vocab_given: bool = False, context: str = "") -> tuple[RecipeSpec, DataReport]:
    """`read_data`, raising one InvalidInputError (errors and warnings) when any error is found."""
    spec, report = read_data(spec, vocab_given=vocab_given)
    if report.errors:
        raise InvalidInputError(report.problems, context=context)
    return spec, report


def _unreadable(field: str, path: str, error: OSError, what: str) -> Problem:
    shown = path if len(path) <= 200 else f"{path[:120]}..."
    return Problem(
        field,
        shown,
        f"cannot be read ({error.strerror or type(error).__name__}; the path has {len(path):,} characters).",
        f"give the path of {what} as this machine names it.",
    )


def _budget(spec: RecipeSpec, sources: tuple[Source, ...], problems: list[Problem]) -> tuple[RecipeSpec, Any]:
    """`spec` with the weights its budget gives (data_epochs, data_tokens), and what was asked; the spec unchanged
    and no weights when a source's token count is missing. The data_tokens' agreement with the run is the catalog's
    (`data_problems`, already in `problems`); the data_epochs' needs the sources' tokens and is checked here."""
    name = budget.given(spec)
    if name is None:
        return spec, None
    asked = tuple(float(a) for a in getattr(spec, name))
    trained = spec.train_steps * spec.tokens_per_step
    if name == "data_epochs":
        unknown = [s.path for s in sources if not s.tokens]
        if unknown:
            problems += [budget.no_count_problem(name, path) for path in unknown]
            return spec, Budget(name, asked, 0.0, trained, ())
    wanted = budget.wanted_tokens(name, asked, [s.tokens for s in sources])
    if name == "data_epochs":
        problems += budget.agreement_problems(
            name, asked, wanted, spec.train_steps, spec.global_batch_size, spec.seq_length, spec.decay_tokens
        )
    weights = budget.weights_of(wanted)
    resolved = spec.replace(data_weights=weights, data_epochs=(), data_tokens=())
    return resolved, Budget(name, asked, sum(wanted), trained, weights)


def _planned(spec: RecipeSpec, sources: tuple[Source, ...], asked: Any, problems: list[Problem]) -> tuple:
    """The sources with their share of the run (weight, planned tokens, what a budget asked), and a warning for
    each drawn more than EPOCHS_WARNING times."""
    weights = spec.data_weights or (1.0,) * len(spec.data_paths)
    total = float(sum(weights))
    wanted: list[Optional[float]] = [None] * len(sources)
    if asked is not None and asked.weights:
        wanted = [w * asked.asked_tokens for w in asked.weights]
    planned_sources = []
    for source, weight, asked_tokens in zip(sources, weights, wanted, strict=True):
        source = replace(
            source,
            weight=weight / total,
            planned_tokens=spec.train_tokens * weight / total,
            asked_tokens=asked_tokens,
        )
        planned_sources.append(source)
        if source.documents is not None:
            problems += _split_problems(source)
        repeated = f"beyond about {EPOCHS_WARNING:g} epochs repeated tokens are worth much less than new ones."
        if asked is not None:
            # What was asked; a budget that disagrees with the run is an error of its own (`budget`).
            if source.asked_epochs is not None and source.asked_epochs > EPOCHS_WARNING:
                problems.append(
                    Problem(
                        asked.field,
                        source.path,
                        f"the budget asks for {source.asked_tokens:,.0f} tokens of a source of {source.tokens:,}: "
                        f"{source.asked_epochs:,.1f} epochs of it, and {repeated}",
                        f"ask fewer epochs of it ({asked.field}), or add more data to this source.",
                        WARNING,
                    )
                )
        elif source.epochs is not None and source.epochs > EPOCHS_WARNING:
            problems.append(
                Problem(
                    "data_weights" if spec.data_weights else "data_paths",
                    source.path,
                    f"the plan draws {source.planned_tokens:,.0f} tokens (weight {source.weight:.3f} of "
                    f"{spec.train_tokens:,} training tokens) from a source of {source.tokens:,}: "
                    f"{source.epochs:,.1f} epochs of it. Megatron samples by weight whatever a source's size, and "
                    f"{repeated}",
                    "add more data to this source, lower its weight, or lower train_tokens.",
                    WARNING,
                )
            )
    return tuple(planned_sources)


def _source(path: str, info: Any, vocab: int, problems: list[Problem], as_given: str) -> Source:
    """What the files of one prefix say (its share of the run is `_planned`'s); `as_given`: the path as the user
    wrote it, named when the system refuses it."""
    weight, planned = 0.0, 0.0
    from nemo_recipes.data import tokenizers
    from nemo_recipes.data.manifest import check_files, index_summary, manifest_path, read_manifest

    try:
        if manifest_path(path).is_file():
            manifest = read_manifest(path)
            check_files(path, manifest)  # a .bin cut short or an .idx replaced behind an intact manifest
            summary = None
        else:
            summary = index_summary(path)
    except InvalidInputError as error:
        problems += error.problems
        return Source(path, weight, None, None, None, False, planned)
    except OSError as error:  # a path the system refuses to look up (too long, a loop, no permission)
        what = "the prefix of a prepared dataset (PREFIX.bin/.idx)"
        problems.append(_unreadable("data_paths", as_given, error, what))
        return Source(path, weight, None, None, None, False, planned)
    if summary is not None:
        problems += _unmanifested(path, info, vocab)
        return Source(path, weight, summary.tokens, summary.documents, None, False, planned)
    written_by = manifest.tokenizer
    if info is not None and not tokenizers.wrote(written_by, info):
        problems.append(
            Problem(
                "tokenizer_path",
                info.path,
                f"is not the tokenizer that wrote {path} (its manifest names {written_by.path}, fingerprint "
                f"{written_by.fingerprint[:19]}...; this one is {info.fingerprint[:19]}...): the model would read "
                "token ids that mean other words.",
                f"give tokenizer_path={written_by.path}, or prepare the data again with this tokenizer.",
            )
        )
    elif manifest.max_token_id >= vocab:
        named = f"the tokenizer's vocabulary of {vocab:,}" if info else f"vocab_size={vocab:,} (no tokenizer_path)"
        problems.append(
            Problem(
                "data_paths",
                path,
                f"holds token ids up to {manifest.max_token_id:,}, which do not fit {named}: the embedding lookup "
                "would fail, or read past the table, on the first step.",
                f"give the tokenizer that wrote it: tokenizer_path={written_by.path}.",
            )
        )
    return Source(path, weight, manifest.tokens, manifest.documents, manifest.max_token_id, True, planned)


def _unmanifested(path: str, info: Any, vocab: int) -> list[Problem]:
    """A prefix without a manifest: nothing says which tokenizer wrote it. Said (a warning) in every case; with a
    tokenizer, its ids, EOD and round trips are checked against it (`data.unmanifested`), errors refusing the run."""
    from nemo_recipes.data.unmanifested import SAMPLE_TOKENS, tokenizer_problems

    checked = []
    if info is not None:
        try:
            checked = tokenizer_problems(path, info.path)
        except (InvalidInputError, OSError) as error:  # the tokenizer was read once already; the .bin may not be
            checked = [Problem("data_paths", path, f"its tokens cannot be read ({error}).", "check the files.")]
    what = (
        f"its first {SAMPLE_TOKENS:,} tokens were checked against the tokenizer at {info.path} (ids, EOD, decoded "
        "text that encodes back)"
        if info is not None
        else f"its token ids are not checked against the vocabulary of {vocab:,} (no tokenizer_path)"
    )
    warning = Problem(
        "data_paths",
        path,
        f"has no manifest ({Path(path).name}.manifest.json) naming the tokenizer that wrote it: {what}.",
        "prepare it with `nemo-recipes data prepare` (which writes the manifest), or check it with "
        "`nemo-recipes data inspect`.",
        WARNING,
    )
    return [warning, *checked]


def split_documents(documents: int, split: tuple[int, ...] = SPLIT) -> list[int]:
    """Documents in each split of a source, as Megatron-Core cuts them (blended_megatron_dataset_builder: the
    cumulative split fractions times the documents, each rounded with Python's round)."""
    total = float(sum(split))
    bounds = [0.0]
    for part in split:
        bounds.append(bounds[-1] + part / total)
    return [int(round(b * documents)) - int(round(a * documents)) for a, b in pairwise(bounds)]


def _split_problems(source: Source) -> list[Problem]:
    documents = source.documents or 0
    counts = split_documents(documents)
    names = ("train", "validation", "test")
    empty = [name for name, n, part in zip(names, counts, SPLIT, strict=True) if part and not n]
    if not empty:
        return []
    enough = next(n for n in range(1, 10_000) if all(split_documents(n)[i] for i, part in enumerate(SPLIT) if part))
    return [
        Problem(
            "data_paths",
            source.path,
            f"has {documents} document(s): the {SPLIT[0]},{SPLIT[1]},{SPLIT[2]} split gives its "
            f"{' and '.join(empty)} split none, and Megatron-Core never finishes building an empty split "
            "(gpt_dataset._get_num_epochs loops).",
            f"give it at least {enough} documents (cut its text into more documents), or merge it into a larger "
            "source.",
        )
    ]


def _restore_problems(spec: RecipeSpec) -> list[Problem]:
    """plan/restore.py's problems, imported only when a run restores (its pickle import is a cost plan would pay)."""
    if spec.restore_from is None:
        return []
    from nemo_recipes.plan.restore import restore_problems

    return restore_problems(spec)
