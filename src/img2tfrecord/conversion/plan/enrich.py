"""Enrichers: what adds to the images the one walk finds (conversion.plan.walk: class folders, or
the whole of INPUT; or a --file-list's rows), each in one place.

The walk only finds files: names, sizes, mtimes, grouped by folder. Whatever else an image gets
comes from an *enricher* the options ask for (conversion.plan.enrichers keeps the list): a metadata
file's rows (features), a multi-label file's labels, an annotation file's boxes, and next a masks
folder. Each enricher says, in one class:

* **columns**: what it adds to an image, by the name of the `Task` field it fills (`meta`:
  features, merged by key with other enrichers'; `objects`: boxes; any other name: a column of
  `ImageTable.columns` and a `Task` field of that name, e.g. a masks folder's `mask` path);
* **skips**: the reasons of the images it leaves out (`skip_reasons`: a test checks each is
  declared), and what it names that no image answers (`leftovers`: a row or a mask without image);
* **record**: its part of dataset.json's `metadata` (`record`; `written`: over the images convert
  wrote, after the encoder's skips; `published`: over the records an update's version holds);
* **stamp**: per image, bytes that change when its contribution does (`stamp`): the catalog keeps
  the digest of every enricher's stamp (format.catalog's `boxes` column, 8 bytes; one stamp alone
  is kept as it is, so a detection dataset's catalog is byte for byte what it was), and `update`
  re-encodes an image whose stamp differs (conversion.versions.changes), plus `input_changed`: its
  input file is not the one dataset.json records.

An enricher that gives each image its classes (`labels_images`: a multi-label file, annotations)
makes the walk take INPUT as one folder, images anywhere below it, instead of class folders.

A masks folder, for example: `columns = ("mask",)`; `enrich` keeps the images with a mask of the
same stem and gives each its mask's path, skipping the others with "no mask in MASKS"; `leftovers`
names the masks of no image found; `stamp` is the mask's size and mtime (8 bytes each), so an
update re-encodes an image whose mask changed; `inputs` holds the masks folder (when it sits at
the top of INPUT it is never walked as a class).

Work per image is the enricher's own and only when it is asked for: the walk of a plain folder
(no enricher) does nothing per image here (bench/plan.py).
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol, runtime_checkable

from img2tfrecord.format.schema import MetaValue

if TYPE_CHECKING:
    from img2tfrecord.conversion.plan.splits import Discovery, Missing
    from img2tfrecord.conversion.plan.table import ImageTable, Task


class Batch(NamedTuple):
    """One listed folder's image candidates, as the walk hands them to the enrichers: `names` below
    `prefix` (b"cat/" for a class folder, b"" for the whole input), sorted, with their columns."""

    prefix: bytes
    split: str  # the split folder it lies in ("" when none)
    names: list[bytes]
    sizes: array
    mtimes: array

    def subset(self, keep: Sequence[int]) -> Batch:
        """The images at positions `keep`, in order."""
        names, sizes, mtimes = self.names, self.sizes, self.mtimes
        return Batch(
            self.prefix,
            self.split,
            [names[i] for i in keep],
            array("q", (sizes[i] for i in keep)),
            array("q", (mtimes[i] for i in keep)),
        )


class Skip(NamedTuple):
    """An image an enricher leaves out, and why (one of its `skip_reasons`, maybe with details)."""

    rel: bytes  # the path below INPUT
    reason: str


class Enriched(NamedTuple):
    """What an enricher made of a `Batch`: the positions it keeps (None: all), one value per kept
    image for each of its columns, and the images it leaves out."""

    keep: Sequence[int] | None
    columns: Mapping[str, Sequence[Any]]
    skips: Sequence[Skip] = ()


@runtime_checkable
class Enricher(Protocol):
    """What adds to the walk's images (see the module docstring). One object per run, made from the
    options (convert) or from dataset.json (update) by its kind in conversion.plan.enrichers."""

    name: str  # what it reads, for messages
    columns: tuple[str, ...]  # the Task fields it fills: "meta", "objects", or its own column's name
    skip_reasons: tuple[str, ...]  # the reasons of its skips (a Skip's reason starts with one)
    labels_images: bool  # it gives every image its classes: the walk takes INPUT whole
    inputs: tuple[str, ...]  # its own files or folders (paths as read): below INPUT, never images nor ignored files

    def enrich(self, batch: Batch) -> Enriched:
        """Which of `batch`'s images stay, their columns, and the skips of the others."""
        ...

    def leftovers(self, seen: set[bytes]) -> list[dict[str, str]]:
        """Skips of what it names that no image found answers (`seen`: every path the walk found),
        and of its own entries it could not use; each {path, split, reason}."""
        ...

    def none_kept(self, input_dir: str, found: int, example: str) -> str:
        """The error when images were found (`found`, e.g. `example`) but it kept none."""
        ...

    def record(self) -> dict[str, Any] | None:
        """Its part of dataset.json's `metadata` (None: nothing)."""
        ...

    def stamp(self, table: ImageTable, i: int) -> bytes | None:
        """Bytes that change when its contribution to image `i` does (None: it has no stamp)."""
        ...

    def input_changed(self, recorded: Mapping[str, Any]) -> bool:
        """Whether its input is not what dataset.json's `metadata` (`recorded`) says it was made from."""
        ...

    def written(self, metadata: dict[str, Any], skipped: list[dict[str, str]], tasks: Iterable[Task]) -> dict[str, Any]:
        """dataset.json's `metadata` over the images convert wrote: `skipped` the encoder's skips,
        `tasks` every planned image (iterate it only when a skip changes what it counted)."""
        ...

    def published(self, metadata: dict[str, Any], rels: Iterable[str]) -> dict[str, Any]:
        """dataset.json's `metadata` over the records an update's new version holds (`rels`, by path;
        iterate it only when it counts something per record)."""
        ...


class Labelled(NamedTuple):
    """What a `Labeller` made of the whole input's `Batch`: an `Enriched` (`keep` never None), and
    per kept image its class (the one its split share counts it in) and split folder."""

    keep: Sequence[int]
    columns: Mapping[str, Sequence[Any]]
    skips: Sequence[Skip]
    cls: Sequence[int]  # index into the class list
    splits: Sequence[str] = ()  # per kept image, the split its folder gives (with `split_keys`)
    split_keys: Sequence[str] = ()  # the splits the images' folders give (presplit), else none
    excluded: Mapping[str, int] = {}  # images of a class --labels leaves out, by class
    warnings: Sequence[str] = ()


@runtime_checkable
class Labeller(Enricher, Protocol):
    """An enricher that gives every image its classes (`labels_images`): a multi-label metadata
    file, annotations. The walk takes INPUT whole (conversion.plan.walk_labels)."""

    def prepare(self, labels: list[str] | None, known_classes: list[str] | None, label_offset: int) -> list[str]:
        """The class list (its own, --labels', or an update's classes with new ones after them), kept for `label`."""
        ...

    def label(self, batch: Batch) -> Labelled:
        """Which of INPUT's images stay, with their classes and columns."""
        ...

    def missing(self) -> Missing | None:
        """The classes of the list that it names no image of, and how to say so (None: not said)."""
        ...

    def done(self, found: Discovery) -> None:
        """Add to the walk's `Discovery` what it counted (a detection walk's boxes per image)."""
        ...


class Kept(NamedTuple):
    """A batch after every enricher: the images kept (and their positions in the batch given), each
    enricher's columns over them, all the skips."""

    batch: Batch
    keep: list[int]
    columns: dict[str, list[Any]]
    skips: list[Skip]


def enrich_batch(enrichers: Sequence[Enricher], batch: Batch) -> Kept:
    """`batch` through every enricher in turn: the images all of them keep, every column over
    those, and every skip (an image one leaves out is not shown to the next)."""
    columns: dict[str, list[Any]] = {}
    skips: list[Skip] = []
    kept = list(range(len(batch.names)))
    for e in enrichers:
        got = e.enrich(batch)
        skips += got.skips
        if got.keep is not None:
            keep = got.keep
            batch = batch.subset(keep)
            kept = [kept[i] for i in keep]
            columns = {k: [v[i] for i in keep] for k, v in columns.items()}
        for k, v in got.columns.items():
            if k in columns and k != "meta":
                raise ValueError(f"two enrichers fill the column {k}")
            columns[k] = [merged_meta(a, b) for a, b in zip(columns[k], v)] if k in columns else list(v)
    return Kept(batch, kept, columns, skips)


def merged_meta(a: tuple[MetaValue, ...], b: tuple[MetaValue, ...]) -> tuple[MetaValue, ...]:
    """Two enrichers' features of one image, sorted by key as a Task holds them."""
    return tuple(sorted(a + b, key=lambda m: m.key))


def fill(table: ImageTable, numbers: Sequence[int], columns: Mapping[str, Sequence[Any]]) -> None:
    """The enrichers' columns of the images just added to `table` (`numbers`, as `table.extend` gave them)."""
    for k, values in columns.items():
        store = table.meta if k == "meta" else table.objects if k == "objects" else table.columns.setdefault(k, {})
        store.update(zip(numbers, values))
