"""The walk of an input whose classes an enricher gives (a `Labeller`, conversion.plan.enrich): a
multi-label metadata file (conversion.plan.enrichers), annotations (conversion.plan.detection).

As Hugging Face's `imagefolder` allows, the images may sit anywhere below INPUT: no class folders.
The whole input is walked as one folder (conversion.plan.walk's `walk_classes`), the labeller keeps
the images it knows and gives each its class (the one its split share and the catalog count it
in), then the other enrichers add their columns, as to a class folder's images.
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from typing import Any

from img2tfrecord import fs
from img2tfrecord.conversion.plan.enrich import Batch, Enricher, Labeller, enrich_batch, fill, merged_meta
from img2tfrecord.conversion.plan.splits import EXACT, Discovery, SplitRule, assemble, split_of
from img2tfrecord.conversion.plan.table import ImageTable, decode_name
from img2tfrecord.conversion.plan.walk import ClassWalk, check_input, walk_classes
from img2tfrecord.conversion.plan.walk_remote import stat_remote
from img2tfrecord.conversion.plan.walk_text import junk_note
from img2tfrecord.errors import DataError
from img2tfrecord.format.schema import utf8_text


def discover_labelled(
    input_dir: str,
    labeller: Labeller,
    others: Sequence[Enricher] = (),
    *,
    split: dict[str, float] | None = None,
    seed: int = 0,
    label_offset: int = 0,
    labels: list[str] | None = None,
    known_classes: list[str] | None = None,
    rule: SplitRule = EXACT,
) -> Discovery:
    """`walk.discover` when `labeller` gives the classes: every image below INPUT that it keeps."""
    remote = check_input(input_dir)
    (found,) = walk_classes([ClassWalk("", "", input_dir)], remote)
    if found.report.error is not None:
        raise DataError(f"cannot list input {input_dir}: {found.report.error}")
    classes = labeller.prepare(labels, known_classes, label_offset)
    table = ImageTable(input_dir, remote, classes, [i + label_offset for i in range(len(classes))], split_rel=True)
    table.enrichers = (labeller, *others)
    groups = [table.new_group("", k) for k in range(len(classes))]
    skipped = [{"path": utf8_text(rel), "split": "", "reason": why} for rel, why in found.report.skipped]
    got = labeller.label(Batch(b"", "", found.names, found.sizes, found.mtimes))
    skipped += [_skip(s.rel, s.reason, seed, split) for s in got.skips]
    kept = Batch(b"", "", found.names, found.sizes, found.mtimes).subset(got.keep)
    columns: dict[str, Sequence[Any]] = dict(got.columns)
    cls, folders = got.cls, got.splits
    if others:
        rest = enrich_batch(others, kept)
        skipped += [_skip(s.rel, s.reason, seed, split) for s in rest.skips]
        kept, cls = rest.batch, [cls[i] for i in rest.keep]
        folders = [folders[i] for i in rest.keep] if folders else folders
        columns = {k: [v[i] for i in rest.keep] for k, v in columns.items()}
        columns.update((k, [*map(merged_meta, columns[k], v)] if k in columns else v) for k, v in rest.columns.items())
    numbers = table.extend([groups[k] for k in cls], kept.names, kept.sizes, kept.mtimes)
    fill(table, numbers, columns)
    keys = list(got.split_keys)
    per_class: dict[str, dict[str, array]] = {}
    for j, (n, k) in enumerate(zip(numbers, cls)):
        per_class.setdefault(classes[k], {}).setdefault(folders[j] if keys else "", array("q")).append(n)
    if remote:
        stat_remote(table)
    enrichers = (labeller, *others)
    seen = {*found.names}
    for e in enrichers:
        skipped += e.leftovers(seen)
    # its own files read below INPUT were counted as ignored non-image files, which they are not
    owned = sum(fs.below(p, input_dir) for e in enrichers for p in e.inputs)
    out = assemble(
        table,
        per_class,  # type: ignore[arg-type]
        dict(got.excluded),
        keys or (list(split) if split else ["train"]),
        presplit=bool(keys),
        split=split,
        seed=seed,
        ignored=max(0, found.ignored - owned),
        warnings=list(got.warnings),
        what="class",
        whats="classes",
        no_images=labeller.none_kept(input_dir, len(found.names), decode_name(found.names[0]) if found.names else ""),
        rule=rule,
        missing=labeller.missing(),
    )
    out.skipped = sorted(skipped, key=lambda s: s["path"])
    if note := junk_note(found.report.junk_dirs):
        out.notes.append(note)
    labeller.done(out)
    return out


def _skip(rel: bytes, reason: str, seed: int, split: dict[str, float] | None) -> dict[str, str]:
    """An enricher's skip as the walk lists it: with the split the image would have gone to."""
    text = decode_name(rel)
    return {"path": utf8_text(text), "split": split_of(text, seed, split), "reason": reason}
