"""Documents the faster encoders leave to the tokenizer's own library: those with a character unassigned in this
Python's Unicode tables (14.0 on 3.11). The split rules of tiktoken, gigatoken and Hugging Face's tokenizers carry
Unicode tables of their own versions: a character assigned since is a letter to one and not to another, and splits
the words differently (U+13CF1, a letter of Unicode 16, with tiktoken; U+325C4 before "'t" with gigatoken, both
measured here). Python's tables are older than theirs, so every such character is unassigned in them."""

from __future__ import annotations

import functools
import unicodedata
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy


#: Planes 4 to 13 hold no character in any Unicode version to date (17.0). They are taken as unassigned without
#: asking, which is the safe side: a character there, if one is ever assigned, sends its document to the tokenizer's
#: own library. Looking up their 655,360 code points was 60 % of the table's time, which every run pays before
#: its first shard.
_EMPTY_PLANES = range(4, 14)


@functools.lru_cache(maxsize=1)
def table() -> "numpy.ndarray":
    """Whether each code point is unassigned in Python's Unicode tables (computed once per process, a few hundredths
    of a second; forked workers inherit it)."""
    import numpy

    unassigned = numpy.ones(0x110000, dtype=bool)
    for plane in (p for p in range(17) if p not in _EMPTY_PLANES):
        codes = range(plane << 16, (plane + 1) << 16)
        unassigned[codes.start : codes.stop] = numpy.fromiter(
            (unicodedata.category(chr(code)) == "Cn" for code in codes), dtype=bool, count=len(codes)
        )
    return unassigned


def rare(texts: list[str]) -> list[int]:
    """The positions of the texts with such a character. ASCII texts are skipped at once; the others are looked up
    code point by code point in `table` through NumPy (a regex class of the unassigned ranges ran at 460 ns a
    character on Chinese text, this at a few)."""
    import numpy

    result = []
    for i, text in enumerate(texts):
        if not text.isascii():
            codes = numpy.frombuffer(text.encode("utf-32-le", "surrogatepass"), dtype="<u4")
            if table()[codes].any():
                result.append(i)
    return result
