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


@functools.lru_cache(maxsize=1)
def table() -> "numpy.ndarray":
    """Whether each code point is unassigned in Python's Unicode tables (computed once per process, a fraction of a
    second; forked workers inherit it)."""
    import numpy

    return numpy.fromiter(
        (unicodedata.category(chr(code)) == "Cn" for code in range(0x110000)), dtype=bool, count=0x110000
    )


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
