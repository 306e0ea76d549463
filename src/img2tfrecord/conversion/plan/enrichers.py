"""The enrichers (conversion.plan.enrich) the options ask for: the one list of their kinds, read by
`convert` (from the options) and by `update` (from dataset.json) alike, so both run the same walk
with the same enrichers; and the metadata file's two enrichers (features; multi-label classes).

A new input kind is one `Kind` in `KINDS`: how the options ask for it, how dataset.json's
`metadata` gives it back for an update, and its enricher class.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, NamedTuple

from img2tfrecord import fs
from img2tfrecord.conversion.plan.enrich import Batch, Enriched, Enricher, Labelled, Labeller, Skip
from img2tfrecord.conversion.plan.filelist import discover_file_list
from img2tfrecord.conversion.plan.labels import class_list
from img2tfrecord.conversion.plan.like import convert_like_advice
from img2tfrecord.conversion.plan.metadata import (
    Metadata,
    check_label_names,
    file_digest,
    no_usable_row,
    not_found,
    read_metadata,
)
from img2tfrecord.conversion.plan.metadata import find as find_metadata
from img2tfrecord.conversion.plan.splits import Discovery, Missing, SplitRule
from img2tfrecord.conversion.plan.table import ImageTable, Task
from img2tfrecord.conversion.plan.walk import discover
from img2tfrecord.conversion.plan.walk_labels import discover_labelled
from img2tfrecord.errors import UsageError, option
from img2tfrecord.format.schema import MetaValue


class MetadataRows:
    """A metadata file's rows (imagefolder's metadata.jsonl / .csv, no `labels` column): each
    image's features (`meta`); an image with no row is skipped, a row of no image found too."""

    columns: tuple[str, ...] = ("meta",)
    labels_images: bool = False

    def __init__(self, meta: Metadata, entry: dict[str, Any] | None = None) -> None:
        self.meta = meta
        self.name = meta.name
        self.inputs: tuple[str, ...] = (meta.path,)
        self.skip_reasons: tuple[str, ...] = (f"no row in {meta.name}", f"named in {meta.name} but not found")
        self.entry = entry if entry is not None else meta.entry()

    def enrich(self, batch: Batch) -> Enriched:
        rows, refused, values = self.meta.rows, self.meta.refused, self.meta.values
        keep: list[int] = []
        meta: list[tuple[MetaValue, ...]] = []
        skips: list[Skip] = []
        for k, name in enumerate(batch.names):
            rel = batch.prefix + name
            if rel in rows:
                keep.append(k)
                meta.append(values(rel))
            elif rel not in refused:  # a refused row's image is skipped with its row's reason (`leftovers`)
                skips.append(Skip(rel, self.skip_reasons[0]))
        return Enriched(keep, {"meta": meta}, skips)

    def leftovers(self, seen: set[bytes]) -> list[dict[str, str]]:
        return self.meta.skipped + not_found(self.meta, seen)

    def none_kept(self, input_dir: str, found: int, example: str) -> str:
        return no_usable_row(self.meta, input_dir, found, example)

    def record(self) -> dict[str, Any] | None:
        return self.entry

    def stamp(self, table: ImageTable, i: int) -> bytes | None:
        return None  # a changed metadata file is refused by update (`reopen_metadata`): rows cannot change under it

    def input_changed(self, recorded: Mapping[str, Any]) -> bool:
        return self.meta.digest != recorded.get("xxh3_128")

    def written(self, metadata: dict[str, Any], skipped: list[dict[str, str]], tasks: Iterable[Task]) -> dict[str, Any]:
        return metadata  # its entry describes the file, not the images written

    def published(self, metadata: dict[str, Any], rels: Iterable[str]) -> dict[str, Any]:
        return metadata


class MultiLabels(MetadataRows):
    """A metadata file with a `labels` column: each image's classes (every class it names, numbered
    by the class list: the sorted union of all names, or --labels / an update's), as
    `image/class/label` and `image/class/text` lists beside its features. For the split shares,
    the per-class counts and the catalog, an image counts as its first label's class."""

    labels_images: bool = True

    def __init__(self, meta: Metadata, entry: dict[str, Any] | None = None) -> None:
        super().__init__(meta, entry)
        assert meta.labels is not None
        self.labels = meta.labels
        self.named = check_label_names(meta.labels, meta.name)
        self.classes: list[str] = []
        self.offset = 0
        self._found: set[bytes] = set()

    def prepare(self, labels: list[str] | None, known_classes: list[str] | None, label_offset: int) -> list[str]:
        none = f"{self.name} names no class in its {option('labels')} column"
        self.classes, self.offset = class_list(self.named, labels, none, known_classes), label_offset
        return self.classes

    def label(self, batch: Batch) -> Labelled:
        index = {c: i for i, c in enumerate(self.classes)}
        keep: list[int] = []
        excluded: dict[str, int] = {}
        skips: list[Skip] = []
        meta = self.meta
        for i, rel in enumerate(batch.names):
            if rel in meta.refused:  # skipped with its row's reason
                continue
            if rel not in meta.rows:
                skips.append(Skip(rel, self.skip_reasons[0]))
            elif outside := [c for c in self.labels[rel] if c not in index]:
                excluded[outside[0]] = excluded.get(outside[0], 0) + 1
            else:
                keep.append(i)
        values: list[tuple[MetaValue, ...]] = []
        for i in keep:
            rel = batch.names[i]
            names = self.labels[rel]
            own = (
                MetaValue("image/class/label", "int64", tuple(index[c] + self.offset for c in names)),
                MetaValue("image/class/text", "bytes", tuple(names)),
            )
            values.append(tuple(sorted(meta.values(rel) + own, key=lambda m: m.key)))
        cls = array("q", (index[self.labels[batch.names[i]][0]] for i in keep))
        return Labelled(keep, {"meta": values}, skips, cls, excluded=excluded)

    def none_kept(self, input_dir: str, found: int, example: str) -> str:
        if found and not self.meta.rows.keys() & self._found:
            return no_usable_row(self.meta, input_dir, found, example)
        return f"no images found in {input_dir} that {self.name} has a row for"

    def leftovers(self, seen: set[bytes]) -> list[dict[str, str]]:
        self._found = seen
        return super().leftovers(seen)

    def missing(self) -> Missing | None:
        return Missing(
            set(self.classes) - self.named,
            lambda c: f"no row of {self.name} names it",
            f"no row of {self.name} names them",
        )

    def done(self, found: Discovery) -> None:
        pass


def metadata_for_convert(input_dir: str, o: Mapping[str, Any]) -> Enricher | None:
    """The metadata file's enricher: --metadata's file, or one found at the top of INPUT (none
    with --file-list or --annotations); its dataset.json entry names a given file so that it
    resolves from any working folder (fs.recorded_path)."""
    given = o.get("metadata")
    if o.get("file_list") or o.get("annotations") is not None:
        return None
    path = find_metadata(input_dir, given)
    if path is None:
        return None
    meta = read_metadata(path, given is not None)
    entry = meta.entry()
    if given is not None:
        entry["file"] = fs.recorded_path(given, input_dir)
    return MultiLabels(meta, entry) if meta.labels is not None else MetadataRows(meta, entry)


def metadata_for_update(manifest: Mapping[str, Any], input_dir: str, output_dir: str) -> Enricher | None:
    """The metadata file of a dataset made with one (dataset.json's `metadata`), read again; a
    UsageError advising `convert --like` when its bytes changed since: its rows may give the
    records that stay other values, which update, keeping records as they are, cannot write."""
    entry = manifest.get("metadata")
    if not entry or entry.get("detection") or "file" not in entry:  # no metadata file's entry
        return None
    given = (manifest.get("options") or {}).get("metadata")
    given = fs.resolve_recorded(given, input_dir) if isinstance(given, str) else given
    try:
        path = find_metadata(input_dir, given)
    except UsageError:
        path = None
    if path is None or file_digest(path) != entry.get("xxh3_128"):
        what = f"{path or given or fs.join(input_dir, str(entry.get('file')))}"
        now = "changed" if path is not None else "is gone"
        raise UsageError(
            f"the metadata file {what} {now} since {output_dir} was made; update keeps the records it has, "
            "so it cannot take new metadata. To make the dataset again from it, "
            + convert_like_advice(input_dir, output_dir, {})
        )
    meta = read_metadata(path, given is not None)
    return MultiLabels(meta, dict(entry)) if meta.labels is not None else MetadataRows(meta, dict(entry))


class Kind(NamedTuple):
    """An input kind that enriches the walk: its enricher as the options ask for it (convert:
    `plan_options`' values by name; None: not asked) and as dataset.json gives it back (update)."""

    name: str
    for_convert: Callable[[str, Mapping[str, Any]], Enricher | None]  # (INPUT, options)
    for_update: Callable[[Mapping[str, Any], str, str], Enricher | None]  # (dataset.json, INPUT, OUTPUT)


def _boxes_for_convert(input_dir: str, o: Mapping[str, Any]) -> Enricher | None:
    from img2tfrecord.conversion.plan.detection import for_convert

    return for_convert(input_dir, o)


def _boxes_for_update(manifest: Mapping[str, Any], input_dir: str, output_dir: str) -> Enricher | None:
    from img2tfrecord.conversion.plan.detection import for_update

    return for_update(manifest, input_dir, output_dir)


def _masks_for_convert(input_dir: str, o: Mapping[str, Any]) -> Enricher | None:
    from img2tfrecord.conversion.plan.seg_pairs import for_convert

    return for_convert(input_dir, o)


def _masks_for_update(manifest: Mapping[str, Any], input_dir: str, output_dir: str) -> Enricher | None:
    from img2tfrecord.conversion.plan.seg_pairs import for_update

    return for_update(manifest, input_dir, output_dir)


# The kinds, in the order their enrichers see an image (and their stamps are hashed).
KINDS: list[Kind] = [
    Kind("metadata", metadata_for_convert, metadata_for_update),
    Kind("annotations", _boxes_for_convert, _boxes_for_update),
    Kind("masks", _masks_for_convert, _masks_for_update),
]


def for_convert(input_dir: str, options: Mapping[str, Any]) -> list[Enricher]:
    """The enrichers `options` (every plan option by name) ask for."""
    return [e for kind in KINDS if (e := kind.for_convert(input_dir, options)) is not None]


def records(enrichers: Sequence[Enricher]) -> dict[str, Any] | None:
    """dataset.json's `metadata`: every enricher's part, in order (their `columns`, features, together)."""
    out: dict[str, Any] = {}
    for e in enrichers:
        part = e.record()
        if part:
            columns = out.get("columns", {}) | part.get("columns", {})
            out |= part
            if columns:
                out["columns"] = columns
    return out or None


def for_update(manifest: Mapping[str, Any], input_dir: str, output_dir: str) -> list[Enricher]:
    """The enrichers a dataset was made with (its dataset.json), made again from the input now."""
    return [e for kind in KINDS if (e := kind.for_update(manifest, input_dir, output_dir)) is not None]


def discover_input(
    input_dir: str,
    enrichers: Sequence[Enricher],
    *,
    file_list: str | None,
    split: dict[str, float] | None,
    seed: int,
    label_offset: int,
    rule: SplitRule,
    labels: list[str] | None,
    known_classes: list[str] | None,
) -> Discovery:
    """The one walk, convert's and update's: the files of a --file-list's rows or of the folder walk
    (class folders; INPUT whole when an enricher gives the classes), then the enrichers."""
    if file_list:
        if enrichers:  # a --file-list row is the image's whole plan: an enricher would be silently dropped
            raise UsageError(
                f"{option('file_list')} lists each image with its class itself; it does not take "
                f"{', '.join(e.name for e in enrichers)} as well: drop one"
            )
        return discover_file_list(
            input_dir,
            file_list,
            split=split,
            seed=seed,
            label_offset=label_offset,
            rule=rule,
            labels=labels,
            known_classes=known_classes,
        )
    labellers = [e for e in enrichers if isinstance(e, Labeller) and e.labels_images]
    if labellers:
        return discover_labelled(
            input_dir,
            labellers[0],
            [e for e in enrichers if e is not labellers[0]],
            split=split,
            seed=seed,
            label_offset=label_offset,
            rule=rule,
            labels=labels,
            known_classes=known_classes,
        )
    return discover(
        input_dir,
        enrichers=enrichers,
        split=split,
        seed=seed,
        label_offset=label_offset,
        rule=rule,
        labels=labels,
        known_classes=known_classes,
    )
