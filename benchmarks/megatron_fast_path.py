"""Megatron-LM's `tools/preprocess_data_fast.py` pipeline, reproduced call for call for megatron-core 0.15.3.

    python benchmarks/megatron_fast_path.py --input CORPUS.jsonl --output-prefix PREFIX --tokenizer-model DIR

Run by `benchmarks/data_prepare.py` with gigatoken and awkward on PYTHONPATH for this process only (they are not
dependencies of this project). Why a reproduction: the fast script (Megatron-LM main, commit 889c909922, PR 6514,
August 2026; in no release tag yet) imports `megatron.core.tokenizers` with gigatoken support and
`IndexedDatasetBuilder.add_documents`, both newer than our megatron-core 0.15.3, and Megatron-LM main's own
megatron-core does not import in this environment (the benchmark tries it first and prints why).

The calls, as in Megatron-LM main:
- `build_tokenizer(args)` with `--tokenizer-type HuggingFaceTokenizer --use-gigatoken`: the tokenizer directory
  loaded by `transformers.AutoTokenizer`, then `gigatoken.Tokenizer(hf).as_hf()`
  (megatron/core/tokenizers/text/libraries/huggingface_tokenizer.py);
- `tokenize_files(input, key)` -> `.tokenizer.encode_files(gigatoken.JsonlFileSource([input], field=key),
  parallel=True)`: every document of the file, threads inside gigatoken (RAYON_NUM_THREADS caps them);
- `IndexedDatasetBuilder(bin, dtype=DType.optimal_dtype(vocab_size))`, then `add_documents(docs, eod_token=eod)`:
  per chunk of 1,000,000 documents, the flattened ids with the end-of-document id after each document, one write,
  the lengths and document indices appended; 0.15.3's builder lacks that method, so `add_documents` below does the
  same with the builder's own fields; then `finalize(idx)`.
"""

from __future__ import annotations

import argparse
import time

CHUNK = 1_000_000


def add_documents(builder, documents, eod_token: int | None) -> None:
    import awkward as ak
    import numpy

    for start in range(0, len(documents), CHUNK):
        chunk = documents[start : start + CHUNK]
        ids = numpy.asarray(ak.flatten(chunk), dtype=builder.dtype)
        lengths = numpy.asarray(ak.num(chunk, axis=1))
        if eod_token is not None:
            ids = numpy.insert(ids, numpy.cumsum(lengths), eod_token).astype(builder.dtype, copy=False)
            lengths = lengths + 1
        builder.data_file.write(ids.tobytes(order="C"))
        del ids
        first = len(builder.sequence_lengths)
        builder.sequence_lengths.extend(lengths.tolist())
        builder.document_indices.extend((first + numpy.arange(1, len(lengths) + 1)).tolist())


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--input", required=True)
    parser.add_argument("--output-prefix", required=True)
    parser.add_argument("--tokenizer-model", required=True)
    parser.add_argument("--json-key", default="text")
    parser.add_argument("--append-eod", action="store_true")
    args = parser.parse_args()
    start = time.perf_counter()

    import gigatoken
    import transformers
    from megatron.core.datasets import indexed_dataset

    hf = transformers.AutoTokenizer.from_pretrained(args.tokenizer_model)
    tokenizer = gigatoken.Tokenizer(hf).as_hf()
    documents = tokenizer.tokenizer.encode_files(
        gigatoken.JsonlFileSource([args.input], field=args.json_key), parallel=True
    )
    level = "document"
    builder = indexed_dataset.IndexedDatasetBuilder(
        f"{args.output_prefix}_{args.json_key}_{level}.bin",
        dtype=indexed_dataset.DType.optimal_dtype(len(hf)),
    )
    add_documents(builder, documents, hf.eos_token_id if args.append_eod else None)
    builder.finalize(f"{args.output_prefix}_{args.json_key}_{level}.idx")
    print(f"{len(documents)} documents; elapsed {time.perf_counter() - start:.2f} s")


if __name__ == "__main__":
    main()
