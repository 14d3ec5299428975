"""The reader of the files users hand us (YAML, JSON, TOML): exports given to `diff`, cluster profiles, kubeconfigs,
and a NeMo-Run configuration read back as objects (`cli/export.load`: read here as data, then rebuilt from its
`_target_` markers by training/serialization.py); and the atomic writer of the files we hand back (`write_atomic`:
manifests, run cards, calibrations).

Such a file is untrusted input. PyYAML's safe loader still builds whatever the text describes: a few hundred bytes of
nested aliases ("billion laughs") is a graph that any walk expands into 9^9 leaves, thousands of `[` exhaust the
recursion limit, and a key given twice is silently resolved (the last one wins). Here every file is bounded before
anyone walks it: its size, its nesting depth and its size once aliases are expanded; a repeated key is refused
with its line. Each refusal is one Problem naming the file, what is wrong and the fix.

Standard library and PyYAML (imported on first use, so the fast CLI verbs never pay for it).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Optional

from nemo_recipes.errors import InvalidConfigError, Problem
from nemo_recipes.user_paths import not_regular

#: The formats a recipe's configuration is written in (`export --format`) and read back (`diff`, `export.load`),
#: each by its file suffix.
CONFIG_SUFFIXES = {".yaml": "yaml", ".yml": "yaml", ".json": "json", ".toml": "toml"}
CONFIG_FORMATS = ("yaml", "json", "toml")

#: Largest file read (bytes): an export of the largest recipe is about 10 KB, a kubeconfig a few KB.
MAX_BYTES = 4 * 1024 * 1024
#: Deepest nesting of mappings and lists: a recipe export nests about 6 deep, a kubeconfig 4.
MAX_DEPTH = 64
#: Most values once every alias is expanded (what a walk over the data visits): far above any real file.
MAX_NODES = 200_000


class YamlLimitError(Exception):
    """The text is valid YAML, but beyond what we read (the reason says which bound); `line` where known."""

    def __init__(self, reason: str, line: Optional[int] = None):
        super().__init__(reason)
        self.reason, self.line = reason, line


def loads(text: "str | bytes") -> Any:
    """The data of YAML `text`, bounded (see the module); raises YamlLimitError, or PyYAML's YAMLError for text
    that is not YAML."""
    _check_size(text)
    loader = _loader_class()(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _check_expanded_size(node)
        return loader.construct_document(node)
    except RecursionError:
        raise YamlLimitError(f"nests deeper than Python can read (the limit is {MAX_DEPTH} levels)") from None
    finally:
        loader.dispose()


class KeyTwiceError(ValueError):
    """A JSON object that gives one key twice (`keys_once`)."""

    def __init__(self, key: str):
        self.key = key
        super().__init__(f"{key!r} is given twice")


def keys_once(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """json.loads' object_pairs_hook for files we are handed: json.loads keeps the last of two values of one key."""
    found: dict[str, Any] = {}
    for key, value in pairs:
        if key in found:
            raise KeyTwiceError(key)
        found[key] = value
    return found


def json_loads(text: "str | bytes") -> Any:
    """The data of JSON `text`, with the same bounds as YAML: size, depth, and no key twice in an object."""

    _check_size(text)
    try:
        data = json.loads(text, object_pairs_hook=keys_once)
    except KeyTwiceError as error:
        raise YamlLimitError(f"has {error.key!r} twice; JSON readers would silently keep one of them") from None
    except RecursionError:
        raise YamlLimitError(f"nests deeper than Python can read (the limit is {MAX_DEPTH} levels)") from None
    if _depth(data) > MAX_DEPTH:
        raise YamlLimitError(f"nests more than {MAX_DEPTH} levels deep")
    return data


def read_file(path: "str | os.PathLike[str]", *, field: str, fix: str) -> Any:
    """The data of the YAML file `path` (`.json` as JSON, `.toml` as TOML), or one InvalidConfigError naming
    `field` and the file: unreadable, too large, not UTF-8, not YAML, beyond a bound or with a key twice. `fix`
    says how to get a good file."""
    import yaml

    def refuse(message: str, fix: str = fix) -> InvalidConfigError:
        return InvalidConfigError([Problem(field, str(path), message, fix)])

    problem = not_regular(path, field, fix)
    if problem is not None:  # a pipe or a device would block open() or never end
        raise InvalidConfigError([problem])
    try:
        with open(path, "rb") as handle:
            raw = handle.read(MAX_BYTES + 1)
    except OSError as error:
        raise refuse(f"cannot be read: {error.strerror or error}.") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as error:
        raise refuse(f"is not UTF-8 text (byte {error.start}).", "save the file as UTF-8.") from None
    kind = {".json": "JSON", ".toml": "TOML"}.get(os.path.splitext(str(path))[1].lower(), "YAML")
    try:
        return {"JSON": json_loads, "TOML": _toml_loads, "YAML": loads}[kind](text)
    except YamlLimitError as error:
        where = f" (line {error.line})" if error.line else ""
        raise refuse(f"{error.reason}{where}.", limit_fix(error.reason, fix)) from None
    except (yaml.YAMLError, ValueError) as error:
        # Parsers quote the line they stopped at, and a kubeconfig's line may hold a token: the position only.
        # JSON's and TOML's messages name a position and what was expected, never the text.
        mark = getattr(error, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        detail = "" if kind == "YAML" else f": {error}"
        raise refuse(f"is not valid {kind}{where}{detail}.") from None


def _toml_loads(text: str) -> Any:
    """TOML refuses a key twice and has no aliases itself; its depth is bounded as YAML's."""
    import tomllib

    _check_size(text)
    try:
        data = tomllib.loads(text)
    except RecursionError:
        raise YamlLimitError(f"nests deeper than Python can read (the limit is {MAX_DEPTH} levels)") from None
    if _depth(data) > MAX_DEPTH:
        raise YamlLimitError(f"nests more than {MAX_DEPTH} levels deep")
    return data


def _check_size(text: "str | bytes") -> None:
    if len(text) > MAX_BYTES:
        raise YamlLimitError(f"is larger than {MAX_BYTES // (1024 * 1024)} MiB")


def limit_fix(reason: str, fix: str) -> str:
    if "twice" in reason:
        return "keep one of the two entries."
    return f"give a file of ordinary size and shape (no aliases that multiply it); {fix}"


def _loader_class() -> type:
    import yaml

    class BoundedLoader(yaml.SafeLoader):
        """PyYAML's safe loader with a bounded nesting depth, refusing a key given twice in one mapping."""

        _depth = 0

        def compose_node(self, parent: Any, index: Any) -> Any:
            self._depth += 1
            try:
                if self._depth > MAX_DEPTH:
                    mark = self.peek_event().start_mark
                    raise YamlLimitError(f"nests more than {MAX_DEPTH} levels deep", mark.line + 1)
                return super().compose_node(parent, index)
            finally:
                self._depth -= 1

        def construct_mapping(self, node: Any, deep: bool = False) -> dict:
            seen: dict[Any, int] = {}
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":  # `<<: *defaults`: merged by PyYAML, not a repeat
                    continue
                key = self.construct_object(key_node, deep=deep)
                line = key_node.start_mark.line + 1
                try:
                    first = seen.get(key)
                except TypeError:  # an unhashable key: PyYAML reports it below
                    continue
                if first is not None:
                    raise YamlLimitError(
                        f"has {key!r} twice (lines {first} and {line}); YAML would silently keep the second",
                        line,
                    )
                seen[key] = line
            return super().construct_mapping(node, deep=deep)

    return BoundedLoader


def _check_expanded_size(root: Any) -> None:
    """Refuse a node graph whose expansion (every alias copied out, as any walk over the data sees it) holds more
    than MAX_NODES values, or loops back on itself. Counted without expanding: each node once, memoised."""
    sizes: dict[int, int] = {}
    open_nodes: set[int] = set()

    def size(node: Any) -> int:
        key = id(node)
        if key in sizes:
            return sizes[key]
        if key in open_nodes:
            raise YamlLimitError("holds an alias to a value that contains it (a loop)", node.start_mark.line + 1)
        open_nodes.add(key)
        total = 1
        if isinstance(node.value, list):
            for item in node.value:
                parts = item if isinstance(item, tuple) else (item,)
                total += sum(size(part) for part in parts)
                if total > MAX_NODES:
                    raise YamlLimitError(
                        f"expands to more than {MAX_NODES:,} values through its aliases (&anchor/*alias)",
                        node.start_mark.line + 1,
                    )
        open_nodes.discard(key)
        sizes[key] = total
        return total

    size(root)


def _depth(data: Any) -> int:
    depth, level = 0, [data]
    while level:
        depth += 1
        level = [
            child
            for item in level
            if isinstance(item, (dict, list))
            for child in (item.values() if isinstance(item, dict) else item)
        ]
    return depth


# ---- writing ----


def write_atomic(path: Path, data: bytes) -> Path:
    """Write `data` to `path` under a temporary name, fsync it and rename it: `path` is either absent, the old
    file, or complete; never half-written."""
    import tempfile  # here, not at the top: the readers are on `plan`'s fast path, the writer is not

    path = Path(path)
    handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(handle, 0o666 & ~umask())  # mkstemp's file is private; the output is not
        with os.fdopen(handle, "wb") as stream:
            stream.write(data)
            stream.flush()
            os.fsync(stream.fileno())
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    fsync_directory(path.parent)
    return path


def umask() -> int:
    """The process's umask (read by setting it, then set back)."""
    current = os.umask(0o022)
    os.umask(current)
    return current


def fsync_directory(directory: Path) -> None:
    """Make a rename in `directory` durable (a crash after it must not bring back the old name)."""
    try:
        handle = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(handle)
    except OSError:
        pass  # some filesystems refuse fsync on directories; the rename is still atomic
    finally:
        os.close(handle)
