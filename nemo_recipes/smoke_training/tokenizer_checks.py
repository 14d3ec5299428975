"""The judge's check that the run's tokenizer is the data's (tokenizer_probe.py records the run's on rank 0; each
prepared source's manifest says which tokenizer wrote it). Standard library only."""

from __future__ import annotations

from typing import Any, Optional

from nemo_recipes.smoke_training.judge import Check

TOKENIZER_CHECK = "the run's tokenizer is the data's"


def data_tokenizers(data_paths: tuple[str, ...]) -> dict[str, Optional[Any]]:
    """Each source's tokenizer (data.manifest.TokenizerInfo) as its manifest records it; None without a manifest."""
    from nemo_recipes.data.manifest import read_manifest

    found: dict[str, Optional[Any]] = {}
    for prefix in data_paths:
        try:
            found[prefix] = read_manifest(prefix).tokenizer
        except Exception:  # no manifest (Megatron data made elsewhere): nothing recorded to compare with
            found[prefix] = None
    return found


def tokenizer_check(records: list[dict[str, Any]], phases: tuple[str, ...], data: dict[str, Optional[Any]]) -> Check:
    """`data`: `data_tokenizers` of the recipe's sources ({} for the smoke run's own corpus, written as ids)."""
    facts = [r for r in records if r.get("event") == "tokenizer" and r.get("phase") in phases]
    if not facts:
        return Check(TOKENIZER_CHECK, False, "no record of the run's tokenizer")
    known = {prefix: info for prefix, info in data.items() if info is not None}
    if not known:
        why = "sources without a manifest" if data else "the smoke corpus, written as ids without a tokenizer"
        return Check(TOKENIZER_CHECK, True, f"not compared: {why} (the run's {facts[0].get('class')})")
    wrong = []
    for r in facts:
        for prefix, info in known.items():
            if r.get("vocab_size") != info.vocab_size:
                wrong.append(
                    f"{r['phase']}: the run's {r.get('class')} has {r.get('vocab_size')} ids, {prefix}'s manifest "
                    f"{info.vocab_size} ({info.path})"
                )
            if r.get("eod") != info.eod_id:
                wrong.append(f"{r['phase']}: the run's EOD id {r.get('eod')}, {prefix}'s {info.eod_id}")
        trip = r.get("round trip") or {}
        if trip.get("first difference") is not None:
            wrong.append(
                f"{r['phase']}: a document of the data ({trip['ids']} ids) decoded and encoded back by the run's "
                f"tokenizer differs from id {trip['first difference']} on ({trip['back']} ids back)"
            )
    trip = facts[0].get("round trip") or {}
    return Check(
        TOKENIZER_CHECK,
        not wrong,
        "; ".join(wrong[:3])
        or f"rank 0's {facts[0].get('class')}: {facts[0].get('vocab_size')} ids and EOD {facts[0].get('eod')} as the "
        f"manifests of {', '.join(known)} record; a document of {trip.get('ids')} ids decoded and encoded back "
        f"unchanged; in {', '.join(sorted({r['phase'] for r in facts}))}",
    )
