"""Keep C libraries' chatter off the terminal, and hand it to whoever decoded the image.

libtiff, libpng and libjpeg print warnings with ``fprintf(stderr, ...)`` from C
(``TIFFFetchNormalTag: ... tag is not read``, ``Fax4Decode: Bad code word``): Python's
``sys.stderr`` never sees them; only file descriptor 2 does. So in every process that decodes
images, fd 2 is pointed at an unlinked temporary file while Python's own ``sys.stderr`` (our
messages, the progress bar) keeps writing to the real terminal through a duplicate of the
original descriptor. After each image the decoder calls `take()`: whatever the C libraries said
meanwhile becomes part of that file's skip reason (or is dropped when the image was fine).

Worker processes `install()` it for good; the calling process uses `quiet()` for the length of a
command, which restores both descriptors afterwards. Both nest (and are no-ops when installed).

What is said must belong to the image being read. `reading()` scopes it to one image: fd 2 is
emptied before and read after, under a lock (fd 2 is one per process, so two threads of a process
must not read images at the same time), and the Python log records of the decoders (Pillow's
`logger.error("More samples per pixel than can be decoded: ...")`) are collected for that image
alone instead of reaching a handler, the terminal or fd 2, where they became the skip reason of
whichever image another worker or thread was reading next.
"""

from __future__ import annotations

import contextlib
import functools
import io
import logging
import os
import re
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, TextIO, TypeVar

F = TypeVar("F", bound=Callable[..., Any])

_lock = threading.Lock()
_capture_fd: int | None = None  # the temporary file fd 2 points at
_saved_fd: int | None = None  # the original fd 2 (a duplicate), restored by `release`
_saved_stderr: TextIO | None = None  # sys.stderr replaced by one writing to _saved_fd
_depth = 0
_MAX_KEEP = 4096  # bytes of chatter kept per image: enough for a reason, bounded for a flood


def installed() -> bool:
    return _capture_fd is not None


def install() -> bool:
    """Point fd 2 at a capture file (idempotent). Returns True if this call installed it."""
    global _capture_fd, _saved_fd, _saved_stderr, _depth
    with _lock:
        _depth += 1
        if _capture_fd is not None:
            return False
        try:
            fd = os.open(tempfile.gettempdir(), os.O_RDWR | os.O_APPEND | getattr(os, "O_TMPFILE", 0), 0o600)
        except OSError:  # no O_TMPFILE (not Linux, or a filesystem without it)
            handle, name = tempfile.mkstemp(prefix="img2tfrecord-stderr-")
            os.close(handle)
            fd = os.open(name, os.O_RDWR | os.O_APPEND)
            os.unlink(name)
        try:
            saved = _terminal()
        except OSError:  # no fd 2 at all (daemonised): there is nothing to keep clean
            os.close(fd)
            _depth -= 1
            return False
        with contextlib.suppress(AttributeError, ValueError, OSError):
            sys.stderr.flush()
        if _writes_to_fd2(sys.stderr):
            _saved_stderr = sys.stderr
            sys.stderr = io.TextIOWrapper(
                io.FileIO(os.dup(saved), "w"),
                encoding=getattr(sys.stderr, "encoding", None) or "utf-8",
                errors="backslashreplace",
                line_buffering=True,
                write_through=True,
            )
        os.dup2(fd, 2)
        _capture_fd, _saved_fd = fd, saved
        _advertise(fd, saved)
        _route_decoder_logs()
        return True


def release() -> None:
    """Undo one `install` (the outermost restores fd 2 and sys.stderr)."""
    global _capture_fd, _saved_fd, _saved_stderr, _depth
    with _lock:
        _depth = max(0, _depth - 1)
        if _depth or _capture_fd is None or _saved_fd is None:
            return
        with contextlib.suppress(AttributeError, ValueError, OSError):
            sys.stderr.flush()
        os.dup2(_saved_fd, 2)
        os.close(_saved_fd)
        os.close(_capture_fd)
        _advertise(None, None)
        if _saved_stderr is not None:
            replaced, sys.stderr = sys.stderr, _saved_stderr
            with contextlib.suppress(OSError, ValueError):
                replaced.close()
        _capture_fd = _saved_fd = _saved_stderr = None


# A process spawned while fd 2 is captured inherits the capture file as its fd 2: its "terminal"
# would be its parent's capture, and what it writes there would become the skip reason of the
# image the parent reads at that moment. So the capture is advertised in the environment (which
# spawned processes inherit), with a path that reopens the real terminal (Linux's /proc).
_ENV_CAPTURE, _ENV_TERMINAL = "IMG2TFRECORD_STDERR_CAPTURE", "IMG2TFRECORD_STDERR_TERMINAL"
_env_before: dict[str, str | None] = {}


def _identity(fd: int) -> str:
    st = os.fstat(fd)
    return f"{st.st_dev}:{st.st_ino}"


def _advertise(capture: int | None, terminal: int | None) -> None:
    """Tell processes spawned from now on which file is our capture, and where the terminal is."""
    if capture is None or terminal is None:  # released: what was there before
        for key, value in _env_before.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        _env_before.clear()
        return
    with contextlib.suppress(OSError):
        values = {_ENV_CAPTURE: _identity(capture), _ENV_TERMINAL: f"/proc/{os.getpid()}/fd/{terminal}"}
        for key, value in values.items():
            _env_before.setdefault(key, os.environ.get(key))
            os.environ[key] = value


def _terminal() -> int:
    """A descriptor of the real terminal: fd 2's duplicate, unless fd 2 is a parent's capture
    (then the parent's terminal, reopened; /dev/null if that cannot be: never the capture)."""
    fd = os.dup(2)
    try:
        inherited = os.environ.get(_ENV_CAPTURE) == _identity(fd)
    except OSError:
        inherited = False
    if not inherited:
        return fd
    for path in (os.environ.get(_ENV_TERMINAL, ""), os.devnull):
        with contextlib.suppress(OSError):
            terminal = os.open(path, os.O_WRONLY | os.O_APPEND)
            os.close(fd)
            return terminal
    return fd


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    """C-level stderr captured for the length of the block (restored afterwards)."""
    install()
    try:
        yield
    finally:
        release()


def quieted(fn: F) -> F:
    """Decorator: `fn` runs under `quiet()`."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        with quiet():
            return fn(*args, **kwargs)

    return wrapper  # type: ignore[return-value]


# TensorFlow's and absl's own start-up lines (they may land here while TensorFlow imports in
# another thread): not about any image.
_TF_LOG = re.compile(
    r"^(WARNING: All log messages before absl|[IWEF]\d{4} \d\d:\d\d:\d\d|\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+: [IWEF] "
    r"|To enable the following instructions|oneDNN custom operations|This TensorFlow binary is optimized)"
)


def take(raw: bool = False) -> str:
    """What C code wrote to fd 2 since the last call (at most ~4 KB, one line per message,
    TensorFlow's own log lines left out; `raw`: everything, as written)."""
    fd = _capture_fd
    if fd is None:
        return ""
    try:
        size = os.fstat(fd).st_size
        if not size:
            return ""
        data = os.pread(fd, min(size, _MAX_KEEP), 0)
        os.ftruncate(fd, 0)  # O_APPEND: the next write starts at 0 again
    except OSError:
        return ""
    text = data.decode("utf-8", "replace")
    if raw:
        return text
    lines = [ln.strip() for ln in text.splitlines()]
    return "; ".join(dict.fromkeys(ln for ln in lines if ln and not _TF_LOG.match(ln)))  # repeated warnings once


def _writes_to_fd2(stream: object) -> bool:
    try:
        return stream.fileno() == 2  # type: ignore[attr-defined]
    except (AttributeError, ValueError, OSError, io.UnsupportedOperation):
        return False  # a test runner's buffer, a StringIO: it never reaches fd 2


# ---- what the libraries say about one image ----

_DECODER_LOGGERS = ("PIL",)  # Python loggers of the decoders (Pillow's plugins log under PIL.*)
_reading_lock = threading.RLock()
_current = threading.local()  # .said: the Said of the image this thread is reading, or None


@dataclass
class Said:
    """What the decoders said while one image was read."""

    c: str = ""  # written to fd 2 by C code (see `take`)
    log: list[str] = field(default_factory=list)  # Python log records (warning and above), "level: message"

    def text(self) -> str:
        return "; ".join(dict.fromkeys([*(ln for ln in self.c.split("; ") if ln), *self.log]))


class _ToTheImageBeingRead(logging.Handler):
    """On the decoders' loggers (which no longer propagate): a record made while this thread reads
    an image belongs to that image; any other record goes on to the handlers above, as before."""

    def __init__(self, propagate: bool) -> None:
        super().__init__(logging.NOTSET)
        self.propagate = propagate

    def emit(self, record: logging.LogRecord) -> None:
        said = getattr(_current, "said", None)
        if said is not None and record.levelno >= logging.WARNING:
            with contextlib.suppress(Exception):
                said.log.append(f"{record.levelname.lower()}: {record.getMessage()}")
            return
        parent = logging.getLogger(record.name).parent if self.propagate else None
        while parent is not None and parent.name in _DECODER_LOGGERS:
            parent = parent.parent
        if parent is not None:
            parent.callHandlers(record)


_routes: list[tuple[logging.Logger, logging.Handler]] = []  # (decoder logger, our handler on it)


def _route_decoder_logs() -> None:
    """Put `_ToTheImageBeingRead` on the decoders' loggers (idempotent). Done once, by `install`
    (and by the first `reading`); `reading` only checks that the handler is still there (a
    logging configuration made since may have removed it), not a logger lookup per image."""
    routes = []
    for name in _DECODER_LOGGERS:
        logger = logging.getLogger(name)
        handler = next((h for h in logger.handlers if isinstance(h, _ToTheImageBeingRead)), None)
        if handler is None:
            handler = _ToTheImageBeingRead(logger.propagate)
            logger.addHandler(handler)
            logger.propagate = False
        routes.append((logger, handler))
    _routes[:] = routes


def _routed() -> bool:
    for logger, handler in _routes:
        if handler not in logger.handlers:
            return False
    return bool(_routes)


@contextlib.contextmanager
def reading() -> Iterator[Said]:
    """Collect what the decoders say while the block reads one image (filled in on exit)."""
    if not _routed():
        _route_decoder_logs()
    said = Said()
    with _reading_lock:
        outer = getattr(_current, "said", None)
        take()  # chatter from before this image is not about it
        _current.said = said
        try:
            yield said
        finally:
            said.c = take()
            _current.said = outer
