"""`inspect --extract`: records back to image files, under names that are safe on any file system."""

from __future__ import annotations

import hashlib
import io
import os
import re
from collections.abc import Iterable
from pathlib import Path

from img2tfrecord.errors import DataError, UsageError, option
from img2tfrecord.format.images import _EXTENSIONS, image_problem, sniff_image_format
from img2tfrecord.format.schema import FORMAT_RAW
from img2tfrecord.inspection import outputs
from img2tfrecord.inspection.records import RecordInfo

_MAX_NAME_BYTES = 200  # file systems allow 255 per component; leave room for "~k" and ".png"


def _clip_name(part: str) -> str:
    """A path component short enough for any file system, kept unique by a hash of the original."""
    raw = part.encode("utf-8", "surrogateescape")
    if len(raw) <= _MAX_NAME_BYTES:
        return part
    stem, dot, ext = part.rpartition(".")
    ext = "." + ext if dot and 0 < len(ext) <= 8 else ""
    digest = hashlib.sha1(raw).hexdigest()[:10]
    keep = raw[: _MAX_NAME_BYTES - len(ext) - 11].decode("utf-8", "ignore")
    return f"{keep}~{digest}{ext}"


def _safe_parts(name: str) -> list[str]:
    """Path components of a record's filename that cannot escape the extraction directory."""
    parts = [p for p in re.split(r"[\\/]+", name) if p not in ("", ".")]
    if any(p == ".." or ":" in p for p in parts):
        parts = parts[-1:] if parts and parts[-1] != ".." else []
    return [_clip_name(p.replace("\x00", "_")) for p in parts]


def _safe_name(name: str) -> str:
    name = re.sub(r"[\\/\x00]", "_", name).strip()
    return _clip_name(name) if name not in ("", ".", "..") else "_"


class Extractor:
    """Writes images back to `DIR/<class>/<image/filename>` so `convert DIR` rebuilds them; with
    `by_split` (the records come from more than one split) to `DIR/<split>/<class>/...`, the
    layout `convert` reads as a pre-split input (train, validation, test), so the splits stay
    apart instead of merging (and clashing) in one tree.

    Original bytes are written unchanged; RAW records become PNG. When the content's format does
    not match the file's extension (re-encoded or RAW records), the right extension is appended
    (`dog/a.jpg` -> `dog/a.jpg.png`), which keeps names unique and recognisable.
    """

    def __init__(
        self,
        directory: str | os.PathLike[str],
        limit: int | None,
        by_split: bool = False,
        read: Iterable[str | os.PathLike[str]] = (),
    ) -> None:
        """`read`: the dataset folders being inspected, where DIR must not be (`outputs`)."""
        self.dir = Path(directory)
        given = option("extract_dir", str(self.dir), cli="extract")
        outputs.check_folder(self.dir, given, read)
        if self.dir.exists() and (not self.dir.is_dir() or any(self.dir.iterdir())):
            raise UsageError(
                f"{self.dir}: exists and is not an empty directory; {option('extract_dir', cli='extract')} needs a new or empty one"
            )
        self.limit = limit
        self.by_split = by_split
        self.written = 0
        self.skipped = 0
        self.renamed = 0  # images written under another name than their image/filename (a clash)
        self._used: set[str] = set()
        outputs.make_folder(self.dir, given)

    def _split_dir(self, split: str | None) -> str:
        return _safe_name(split or "unsplit") + "/" if self.by_split else ""

    @property
    def done(self) -> bool:
        return self.limit is not None and self.written >= self.limit

    def add_classes(self, names: Iterable[str], split: str | None = None) -> None:
        """Create every class folder, even empty ones, so labels come out the same on re-convert."""
        for name in names:
            (self.dir / (self._split_dir(split) + _safe_name(name))).mkdir(parents=True, exist_ok=True)

    def add(self, info: RecordInfo, class_name: str | None, split: str | None = None) -> None:
        if self.done:
            return
        if info.image is None:
            self.skipped += 1
            return
        folder = _safe_name(
            class_name if class_name is not None else f"label_{info.label}" if info.label is not None else "unlabelled"
        )
        parts = _safe_parts(info.filename or "") or [f"record-{info.index:08d}"]
        if len(parts) < 2 or parts[0] != folder:  # files go inside class folders, never beside them
            parts = [folder, *parts]
        data = info.image or b""
        content = sniff_image_format(data[:16])
        if info.format == FORMAT_RAW:
            png = _raw_to_png(info)
            if png is None:
                self.skipped += 1
                return
            data, content = png, "PNG"
        ext = _EXTENSIONS[content][0] if content in _EXTENSIONS else ""
        top = self._split_dir(split)
        rel = top + "/".join(parts)
        if ext and content is not None and not rel.lower().endswith(_EXTENSIONS[content]):
            rel += ext
        try:
            unique = self._unique(rel)
            self.renamed += unique != rel
            self._write(unique, data)
        except OSError:  # a name the file system refuses (too long, a file where a folder must go)
            fallback = self._unique(f"{top}{folder}/record-{info.index:08d}{ext}")
            try:
                self._write(fallback, data)
            except OSError as e:
                raise DataError(f"{self.dir / fallback}: cannot write: {e.strerror or e}") from e
        self.written += 1

    def _unique(self, rel: str) -> str:
        """`rel`, or `rel` with ~1, ~2... before its extension if an earlier image (or folder) took the name."""
        base, k = rel, 1
        while rel.lower() in self._used or (self.dir / rel).exists():
            stem, dot, ext = base.rpartition(".")
            rel = f"{stem}~{k}.{ext}" if dot and "/" not in ext else f"{base}~{k}"
            k += 1
        self._used.add(rel.lower())
        return rel

    def _write(self, rel: str, data: bytes) -> None:
        target = self.dir / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        with open(target, "xb") as f:  # never overwrite, never follow a planted link
            try:
                f.write(data)
                f.flush()
            except BaseException:  # a full disk: no half image left behind
                target.unlink(missing_ok=True)
                raise


def _raw_to_png(info: RecordInfo) -> bytes | None:
    """Encode a RAW record's pixels as PNG (lossless, so re-converting gives the same pixels)."""
    import numpy as np
    from PIL import Image

    h, w, c = info.height, info.width, info.channels
    if image_problem(info.image or b"", FORMAT_RAW, h, w, c) is not None:
        return None
    arr = np.frombuffer(info.image, np.uint8).reshape(h, w, c)  # type: ignore[arg-type]
    mode = {1: "L", 2: "LA", 3: "RGB", 4: "RGBA"}[c]  # type: ignore[index]
    img = Image.fromarray(arr[:, :, 0] if c == 1 else arr, mode)
    buf = io.BytesIO()
    img.save(buf, "PNG")
    return buf.getvalue()
