"""The walk of a multi-label input: a metadata file with a `labels` column (conversion.plan.metadata).

As Hugging Face's `imagefolder` allows, the images may sit anywhere below INPUT: no class folders.
The whole input is walked as one folder; each image with a row gets its labels (every class it
names, numbered by the class list: the sorted union of all names, or --labels / `convert --like`'s
classes) as `image/class/label` and `image/class/text` lists. For the split shares, the per-class
counts and the catalog, an image counts as its first label's class (`split_rule exact` keeps that
class's share exact, not every class's).
"""

from __future__ import annotations

from array import array

from img2tfrecord import fs
from img2tfrecord.conversion.plan.labels import class_list
from img2tfrecord.conversion.plan.metadata import Metadata, check_label_names, no_row, no_usable_row, not_found
from img2tfrecord.conversion.plan.splits import EXACT, Discovery, Missing, SplitRule, assemble, split_of
from img2tfrecord.conversion.plan.table import ImageTable, decode_name
from img2tfrecord.conversion.plan.walk import check_input, walk_classes
from img2tfrecord.conversion.plan.walk_remote import stat_remote
from img2tfrecord.conversion.plan.walk_text import junk_note
from img2tfrecord.errors import DataError, option
from img2tfrecord.format.schema import MetaValue, utf8_text


def discover_multi_label(
    input_dir: str,
    meta: Metadata,
    *,
    split: dict[str, float] | None = None,
    seed: int = 0,
    label_offset: int = 0,
    labels: list[str] | None = None,
    known_classes: list[str] | None = None,
    rule: SplitRule = EXACT,
) -> Discovery:
    """`walk.discover` for a metadata file with a `labels` column: every image below INPUT that has a row."""
    assert meta.labels is not None
    remote = check_input(input_dir)
    (found,) = walk_classes([("", "", input_dir)], remote)
    if found.report.error is not None:
        raise DataError(f"cannot list input {input_dir}: {found.report.error}")
    names_found = check_label_names(meta.labels, meta.name)
    no_classes = f"{meta.name} names no class in its {option('labels')} column"
    classes = class_list(names_found, labels, no_classes, known_classes)
    index = {c: i for i, c in enumerate(classes)}
    table = ImageTable(input_dir, remote, classes, [i + label_offset for i in range(len(classes))], split_rel=True)
    groups = [table.new_group("", k) for k in range(len(classes))]
    skipped = [{"path": utf8_text(rel), "split": "", "reason": why} for rel, why in found.report.skipped]
    kept: list[int] = []
    excluded: dict[str, int] = {}
    for i, rel in enumerate(found.names):
        if rel in meta.refused:  # skipped with its row's reason
            continue
        if rel not in meta.rows:
            skipped.append(no_row(meta, rel, split_of(decode_name(rel), seed, split)))
        elif outside := [c for c in meta.labels[rel] if c not in index]:
            excluded[outside[0]] = excluded.get(outside[0], 0) + 1
        else:
            kept.append(i)
    first = [index[meta.labels[found.names[i]][0]] for i in kept]
    numbers = table.extend(
        [groups[k] for k in first],
        [found.names[i] for i in kept],
        array("q", (found.sizes[i] for i in kept)),
        array("q", (found.mtimes[i] for i in kept)),
    )
    per_class: dict[str, dict[str, array]] = {}
    for n, i, k in zip(numbers, kept, first):
        rel = found.names[i]
        names = meta.labels[rel]
        own = (
            MetaValue("image/class/label", "int64", tuple(index[c] + label_offset for c in names)),
            MetaValue("image/class/text", "bytes", tuple(names)),
        )
        table.meta[n] = tuple(sorted(meta.values(rel) + own, key=lambda m: m.key))
        per_class.setdefault(classes[k], {}).setdefault("", array("q")).append(n)
    if remote:
        stat_remote(table)
    ignored = found.ignored - fs.below(meta.path, input_dir)  # the whole-input walk counted it as an ignored file
    out = assemble(
        table,
        per_class,  # type: ignore[arg-type]
        excluded,
        list(split) if split else ["train"],
        presplit=False,
        split=split,
        seed=seed,
        ignored=ignored,
        warnings=[],
        what="class",
        whats="classes",
        no_images=(
            no_usable_row(meta, input_dir, len(found.names), decode_name(found.names[0]))
            if found.names and not any(rel in meta.rows for rel in found.names)
            else f"no images found in {input_dir} that {meta.name} has a row for"
        ),
        rule=rule,
        missing=Missing(
            set(classes) - names_found,
            lambda c: f"no row of {meta.name} names it",
            f"no row of {meta.name} names them",
        ),
    )
    out.skipped = sorted(skipped + meta.skipped + not_found(meta, set(found.names)), key=lambda s: s["path"])
    if note := junk_note(found.report.junk_dirs):
        out.notes.append(note)
    return out
