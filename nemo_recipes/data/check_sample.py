"""The sample of the inputs that the encoder check compares (fast_encoder.check): the first documents at up to 16
points spread over the inputs, about fast_encoder.SAMPLE_CHARS in all.

Where every input is a plain file, the points are byte offsets read with a seek (`at_points`), so the check need not
wait for the shards to be cut: the two run side by side. A compressed file can only be reached by decompressing up to
the point, so with one among the inputs the sample is read from the cut shards (`from_shards`)."""

from __future__ import annotations

from typing import Iterator

from nemo_recipes.data import fast_encoder, sources
from nemo_recipes.data.shard_plan import Shard
from nemo_recipes.data.shard_work import shard_documents

POINTS = 16


def first_documents(shard: Shard, read: sources.ReadOptions, chars: int) -> Iterator[str]:
    """The shard's first documents, up to the one that brings them to `chars` characters."""
    taken = 0
    for text in shard_documents(shard, read, sources.Skipped(), limit=chars):
        yield text
        taken += len(text)
        if taken >= chars:
            return


def from_shards(shards: tuple[Shard, ...], read: sources.ReadOptions) -> list[str]:
    """The first documents of up to POINTS shards spread over the inputs."""
    count = len(shards)
    picked = sorted({i * count // POINTS for i in range(POINTS)} if count > POINTS else range(count))
    chars = max(fast_encoder.SAMPLE_CHARS // max(len(picked), 1), 1 << 14)
    return [text for index in picked for text in first_documents(shards[index], read, chars)]


def at_points(files: list[tuple[sources.InputFile, int]], read: sources.ReadOptions) -> list[str]:
    """The first documents after each of POINTS offsets spread evenly over the plain `files` ((file, size) pairs),
    each from the line that follows its offset. A bad line there is left out of the sample, not reported: its line
    number is not known here, and the shard that holds it reports it, numbered, before anything is written."""
    total = sum(size for _, size in files)
    chars = max(fast_encoder.SAMPLE_CHARS // POINTS, 1 << 14)
    lenient = sources.ReadOptions(read.key, read.max_document_chars, skip_bad_lines=True)
    texts: list[str] = []
    for file, size, point in _located(files, sorted({k * total // POINTS for k in range(POINTS)})):
        with open(file.path, "rb") as stream:
            stream.seek(point)
            if point > 0 and stream.readline() and stream.tell() >= size:
                continue  # the point is on the file's last line
            start = stream.tell() if point > 0 else 0
        shard = Shard(-1, "", file.path, file.format, None, start, size, 1)
        try:
            texts += first_documents(shard, lenient, chars)
        except sources.InvalidDataError:  # a text file that is not UTF-8 there: its shard says where
            continue
    return texts


def _located(
    files: list[tuple[sources.InputFile, int]], points: list[int]
) -> Iterator[tuple[sources.InputFile, int, int]]:
    """(file, its size, the offset in it) of each point, an offset into the files laid end to end."""
    for point in points:
        before = 0
        for file, size in files:
            if point < before + size:
                yield file, size, point - before
                break
            before += size
