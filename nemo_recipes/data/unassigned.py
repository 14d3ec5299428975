"""Documents the faster encoders leave to the tokenizer's own library: those with a character unassigned in this
Python's Unicode tables (14.0 on 3.11). The split rules of tiktoken, gigatoken and Hugging Face's tokenizers carry
Unicode tables of their own versions: a character assigned since is a letter to one and not to another, and splits
the words differently (U+13CF1, a letter of Unicode 16, with tiktoken; U+325C4 before "'t" with gigatoken, both
measured here). Python's tables are older than theirs, so every such character is unassigned in them."""

from __future__ import annotations

import functools
import re
import unicodedata


@functools.lru_cache(maxsize=1)
def pattern() -> re.Pattern[str]:
    """A character unassigned in Python's Unicode tables (computed once per process: about half a second)."""
    ranges = []
    start = None
    for code in range(0x110000):
        unassigned = unicodedata.category(chr(code)) == "Cn"
        if unassigned and start is None:
            start = code
        elif not unassigned and start is not None:
            ranges.append((start, code - 1))
            start = None
    if start is not None:
        ranges.append((start, 0x10FFFF))
    # The lookahead first: an ASCII character fails it at once, where the class alone tests its hundreds of ranges
    # one after the other (60x slower on English text with a few curly quotes, measured here).
    return re.compile("(?=[^\\x00-\\x7f])[" + "".join(f"\\U{a:08x}-\\U{b:08x}" for a, b in ranges) + "]")


def rare(texts: list[str]) -> list[int]:
    """The positions of the texts with such a character (ASCII texts are skipped without a search)."""
    return [i for i, text in enumerate(texts) if not text.isascii() and pattern().search(text)]
