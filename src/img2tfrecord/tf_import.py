"""Import TensorFlow lazily and quietly.

`import tensorflow` costs ~2.5 s and ~600 MB, so only code that writes or reads TFRecords calls
`tensorflow()`; `img2tfrecord --help` never does. `tensorflow()` maps TensorFlow's main library
first with the GIL released, and drops the clean library pages its start-up touched (below), so
the import peaks at ~350 MB resident instead of ~560. TensorFlow's C++ start-up lines ("Could not find
cuda drivers", cpu_feature_guard, the absl pre-init banner) are printed before
TF_CPP_MIN_LOG_LEVEL can take effect, so during the import file descriptor 2 is pointed at a
temporary file; its content is shown only if the import fails.

Writing shards needs only TensorFlow's C++ record writer, `_pywrap_record_io` (the class
`tf.io.TFRecordWriter` subclasses: same bytes), and `record_io()` loads that extension alone:
0.3-0.5 s, and ~60 MB resident once loaded (see the page drop below), against ~2.5 s and ~550 MB
for all of TensorFlow (measured on 2 cores: that import was ~4 of a 5.5 s conversion's CPU-seconds). Two
things make it safe:

* A failed write (disk full) turns a C++ status into a Python exception through a registry that
  `errors_impl` fills when TensorFlow imports; empty, the process aborts. `record_io()` fills it
  with stand-in classes (`RecordIOError`, one per status code). The registry may be filled only
  once, so the extension module is put in `sys.modules` under its own name, and its `Init` is
  replaced by `_adopt`: when TensorFlow is imported later after all, each stand-in class takes
  TensorFlow's class for its code as a base, so `except tf.errors.NotFoundError` and tf.data's
  end-of-sequence keep working (tests/write/test_light_writer.py runs both orders).
* Loading maps TensorFlow's 1.1 GB library and its start-up code touches ~400 MB of it, which
  then counts in the process's resident set though writing records uses a few MB of it. Those
  pages are clean copies of the library file, so `_drop_clean_library_pages` unmaps them
  (`madvise(MADV_DONTNEED)`; what is used again is faulted back in from the page cache):
  measured 455 MB -> 57 MB resident per writer process, the same after 1,000 writes. The peak
  while loading stays (~420 MB for ~0.3 s): the start-up code runs inside one `dlopen`, under
  the address-space lock a concurrent `madvise` would wait for (tried from a thread).
* Both modules are loaded under their real names, so TensorFlow's own import finds them in
  `sys.modules` instead of loading the same extension twice.

The path is private to TensorFlow: if the files are missing or fail to load, `record_io()` falls
back to importing all of TensorFlow.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import os
import signal
import sys
import tempfile
import threading
from collections.abc import Iterable, Iterator
from types import ModuleType
from typing import Any

from img2tfrecord import cstderr

_lock = threading.RLock()  # record_io() may call tensorflow() while holding it
_tf: ModuleType | None = None
_rio: Any = None

_RECORD_IO = "tensorflow.python.lib.io._pywrap_record_io"
_REGISTRY = "tensorflow.python._pywrap_py_exception_registry"


class RecordIOError(Exception):
    """A TensorFlow status raised by the record writer while only it is loaded (see module doc).

    Built by the C++ side as `cls(None, None, message, ...)`, as TensorFlow builds its OpError."""

    def __init__(self, node_def: Any = None, op: Any = None, message: str = "", *args: Any) -> None:
        super().__init__(message)
        self._message = message

    @property
    def message(self) -> str:
        return self._message

    def __str__(self) -> str:
        return self._message


# One stand-in class per status code (1 CANCELLED ... 16 UNAUTHENTICATED), as TensorFlow's map has.
_STAND_INS: dict[int, type] = {code: type(f"RecordIOError{code}", (RecordIOError,), {}) for code in range(1, 17)}


def tensorflow() -> ModuleType:
    """Return the tensorflow module, importing it once with its start-up chatter silenced."""
    global _tf
    if _tf is not None:
        return _tf
    with _lock:
        if _tf is None:
            _tf = _quiet_import()
    return _tf


def record_io() -> Any:
    """TensorFlow's record I/O extension (`RecordWriter`, `RecordWriterOptions`, `RecordIterator`):
    loaded alone when TensorFlow is not imported yet, else TensorFlow's own."""
    global _rio
    if _rio is not None:
        return _rio
    with _lock:
        if _rio is None:
            _rio = _load_record_io()
    return _rio


@contextlib.contextmanager
def record_io_loading(modules: Iterable[str] = ()) -> Iterator[None]:
    """`record_io()` loading in a thread while the block runs: for a command that will write
    records after importing the rest of the library (update: ~0.17 s of pure-Python imports, then
    the catalog and the walk), so the load (~0.4 s, GIL released: see `_dlopen_released`) overlaps
    them. fd 2 is captured meanwhile (`cstderr.quiet`: TensorFlow's start-up lines go there), the
    extension modules the block imports (`modules`) are imported first (a `dlopen` waits for the
    other thread's), SIGINT/SIGTERM are blocked while the thread starts (it inherits the mask, so
    signals stay with the main thread), and the thread is joined on exit, even through a second
    Ctrl-C: a process must not exit inside `dlopen`. Starting any other thread waits for the load
    too (a reviewer measured 0.24 s for one `Thread.start` during it): the local engine's threads
    start when it ends."""
    with cstderr.quiet():
        for name in modules:
            try:
                importlib.import_module(name)
            except ImportError:
                pass
        global _background
        thread = _background = threading.Thread(target=_load_in_background, name="load-record-writer", daemon=True)
        try:
            blocked = {signal.SIGINT, signal.SIGTERM}
            old = signal.pthread_sigmask(signal.SIG_BLOCK, blocked) if hasattr(signal, "pthread_sigmask") else None
            try:
                thread.start()
            finally:
                if old is not None:
                    signal.pthread_sigmask(signal.SIG_SETMASK, old)
            yield
        finally:
            join_loader(thread)


def join_loader(thread: threading.Thread) -> None:
    """Wait for a thread that loads the writer (if it was started), even through Ctrl-C/SIGTERM: a
    process must not exit inside `dlopen`. An interruption meanwhile is raised again afterwards,
    unless an exception is already on its way out (the caller's `finally`), which says it."""
    interrupted = False
    while thread.ident is not None and thread.is_alive():
        try:
            thread.join(0.1)
        except KeyboardInterrupt:
            interrupted = True
    if interrupted and sys.exc_info()[0] is None:
        raise KeyboardInterrupt


_background: threading.Thread | None = None  # record_io_loading's thread


def record_io_requested() -> bool:
    """Whether the record writer is loaded or loading already (then a second thread for it would
    only wait: a thread's start waits for the other thread's `dlopen`)."""
    return _rio is not None or (_background is not None and _background.is_alive())


def _load_in_background() -> None:
    try:
        record_io()
    except BaseException:  # raised again, with its message, where a shard first needs the writer
        pass


def light() -> bool:
    """Whether the record writer was loaded without the rest of TensorFlow (and it is still not imported)."""
    return _rio is not None and "tensorflow" not in sys.modules


def _load_record_io() -> Any:
    if "tensorflow" in sys.modules or _RECORD_IO in sys.modules:
        return _full_record_io()
    try:
        spec = importlib.util.find_spec("tensorflow")
        root = os.path.dirname(spec.origin) if spec is not None and spec.origin else None
    except (ImportError, ValueError):
        root = None
    if root is None:
        return _full_record_io()
    try:
        registry_so = os.path.join(root, "python", "_pywrap_py_exception_registry.so")
        rio_so = os.path.join(root, "python", "lib", "io", "_pywrap_record_io.so")
        with _fd2_silenced():
            _dlopen_released(rio_so)  # TensorFlow's start-up code, beside our other threads
            registry: Any = _load_extension(_REGISTRY, registry_so)
            rio = _load_extension(_RECORD_IO, rio_so)
            registry.PyExceptionRegistry_Init(_STAND_INS)
    except Exception:
        sys.modules.pop(_REGISTRY, None)
        sys.modules.pop(_RECORD_IO, None)
        return _full_record_io()
    registry.PyExceptionRegistry_Init = _adopt  # TensorFlow's later import must not Init it twice
    _drop_clean_library_pages()
    return rio


def _drop_clean_library_pages() -> None:
    """Unmap the resident pages of TensorFlow's libraries that are unchanged copies of the file.

    Only read-only private mappings with no anonymous (copied-on-write) page qualify: for those,
    MADV_DONTNEED is invisible to the program, since the next access reads the same bytes back
    from the file. Relocated read-only data (RELRO) holds copied pages and is left alone. Linux
    only; anywhere else, or on any error, nothing is done.
    """
    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes

        madvise = ctypes.CDLL(None, use_errno=True).madvise
        madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
        current: tuple[int, int] | None = None
        with open("/proc/self/smaps") as f:
            for line in f:
                if line[0] in "0123456789abcdef" and " " in line and "-" in line.split(" ", 1)[0]:
                    fields = line.split()
                    perms, path = fields[1], fields[-1] if len(fields) > 5 else ""
                    current = None
                    if "libtensorflow" in path and "w" not in perms and perms.endswith("p"):
                        start, end = (int(x, 16) for x in fields[0].split("-"))
                        current = (start, end)
                elif current is not None and line.startswith("Anonymous:"):
                    if line.split()[1] == "0":
                        madvise(current[0], current[1] - current[0], 4)  # MADV_DONTNEED
                    current = None
    except (OSError, ValueError, AttributeError):
        pass


def _full_record_io() -> Any:
    tensorflow()
    return importlib.import_module(_RECORD_IO)


def _dlopen_released(path: str) -> None:
    """Map `path` and its libraries with libc's `dlopen` called through ctypes, which releases the GIL.

    Python's import holds the GIL through `dlopen`, and TensorFlow's start-up code runs inside it
    (~0.45 s): every other thread of the process stopped meanwhile, so a writer loaded "in the
    background" overlapped nothing (measured: a 1 ms ticker thread saw one 0.5 s gap; through
    this call, none over 7 ms). The import that follows finds the library loaded and only runs
    the module's init (~0.03 s). Best effort: on any failure the import does all of it."""
    try:
        import ctypes

        libc = ctypes.CDLL(None)
        libc.dlopen.restype = ctypes.c_void_p
        libc.dlopen.argtypes = [ctypes.c_char_p, ctypes.c_int]
        # RTLD_LAZY: each function bound at its first call instead of all of them at load (measured:
        # 0.36 s against 0.50 s with RTLD_NOW); the import's own dlopen then finds the library loaded
        libc.dlopen(os.fsencode(path), os.RTLD_LAZY)  # the handle is kept: the library stays
    except (OSError, AttributeError, TypeError):
        pass


def _load_extension(name: str, path: str) -> ModuleType:
    if not os.path.exists(path):
        raise ImportError(path)
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    sys.modules[name] = module
    return module


def _adopt(code_to_class: dict[int, type]) -> None:
    """TensorFlow's `errors_impl` registering its classes after `record_io()` registered ours:
    ours become subclasses of its (the C++ registry keeps ours), so TensorFlow catches them."""
    for code, cls in code_to_class.items():
        stand_in = _STAND_INS.get(code)
        if stand_in is not None:
            stand_in.__bases__ = (cls, RecordIOError)


class _fd2_silenced:
    """fd 2 pointed at a scratch file while TensorFlow's libraries load (their start-up lines are
    printed before TF_CPP_MIN_LOG_LEVEL applies); a no-op where cstderr already captures it."""

    def __enter__(self) -> None:
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
        self.saved: int | None = None
        if cstderr.installed():
            return
        try:
            sys.stderr.flush()
        except (AttributeError, ValueError):
            pass
        self.sink = tempfile.TemporaryFile()
        try:
            self.saved = os.dup(2)
        except OSError:
            return
        os.dup2(self.sink.fileno(), 2)

    def __exit__(self, *exc: object) -> None:
        if self.saved is not None:
            os.dup2(self.saved, 2)
            os.close(self.saved)
            self.sink.close()


def _quiet_import() -> ModuleType:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    os.environ.setdefault("ABSL_MIN_LOG_LEVEL", "3")
    if "tensorflow" in sys.modules:
        return sys.modules["tensorflow"]
    if cstderr.installed():  # fd 2 is captured already: its reader drops TensorFlow's lines
        try:
            _preload_tensorflow()
            import tensorflow as tf
        except BaseException:
            sys.stderr.write(cstderr.take(raw=True))
            raise
        return _quiet_loggers(tf)
    try:
        sys.stderr.flush()
    except (AttributeError, ValueError):
        pass
    with tempfile.TemporaryFile() as sink:
        try:
            saved = os.dup(2)
        except OSError:  # no fd 2 (daemonised): nothing to silence
            saved = None
        if saved is not None:
            os.dup2(sink.fileno(), 2)
        try:
            _preload_tensorflow()
            import tensorflow as tf
        except BaseException:
            if saved is not None:
                os.dup2(saved, 2)
                os.close(saved)
                saved = None
                sink.seek(0)
                sys.stderr.write(sink.read().decode("utf-8", "replace"))
            raise
        finally:
            if saved is not None:
                os.dup2(saved, 2)
                os.close(saved)
    return _quiet_loggers(tf)


def _preload_tensorflow() -> None:
    """Map TensorFlow's main library first with the GIL released (`_dlopen_released`): its start-up
    code runs while the process's other threads go on (inspect --verify reads records meanwhile);
    the import then finds it loaded. Then the clean library pages that start-up touched are
    dropped, before the import's own peak adds to them (measured: peak resident 564 -> 354 MB for
    the import). Best effort, like `_dlopen_released`."""
    try:
        spec = importlib.util.find_spec("tensorflow")
    except (ImportError, ValueError):
        return
    if spec is not None and spec.origin:
        path = os.path.join(os.path.dirname(spec.origin), "python", "_pywrap_tensorflow_internal.so")
        if os.path.exists(path):
            _dlopen_released(path)
            _drop_clean_library_pages()


def _quiet_loggers(tf: ModuleType) -> ModuleType:
    _drop_clean_library_pages()  # what the import's start-up touched: ~550 -> ~260 MB resident
    try:
        import absl.logging

        absl.logging.set_verbosity(absl.logging.ERROR)
    except ImportError:
        pass
    tf.get_logger().setLevel("ERROR")
    return tf
