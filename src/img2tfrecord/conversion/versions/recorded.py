"""The dataset `update` and `compact` start from: its dataset.json and catalog, read and checked once."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from img2tfrecord import fs
from img2tfrecord.conversion.plan.like import rebuild_advice
from img2tfrecord.errors import DataError, UsageError, option
from img2tfrecord.format import catalog as catalog_file
from img2tfrecord.format.catalog import CATALOG_NAME, Catalog
from img2tfrecord.format.conversion_options import ConversionOptions
from img2tfrecord.format.manifest import MANIFEST_NAME, ManifestError, catalog_checksum_problem, parse_manifest


@dataclass
class Recorded:
    """The dataset as it is: dataset.json (text and parsed) and its catalog."""

    text: str
    manifest: dict[str, Any]
    catalog: Catalog

    @property
    def options(self) -> dict[str, Any]:
        """dataset.json's `options` as it holds them (JSON), which a new version writes back."""
        return dict(self.manifest.get("options") or {})

    @property
    def made(self) -> ConversionOptions:
        """How the dataset was made: its options, typed (format.conversion_options)."""
        return ConversionOptions.from_json(self.manifest.get("options"))

    @property
    def classes(self) -> list[str]:
        return list(self.manifest.get("classes") or [])


def read_recorded(output_dir: str, known: Recorded | None = None, input_dir: str | None = None) -> Recorded:
    """OUTPUT's dataset.json and catalog; UsageError when OUTPUT is no dataset `update` can extend,
    DataError when its catalog is not the one written with its shards (`input_dir`: for the advice).

    `known`: what an earlier call read, returned again when dataset.json is the same bytes (every
    publish writes a new dataset.json, with its version, beside its catalog), so the catalog is
    decoded once."""
    path = fs.join(output_dir, MANIFEST_NAME)
    if not fs.exists(path):
        raise UsageError(f"{output_dir} holds no dataset ({MANIFEST_NAME} is missing): run convert first")
    raw = fs.read_bytes(path)
    if known is not None and raw == known.text.encode("utf-8"):
        return known
    try:
        manifest = parse_manifest(raw)  # the one validation every reader of dataset.json uses
    except ManifestError as e:
        raise DataError(f"{path}: {e}") from None
    text = raw.decode("utf-8")
    cpath = fs.join(output_dir, CATALOG_NAME)
    if not fs.exists(cpath):
        raise UsageError(
            f"{output_dir} has no {CATALOG_NAME} (it was converted by a version without one): "
            f"run convert with {option('overwrite', True)} once; later changes can then be applied with update"
        )
    data = fs.read_bytes(cpath)
    try:
        cat = catalog_file.decode(data)
    except catalog_file.CatalogError as e:
        raise DataError(f"{cpath}: {e}; to rebuild the dataset, {rebuild_advice(input_dir, output_dir)}") from None
    problems = catalog_file.count_problems(cat, manifest.get("splits") or {})
    if not problems and (wrong := catalog_checksum_problem(manifest, data)):
        problems = [wrong]
    if problems:
        raise DataError(catalog_mismatch(cpath, problems[0], output_dir, input_dir))
    return Recorded(text, manifest, cat)


def catalog_mismatch(where: str, what: str, output_dir: str, input_dir: str | None = None) -> str:
    """The refusal of a catalog that disagrees with the dataset (update and compact copy records by
    it), naming the convert that rebuilds it (`like.rebuild_advice`)."""
    return (
        f"{where}: {what}: the catalog does not match the shards, so records cannot be copied by it; "
        f"to rebuild the dataset, {rebuild_advice(input_dir, output_dir)}"
    )
