"""Object stores through fsspec: s3:// (s3fs), az:// and abfs:// (adlfs), gcs:// (gcsfs).

TensorFlow dropped s3:// in 2.6 and tensorflow-io does not follow TensorFlow any more, so a path
of these schemes goes through fsspec, the library img2dataset, Hugging Face datasets and pandas
use. `Store` answers with `tf.io.gfile`'s names (exists, listdir, stat, GFile, rename, ...), so
`fs` hands either one to the code that reads and writes a dataset; gs:// and ram:// stay with
TensorFlow's own file systems.

Credentials and endpoints come the way each ecosystem sets them (AWS_* variables and profiles,
AWS_ENDPOINT_URL for MinIO or moto; AZURE_STORAGE_CONNECTION_STRING; Google's ADC and
STORAGE_EMULATOR_HOST), and IMG2TFRECORD_STORAGE_OPTIONS (a JSON object, which worker processes
inherit) adds keyword arguments for the back-end: `{"anon": true}`, `{"requester_pays": true}`.
The CLI's `--storage-option KEY=VALUE` adds to it (`use_options`), so its values reach the workers
the same way and are never written to dataset.json.
"""

from __future__ import annotations

import errno
import json
import os
import posixpath
from collections.abc import Mapping
from typing import Any, NamedTuple

from img2tfrecord.errors import UsageError


class Backend(NamedTuple):
    """An fsspec back-end: the package that implements it and the extra that installs it."""

    package: str
    extra: str
    credentials: str  # what to set when the store answers that it has none


_S3 = Backend("s3fs", "s3", "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or AWS_PROFILE)")
_AZURE = Backend("adlfs", "azure", "AZURE_STORAGE_CONNECTION_STRING (or AZURE_STORAGE_ACCOUNT_NAME and a key)")
_GCS = Backend("gcsfs", "gcs", "GOOGLE_APPLICATION_CREDENTIALS (or gcloud auth application-default login)")

BACKENDS: dict[str, Backend] = {
    "s3": _S3,
    "s3a": _S3,
    "az": _AZURE,
    "abfs": _AZURE,
    "abfss": _AZURE,
    "gcs": _GCS,
}

OPTIONS_ENV = "IMG2TFRECORD_STORAGE_OPTIONS"  # the back-end's keyword arguments, JSON

# What each back-end is given besides the user's options: no listing cache (another process, or
# another run, writes the same bucket: a listing is asked for again rather than remembered).
_DEFAULTS: dict[str, Any] = {"use_listings_cache": False}


def scheme(path: str) -> str:
    return path.split("://", 1)[0].lower() if "://" in path else ""


def served(path: str) -> bool:
    """Whether `path` is one fsspec serves here (its scheme is an object store TensorFlow lacks)."""
    return scheme(path) in BACKENDS


def _options() -> dict[str, Any]:
    text = os.environ.get(OPTIONS_ENV)
    if not text:
        return {}
    try:
        got = json.loads(text)
    except ValueError:
        raise UsageError(f"{OPTIONS_ENV} is not JSON: {text[:80]}") from None
    if not isinstance(got, dict):
        raise UsageError(f"{OPTIONS_ENV} is not a JSON object: {text[:80]}")
    return got


def parse_option(item: str) -> tuple[str, Any]:
    """`KEY=VALUE` of `--storage-option`: VALUE as JSON when it reads as JSON (true, 3, {...}),
    else as text (an endpoint URL, a profile name)."""
    key, sep, value = item.partition("=")
    if not sep or not key.strip():
        raise UsageError(f"--storage-option takes KEY=VALUE, not {item[:80]!r}")
    try:
        return key.strip(), json.loads(value)
    except ValueError:
        return key.strip(), value


def use_options(items: Mapping[str, Any]) -> None:
    """Add `items` to the back-end's keyword arguments of this process and of the worker processes
    it starts (through OPTIONS_ENV, which they inherit); a key given here beats the variable's."""
    if items:
        os.environ[OPTIONS_ENV] = json.dumps(_options() | dict(items), sort_keys=True)


# One file system per scheme, options and credential environment in this process: a notebook that
# sets AWS_ENDPOINT_URL or new keys after a first call gets a file system that uses them (fsspec's
# own cache keys on the arguments alone).
_ENV_PREFIXES = ("AWS_", "AZURE_", "GOOGLE_", "GCSFS_", "STORAGE_EMULATOR_HOST")
_made: dict[tuple[Any, ...], Any] = {}


def filesystem(path: str) -> Any:
    """The fsspec file system for `path`; UsageError naming the package and the extra when the
    back-end is not installed."""
    name = scheme(path)
    backend = BACKENDS[name]
    import importlib.util

    if importlib.util.find_spec(backend.package) is None:
        raise UsageError(
            f"{path}: {name}:// needs {backend.package}, which is not installed: pip install 'img2tfrecord[{backend.extra}]'"
        )
    options = _DEFAULTS | _options()
    env = tuple(sorted((k, v) for k, v in os.environ.items() if k.startswith(_ENV_PREFIXES)))
    key = (os.getpid(), name, json.dumps(options, sort_keys=True, default=str), env)
    made = _made.get(key)
    if made is None:
        import fsspec

        made = _made[key] = fsspec.filesystem(name, skip_instance_cache=True, **options)
    return made


def missing_credentials(e: BaseException) -> bool:
    """Whether an error of a store says it found no credentials (botocore's NoCredentialsError and
    the like), as opposed to credentials it refused or a store it could not reach."""
    names = {type(c).__name__ for c in _chain(e)}
    return bool(names & {"NoCredentialsError", "PartialCredentialsError", "DefaultCredentialsError"})


def _chain(e: BaseException | None) -> list[BaseException]:
    seen: list[BaseException] = []
    while e is not None and e not in seen:
        seen.append(e)
        e = e.__cause__ or e.__context__
    return seen


def credentials_hint(path: str) -> str:
    return BACKENDS[scheme(path)].credentials


class Listed(NamedTuple):
    """A folder's child as a listing gives it: is_dir None when the listing does not say; size and
    mtime_ns 0 when it gives none."""

    name: str
    is_dir: bool | None
    size: int = 0
    mtime_ns: int = 0


class StoreStat(NamedTuple):
    """What `Store.stat` answers, under `tf.io.gfile.stat`'s names."""

    length: int
    mtime_nsec: int
    is_directory: bool


class Store:
    """`tf.io.gfile`'s calls on an fsspec file system (paths keep their scheme in and out)."""

    def __init__(self, path: str) -> None:
        self.scheme = scheme(path)
        self.fs = filesystem(path)

    def _url(self, name: str) -> str:
        return f"{self.scheme}://{name.lstrip('/')}"

    def exists(self, path: str) -> bool:
        return bool(self.fs.exists(path))

    def isdir(self, path: str) -> bool:
        return bool(self.fs.isdir(path))

    def listdir(self, path: str) -> list[str]:
        """Children's names, folders with a trailing '/' (as gs:// answers: no request per child)."""
        out = []
        for entry in self.fs.ls(path, detail=True):
            name = posixpath.basename(entry["name"].rstrip("/"))
            if name:
                out.append(name + "/" if entry.get("type") == "directory" else name)
        return out

    def entries(self, path: str) -> list[Listed]:
        """`listdir` with what the listing says of each object (size, mtime): the walk of a bucket
        input pays no HEAD per image."""
        out = []
        for entry in self.fs.ls(path, detail=True):
            name = posixpath.basename(entry["name"].rstrip("/"))
            if name:
                folder = entry.get("type") == "directory"
                out.append(Listed(name, True if folder else None, int(entry.get("size") or 0), self._mtime(entry)))
        return out

    def _mtime(self, info: Mapping[str, Any]) -> int:
        """S3's listing gives milliseconds and its HEAD whole seconds: whole seconds, so a catalog
        made from either agrees with a listing now."""
        ns = _mtime_ns(info)
        return ns - ns % 1_000_000_000 if BACKENDS[self.scheme] is _S3 else ns

    def makedirs(self, path: str) -> None:
        """Nothing to make below a bucket (keys need no folders); a missing bucket is an error, not
        made (a typo must not create a bucket in someone's account)."""
        bucket = path.split("://", 1)[-1].split("/", 1)[0]
        if not self.fs.exists(bucket):
            raise FileNotFoundError(errno.ENOENT, "no such bucket", f"{self.scheme}://{bucket}")
        self.fs.makedirs(path, exist_ok=True)

    def remove(self, path: str) -> None:
        self.fs.rm_file(path)

    def rmtree(self, path: str) -> None:
        self.fs.rm(path, recursive=True)

    def stat(self, path: str) -> StoreStat:
        info = self.fs.info(path)
        return StoreStat(int(info.get("size") or 0), self._mtime(info), info.get("type") == "directory")

    def GFile(self, path: str, mode: str = "rb") -> Any:  # noqa: N802 - tf.io.gfile's name
        return self.fs.open(path, mode)

    def glob(self, pattern: str) -> list[str]:
        return [self._url(p) for p in self.fs.glob(pattern)]

    def copy(self, src: str, dst: str, overwrite: bool = True) -> None:
        """A server-side copy (S3 CopyObject): no bytes through this machine."""
        self.fs.copy(src, dst)

    def rename(self, src: str, dst: str, overwrite: bool = True) -> None:
        """Copy then delete (object stores have no rename): `dst` is whole or absent, never partial."""
        if not served(src):  # a local file up to the store
            self.fs.put_file(src, dst)
            os.remove(src)
            return
        self.fs.copy(src, dst)
        self.fs.rm_file(src)

    def upload(self, local_path: str, path: str) -> None:
        self.fs.put_file(local_path, path)


def _mtime_ns(info: Mapping[str, Any]) -> int:
    """An object's modification time in ns from its listing: s3fs's LastModified (a datetime),
    gcsfs's `updated` (ISO text), adlfs's last_modified; 0 when the store gives none."""
    import datetime

    for key in ("LastModified", "last_modified", "updated", "mtime"):
        value = info.get(key)
        if isinstance(value, datetime.datetime):
            return int(value.timestamp() * 1_000_000) * 1000
        if isinstance(value, str):
            try:
                return int(datetime.datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp() * 1_000_000) * 1000
            except ValueError:
                continue
        if isinstance(value, (int, float)):
            return int(value * 1_000_000_000)
    return 0
