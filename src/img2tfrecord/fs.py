"""File access for local paths, object stores through fsspec, and TensorFlow's file systems.

Local paths use `os` directly: it is the hot path (one read per image) and needs no TensorFlow.
s3://, az:// and gcs:// go through fsspec (`stores`: s3fs, adlfs, gcsfs); other paths with a
scheme (gs://, ram://) through `tf.io.gfile`. Both answer with gfile's names (`gfile(path)`), so
`s3://bucket/data` or `gs://bucket/data` works for input and output, on both engines, without a
shared local disk.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import posixpath
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple, TypeAlias

import xxhash

from img2tfrecord import stores
from img2tfrecord.errors import DataError, UsageError
from img2tfrecord.tf_import import tensorflow


def is_remote(path: str) -> bool:
    return "://" in path and not path.startswith("file://")


def via_tensorflow(path: str) -> bool:
    """Whether `path` is opened by TensorFlow's own file systems (gs://, ram://), not by `os` or fsspec."""
    return is_remote(path) and not stores.served(path)


def local(path: str) -> str:
    return path[len("file://") :] if path.startswith("file://") else path


def join(base: str, *parts: str) -> str:
    return posixpath.join(base, *parts) if is_remote(base) else os.path.join(base, *parts)


# File systems that tensorflow-io registers (TensorFlow itself has only local and gs://); s3:// and
# az:// are fsspec's (`stores.BACKENDS`).
TF_IO_SCHEMES = frozenset({"hdfs", "viewfs", "har"})
_tf_io: bool | None = None  # tensorflow-io imported in this process (None: not tried)


def below(path: str, folder: str) -> bool:
    """Whether `path` lies inside `folder` (not `folder` itself), as the paths are written: local
    ones made absolute, remote ones compared as prefixes."""
    if is_remote(folder) or is_remote(path):
        return path.startswith(folder.rstrip("/") + "/")
    top = os.path.abspath(folder)
    return os.path.abspath(path).startswith(top.rstrip(os.sep) + os.sep)


def recorded_path(path: str, input_dir: str) -> str:
    """`path` (an input file beside the images: --annotations, --metadata) as dataset.json records
    it: relative to INPUT when it lies inside INPUT, else absolute, so `update` and `convert --like`
    find it from any working folder (`resolve_recorded`); remote paths as they are."""
    if is_remote(path):
        return path
    full = os.path.abspath(path)
    if not is_remote(input_dir) and below(full, input_dir):
        return os.path.relpath(full, os.path.abspath(input_dir)).replace(os.sep, "/")
    return full


def resolve_recorded(recorded: str, input_dir: str) -> str:
    """A path dataset.json records (`recorded_path`) to open: a relative one is INPUT's; one that
    is not there but is from the working folder (datasets made before paths were recorded so) too."""
    if is_remote(recorded) or os.path.isabs(recorded):
        return recorded
    beside = join(input_dir, recorded)
    return recorded if not exists(beside) and os.path.exists(recorded) else beside


def scheme(path: str) -> str:
    return path.split("://", 1)[0].lower() if "://" in path else ""


def gfile(path: str | None = None) -> Any:
    """The calls of `tf.io.gfile` for `path`: an fsspec `stores.Store` for an object store fsspec
    serves (s3://, az://), else `tf.io.gfile` itself; for a path of a tensorflow-io file system,
    with tensorflow-io imported (it registers its file systems on import), in whichever process asks."""
    if path is not None and stores.served(path):
        return stores.Store(path)
    tf = tensorflow()
    if path is not None and scheme(path) in TF_IO_SCHEMES:
        _import_tf_io()
    return tf.io.gfile


def _import_tf_io() -> bool:
    global _tf_io
    if _tf_io is None:
        import importlib.util

        _tf_io = importlib.util.find_spec("tensorflow_io") is not None
        if _tf_io:
            try:
                import tensorflow_io  # noqa: F401 - registers s3://, hdfs://, az://
            except Exception:  # a tensorflow-io built for another TensorFlow: the check below says so
                _tf_io = False
    return _tf_io


def check_remote(path: str, what: str) -> None:
    """One clean error before any work when `path` is on a file system TensorFlow lacks or cannot reach.

    UsageError (exit 2) when TensorFlow has no file system for the scheme (s3:// and hdfs:// need
    tensorflow-io); DataError (exit 1) with the cause when the storage does not answer (network,
    credentials, permissions). Local paths cost nothing.
    """
    if not is_remote(path):
        return
    if stores.served(path):
        _check_store(path, what)
        return
    tf = tensorflow()
    name = scheme(path)
    try:
        gfile(path).exists(path)
    except tf.errors.UnimplementedError:
        if name in TF_IO_SCHEMES and not _import_tf_io():
            raise UsageError(
                f"{what} {path}: TensorFlow reads {name}:// only through tensorflow-io, which is not installed "
                "(or not for this TensorFlow): pip install tensorflow-io"
            ) from None
        raise UsageError(
            f"{what} {path}: TensorFlow has no file system for {name}://; use a local path or gs://"
        ) from None
    except Exception as e:
        msg = (getattr(e, "message", None) or str(e) or type(e).__name__).strip().splitlines()[0]
        if "KeyboardInterrupt" in msg:  # Ctrl-C/SIGTERM while TensorFlow waited on the network, re-wrapped by pybind11
            raise KeyboardInterrupt from None
        raise DataError(f"{what} {path} cannot be reached: {msg}") from None


def _check_store(path: str, what: str) -> None:
    """`check_remote` for an fsspec store: the package (UsageError), the credentials (UsageError
    naming the variables), else whether it answers at all (DataError with the cause)."""
    try:
        gfile(path).exists(path)
    except UsageError as e:  # about this path (a missing package): named as input/output/dataset; else as it is
        raise (UsageError(f"{what} {e}") if str(e).startswith(path) else e) from None
    except Exception as e:
        if stores.missing_credentials(e):
            raise UsageError(
                f"{what} {path}: no credentials for {scheme(path)}://: set {stores.credentials_hint(path)}"
            ) from None
        msg = (str(e) or type(e).__name__).strip().splitlines()[0]
        raise DataError(f"{what} {path} cannot be reached: {msg}") from None


def read_bytes(path: str) -> bytes:
    if is_remote(path):
        with gfile(path).GFile(path, "rb") as f:
            return f.read()
    with open(path, "rb") as f:
        return f.read()


def write_text(path: str, text: str) -> None:
    """Write a small text file so that readers see the old or the new content, never half of it."""
    if is_remote(path):  # object stores publish an object only when its upload completes
        with gfile(path).GFile(path, "w") as f:
            f.write(text)
        return
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def write_bytes(path: str, data: bytes) -> None:
    """`write_text` for bytes: readers see the old or the new content, never half of it."""
    if is_remote(path):
        with gfile(path).GFile(path, "wb") as f:
            f.write(data)
        return
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def exists(path: str) -> bool:
    return gfile(path).exists(path) if is_remote(path) else os.path.exists(path)


def isdir(path: str) -> bool:
    return gfile(path).isdir(path) if is_remote(path) else os.path.isdir(path)


def listdir(path: str) -> list[str]:
    if is_remote(path):
        return [n.rstrip("/") for n in gfile(path).listdir(path)]
    return os.listdir(path)


def makedirs(path: str) -> None:
    if is_remote(path):
        gfile(path).makedirs(path)
    else:
        os.makedirs(path, exist_ok=True)


def remove(path: str) -> None:
    if is_remote(path):
        gfile(path).remove(path)
    else:
        os.remove(path)


def rmtree(path: str) -> None:
    try:
        if is_remote(path):
            if gfile(path).exists(path):
                gfile(path).rmtree(path)
        else:
            shutil.rmtree(path, ignore_errors=True)
    except Exception:  # best effort: cleaning up must never hide the real error
        pass


def rename(src: str, dst: str) -> None:
    """Atomic on a local filesystem; copy-then-delete on object stores (still never a partial dst)."""
    if is_remote(src) or is_remote(dst):
        gfile(src if is_remote(src) else dst).rename(src, dst, overwrite=True)
    else:
        os.replace(src, dst)


# A file system that has no hard links answers link() with one of these (FUSE, SMB, some NFS setups).
_NO_LINKS = frozenset({errno.EPERM, errno.EOPNOTSUPP, errno.ENOTSUP, errno.EXDEV, errno.EMLINK, errno.ENOSYS})


def link_or_copy(src: str, dst: str, follow_symlinks: bool = True) -> bool:
    """Hard-link `src` at `dst` (local paths); where the file system has no hard links, copy it
    instead (in the kernel: `copy_file_range`). True when it was copied."""
    try:
        os.link(src, dst, follow_symlinks=follow_symlinks)
        return False
    except OSError as e:
        if e.errno not in _NO_LINKS:
            raise
    if not follow_symlinks and os.path.islink(src):
        os.symlink(os.readlink(src), dst)
        return True
    copy_file(src, dst)
    return True


def copy_file(src: str, dst: str) -> None:
    """Copy a file's bytes and mode: `copy_file_range` (no bytes through user space; a server-side
    copy on NFS 4.2 and SMB), else a plain copy."""
    with open(src, "rb") as fin, open(dst, "wb") as fout:
        size = os.fstat(fin.fileno()).st_size
        done = 0
        try:
            while done < size:
                n = os.copy_file_range(fin.fileno(), fout.fileno(), size - done)
                if n == 0:
                    break
                done += n
        except (OSError, AttributeError):  # not this file system (or not Linux): byte by byte
            fin.seek(0)
            fout.seek(0)
            fout.truncate()
            shutil.copyfileobj(fin, fout, 1 << 20)
    shutil.copymode(src, dst)


def getsize(path: str) -> int:
    return gfile(path).stat(path).length if is_remote(path) else os.path.getsize(path)


class FileStat(NamedTuple):
    size: int
    mtime_ns: int


def file_stat(path: str) -> FileStat:
    """Size and modification time (ns) of a file: one `stat`, or one `gfile.stat` request remotely."""
    if is_remote(path):
        st = gfile(path).stat(path)
        return FileStat(st.length, st.mtime_nsec)
    local_st = os.stat(path)
    return FileStat(local_st.st_size, local_st.st_mtime_ns)


CHECKSUMS = ("xxh3_128", "sha256", "none")  # of whole shard files, recorded in dataset.json


def hasher(name: str) -> Any:
    """A hashlib-style object for a checksum name: xxh3_128 (~10 GB/s here) or sha256 (~1.8 GB/s)."""
    if name == "xxh3_128":
        return xxhash.xxh3_128()
    if name == "sha256":
        return hashlib.sha256()
    raise ValueError(f"unknown checksum {name!r}")


def checksum(path: str, name: str) -> str:
    """Hex digest of a whole file (`xxhsum -H2` prints the same xxh3_128; `sha256sum` the sha256)."""
    h = hasher(name)
    opener = gfile(path).GFile if is_remote(path) else open
    with opener(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


_SYNC_FILE_RANGE_WRITE = 2
_sync_file_range: Any = None


def start_writeback(fd: int, offset: int, length: int) -> None:
    """Ask the kernel to start writing a range of a file to disk now, without waiting for it.

    Linux keeps up to ~10% of memory dirty before it writes anything back, so without this every
    shard's bytes would wait in memory for the fsync that closes it, and a run's last shards would
    all be flushed at the very end. Started early, the disk works while the CPU converts. Uses
    sync_file_range(SYNC_FILE_RANGE_WRITE) (asynchronous); does nothing where it is missing.
    """
    global _sync_file_range
    if _sync_file_range is None:
        try:
            import ctypes

            fn = ctypes.CDLL(None, use_errno=True).sync_file_range
            fn.argtypes = (ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint)
            _sync_file_range = fn
        except (OSError, AttributeError):
            _sync_file_range = False
    if _sync_file_range:
        _sync_file_range(fd, offset, length, _SYNC_FILE_RANGE_WRITE)


def fsync(path: str) -> None:
    """Make a finished file durable before it is renamed into place (no-op on object stores)."""
    if is_remote(path):
        return
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def read_range(path: str, offset: int, length: int) -> bytes:
    """`length` bytes at `offset`: a Beam worker reads only its shard's slice of the plan file."""
    opener = gfile(path).GFile if is_remote(path) else open
    with opener(path, "rb") as f:
        f.seek(offset)
        return f.read(length)


Listed = stores.Listed


def list_entries(path: str) -> list[Listed]:
    """A remote folder's children: is_dir None when the listing does not say, size and mtime_ns
    when it gives them (fsspec's stores do; TensorFlow's gs:// gives names only: 0).

    Object stores (gs://) mark sub-folders with a trailing '/', so a bucket listing needs no
    per-object request; other filesystems leave the caller to ask `isdir` where it matters.
    """
    g = gfile(path)
    if isinstance(g, stores.Store):
        return g.entries(path)
    return [Listed(n.rstrip("/"), True) if n.endswith("/") else Listed(n, None) for n in g.listdir(path)]


@contextlib.contextmanager
def _as_os_error(path: str) -> Iterator[None]:
    """tf.errors.* of a gfile call as the OSError a local read raises (FileNotFoundError for a
    missing object), so readers catch one kind of error for both. fsspec raises OSErrors already."""
    if stores.served(path):
        yield
        return
    tf = tensorflow()
    try:
        yield
    except tf.errors.NotFoundError as e:
        raise FileNotFoundError(errno.ENOENT, "No such file or directory", path) from e
    except tf.errors.PermissionDeniedError as e:
        raise PermissionError(errno.EACCES, "Permission denied", path) from e
    except tf.errors.OpError as e:
        raise OSError(errno.EIO, (e.message or type(e).__name__).strip().splitlines()[0], path) from e


class RemoteStat(NamedTuple):
    """What `RemotePath.stat()` answers, under `os.stat_result`'s names (the ones readers use)."""

    st_size: int
    st_mode: int
    st_mtime_ns: int


class RemotePath:
    """The part of `pathlib.Path` that reading a dataset uses, for a `tf.io.gfile` path (gs://, ram://).

    `Path("gs://b/out")` would fold the `//` into `gs:/b/out`; this keeps the URL whole, so the
    readers (`format.layout`, `inspect`, `load()`) walk a remote dataset with the same code as a
    local one. Each `stat`, `is_file` or `iterdir` is one request to the store.
    """

    __slots__ = ("_text",)

    def __init__(self, text: str) -> None:
        head, sep, rest = str(text).partition("://")
        rest = posixpath.normpath(rest) if rest.strip("/") else ""
        self._text = f"{head}{sep}{'' if rest == '.' else rest}"

    def __str__(self) -> str:
        return self._text

    def __fspath__(self) -> str:  # what TensorFlow's readers (tf.data, gfile) take
        return self._text

    def __repr__(self) -> str:
        return f"RemotePath({self._text!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, RemotePath) and other._text == self._text

    def __lt__(self, other: RemotePath) -> bool:
        return self._text < other._text

    def __hash__(self) -> int:
        return hash(self._text)

    def __truediv__(self, name: str) -> RemotePath:
        return RemotePath(posixpath.join(self._text, name))

    @property
    def name(self) -> str:
        rest = self._text.partition("://")[2]
        return posixpath.basename(rest) if "/" in rest else ""

    @property
    def parent(self) -> RemotePath:
        head, _, rest = self._text.partition("://")
        return RemotePath(f"{head}://{posixpath.dirname(rest)}") if "/" in rest else self

    def with_name(self, name: str) -> RemotePath:
        return self.parent / name

    def resolve(self) -> RemotePath:
        return self  # no links, no relative parts

    def stat(self) -> RemoteStat:
        import stat as stat_mod

        with _as_os_error(self._text):
            st = gfile(self._text).stat(self._text)
        mode = stat_mod.S_IFDIR if st.is_directory else stat_mod.S_IFREG
        return RemoteStat(int(st.length), mode, int(st.mtime_nsec))

    def _kind(self) -> str | None:
        try:
            if not gfile(self._text).stat(self._text).is_directory:
                return "file"
            # TensorFlow's ram:// calls any string prefix of a file name a directory (ram://o/train-0000
            # of ram://o/train-00000-of-00002); object stores match whole folder names (gs:// asks for
            # "train-0000/"). So on ram:// a directory is one that its parent lists.
            if scheme(self._text) == "ram" and self.name and self.name not in listdir(str(self.parent)):
                return None
            return "dir"
        except Exception:  # NotFoundError, permission: as pathlib, "no" rather than an error
            return None

    def exists(self) -> bool:
        return self._kind() is not None

    def is_file(self) -> bool:
        return self._kind() == "file"

    def is_dir(self) -> bool:
        return self._kind() == "dir"

    def iterdir(self) -> list[RemotePath]:
        return [self / name for name in listdir(self._text)]

    def open(self, mode: str = "r", encoding: str | None = None, errors: str | None = None) -> Any:
        """For reading: a GFile (read, seek, tell) in binary mode; the whole text in memory otherwise
        (the small files a reader opens as text: .idx lists, labels.txt)."""
        if mode not in ("r", "rt", "rb"):
            raise ValueError(f"RemotePath.open: mode {mode!r}: readers only read")
        if mode == "rb":
            with _as_os_error(self._text):  # GFile opens lazily: a missing file shows at the first read
                return gfile(self._text).GFile(self._text, "rb")
        import io

        return io.StringIO(self.read_text(encoding, errors))

    def read_bytes(self) -> bytes:
        with _as_os_error(self._text):
            return read_bytes(self._text)

    def read_text(self, encoding: str | None = None, errors: str | None = None) -> str:
        return self.read_bytes().decode(encoding or "utf-8", errors or "strict")


AnyPath: TypeAlias = Path | RemotePath  # a path readers take: local, or one tf.io.gfile serves


def as_path(path: str | os.PathLike[str]) -> AnyPath:
    """`Path` for a local path (file:// stripped), `RemotePath` for a URL of a tf.io.gfile file system."""
    if isinstance(path, (Path, RemotePath)):
        return path
    text = os.fspath(path)
    return RemotePath(text) if is_remote(text) else Path(local(text))


def children(folder: AnyPath) -> list[AnyPath]:
    """A folder's entries sorted by name (one listing remotely)."""
    return sorted(folder.iterdir(), key=lambda p: p.name)


def open_write(path: str) -> Any:
    """A new binary file for writing: `open`, or a GFile for a remote path (an object appears
    when the GFile is closed)."""
    return gfile(path).GFile(path, "wb") if is_remote(path) else open(path, "wb")


def open_read(path: str | os.PathLike[str]) -> Any:
    """A binary file for reading: `open`, or a GFile (read, seek, tell) for a remote path."""
    text = os.fspath(path)
    return gfile(text).GFile(text, "rb") if is_remote(text) else open(text, "rb")


def spool(path: str) -> str | None:
    """A local file to write `path`'s bytes into before `upload`, for an object store that fsspec
    serves (TensorFlow's record writer writes local files only); None where it writes in place."""
    if not stores.served(path):
        return None
    import tempfile

    fd, tmp = tempfile.mkstemp(prefix="img2tfrecord-", suffix="-" + posixpath.basename(path))
    os.close(fd)
    return tmp


def upload(local_path: str, path: str, *, with_index: bool = False) -> None:
    """`spool`'s file up to `path` (one object, there whole or not at all), its `.idx` first when
    `with_index` (a shard there has its index); the local files removed either way."""
    try:
        if with_index:
            gfile(path).upload(local_path + ".idx", path + ".idx")
        gfile(path).upload(local_path, path)
    finally:
        unspool(local_path)


def unspool(local_path: str | None) -> None:
    """`spool`'s file and its index removed, if there (a shard uploaded, or given up)."""
    if local_path is None:
        return
    for path in (local_path, local_path + ".idx"):
        with contextlib.suppress(OSError):
            os.remove(path)


def opened_size(f: Any) -> int:
    """The size of a file `open_read` opened remotely: a GFile's `size()`, an fsspec file's `size`."""
    size = f.size
    return int(size() if callable(size) else size)
