"""Check that this Python environment holds exactly the stack the project's tests train with.

The GPU image runs this as its last build step, so an image whose NeMo, Megatron-Core or NeMo-Run drifted from
constraints.txt (a base image update, a resolver choice) fails to build instead of failing at a user's first run.

    python docker/check_stack.py constraints.txt --skip torch --require transformer_engine

Every line of the constraints file is checked (`name==version` exactly, other specifiers as ranges); `--skip`
names pins the environment provides otherwise (the GPU image keeps its base's CUDA build of torch);
`--require` names packages that must be installed although no pin names them (Transformer Engine, for FP8).
Exit status: 0 when everything matches, 1 with one line per mismatch otherwise, 2 for a bad argument.
Only the standard library and `packaging` (a pip dependency) are used: it runs before anything else is trusted.
"""

from __future__ import annotations

import argparse
import sys
from importlib import metadata
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name


def pins(path: Path) -> list[Requirement]:
    """The requirements of a constraints file, comments and blank lines dropped."""
    found = []
    for number, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        try:
            found.append(Requirement(line))
        except InvalidRequirement as error:
            raise SystemExit(f"check_stack: {path}:{number}: not a requirement ({error}); fix the line") from None
    return found


def problems(requirements: list[Requirement], skip: set[str], require: list[str]) -> list[str]:
    """One line per package that is missing or outside its pin."""
    found = []
    for requirement in requirements:
        name = canonicalize_name(requirement.name)
        if name in skip:
            continue
        try:
            installed = metadata.version(requirement.name)
        except metadata.PackageNotFoundError:
            found.append(f"{requirement.name}: not installed; constraints.txt pins {requirement.specifier}")
            continue
        # Local version labels (+cu130, +git...) are the builder's, not a different release.
        public = installed.split("+", 1)[0]
        if not requirement.specifier.contains(public, prereleases=True):
            found.append(f"{requirement.name}: {installed} installed; constraints.txt pins {requirement.specifier}")
    for name in require:
        try:
            metadata.version(name)
        except metadata.PackageNotFoundError:
            found.append(f"{name}: not installed; the image needs it (no pin names it)")
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("constraints", type=Path)
    parser.add_argument("--skip", action="append", default=[], metavar="NAME",
                        help="a pin this environment provides otherwise (repeatable)")
    parser.add_argument("--require", action="append", default=[], metavar="NAME",
                        help="a package that must be installed although no pin names it (repeatable)")
    args = parser.parse_args(argv)
    if not args.constraints.is_file():
        print(f"check_stack: {args.constraints}: no such file; pass the project's constraints.txt", file=sys.stderr)
        return 2
    requirements = pins(args.constraints)
    found = problems(requirements, {canonicalize_name(n) for n in args.skip}, args.require)
    for line in found:
        print(f"check_stack: {line}", file=sys.stderr)
    if found:
        print(f"check_stack: {len(found)} package(s) differ from {args.constraints}: install exactly the pins "
              f"(pip install -c {args.constraints} ...) or update the pins with the tests that prove them",
              file=sys.stderr)
        return 1
    checked = [r.name for r in requirements if canonicalize_name(r.name) not in args.skip] + args.require
    print(f"check_stack: {len(checked)} package(s) as pinned: {', '.join(checked)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
