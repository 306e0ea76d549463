"""The Apache Beam engine: the local engine's shard plan, executed by Beam workers.

The plan (which images, in which order, in which shard) is made once by the driver, exactly as for
the local engine. Beam only schedules it: every element is one shard, and a worker encodes that
shard's images in order (`encoder.encode_task`) and writes the whole shard with the same
`writer.write_shard` into the staging folder. The driver then runs the same `finalize` (rebalance
after skips, manifest, atomic publish), so the two engines write byte-identical datasets and Beam
adds no scheduling of our own: retries, autoscaling and placement are the runner's.

Everything a worker needs travels through the output's staging folder (any filesystem TensorFlow
knows: gs://, hdfs://, a local disk for the DirectRunner), never through the pipeline graph:

* ``plan.jsonl``: one JSON line per shard, each image an object keyed by `Task`'s field names
  (`task_to_json`); an element is only (shard, offset, length), so the
  job graph stays a few KB for tens of millions of images (Dataflow rejects graphs over ~10 MB);
* ``<shard>.outcome.json``: what `finalize` needs from a written shard (counts, skipped files),
  read back by the driver after the run. Files, unlike a collected PCollection, work the same on
  every runner.

Beam is noisy (an apitools warning at import, ~60 INFO lines per worker); its logging is set to
ERROR in the driver and the workers, and the DirectRunner's worker processes, which inherit the
driver's stderr, write into a temporary file that is kept only if the run fails.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import logging
import os
import shlex
import sys
import tempfile
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING, Any

from img2tfrecord import cstderr, fs
from img2tfrecord.conversion.encode import example as encoder
from img2tfrecord.conversion.plan.job import PlannedShard, Task
from img2tfrecord.conversion.plan.options import (
    ShardSettings,
)
from img2tfrecord.conversion.plan.raw_boxes import Segment
from img2tfrecord.conversion.plan.table import Objects, first_local_path
from img2tfrecord.conversion.write import shards as writer
from img2tfrecord.conversion.write.shards import ShardOutcome
from img2tfrecord.errors import DataError, UsageError, option
from img2tfrecord.format.schema import MetaValue

if TYPE_CHECKING:
    from img2tfrecord.conversion.events import EventSink
    from img2tfrecord.conversion.plan.job import Plan

INSTALL_HINT = "pip install 'img2tfrecord[beam]'"
PLAN_NAME = "plan.jsonl"
OUTCOME_SUFFIX = ".outcome.json"
LOCAL_RUNNERS = {
    "direct",
    "directrunner",
    "switchingdirectrunner",
    "bundlebaseddirectrunner",
    "fnapirunner",
    "prism",
    "prismrunner",
}
REMOTE_ONLY_RUNNERS = {"dataflow", "dataflowrunner", "testdataflowrunner"}  # workers on other machines, no shared disk
QUIET_LOGGERS = ("apache_beam", "absl", "tensorflow")
IO_THREADS = 32
PREFETCH_BYTES = 64 * 1024 * 1024  # images a worker encodes ahead while TensorFlow imports


def _quiet_loggers() -> None:
    """Beam/absl/TF logging to ERROR, unless the embedding application chose a level itself."""
    for name in QUIET_LOGGERS:
        logger = logging.getLogger(name)
        if logger.level == logging.NOTSET:
            logger.setLevel(logging.ERROR)


@contextmanager
def _no_basic_config() -> Iterator[None]:
    """Beam's own `logging.basicConfig()` calls made harmless for the length of the block.

    ``PipelineOptions()`` and ``Pipeline()`` call ``logging.basicConfig()``, and Beam logs "apitools
    not found" through the root logger at import, which does the same: with no handler configured,
    each gives the root logger a stderr handler for the rest of the process. Under `convert` that
    stderr is `cstderr`'s temporary duplicate of the terminal: after the run it is closed, and the
    process's (the embedding application's) later log records end in "--- Logging error ---" while
    its own ``logging.basicConfig(...)`` silently does nothing. A throw-away handler on the root
    logger while Beam is called keeps basicConfig a no-op; an application's own handlers stay.
    """
    root = logging.getLogger()
    guard = logging.NullHandler() if not root.handlers else None
    if guard:
        root.addHandler(guard)
    try:
        yield
    finally:
        if guard:
            root.removeHandler(guard)


def import_beam() -> ModuleType:
    """Import apache_beam without its start-up warning, or raise a UsageError saying how to install it."""
    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.ERROR)
    try:
        with _no_basic_config():
            import apache_beam
            import apache_beam.options.pipeline_options
    except ImportError:
        raise UsageError(
            f"{option('engine', 'beam')} needs Apache Beam, which is not installed: {INSTALL_HINT}"
        ) from None
    finally:
        root.setLevel(level)
    _quiet_loggers()
    return apache_beam


try:  # the DoFn below must subclass beam.DoFn; without Beam this module still imports (for the hint)
    _beam: ModuleType | None = import_beam()
    _DoFn: type = _beam.DoFn  # type: ignore[union-attr]
except UsageError:
    _beam, _DoFn = None, object


def split_options(beam_options: str | list[str] | None) -> list[str]:
    """--beam-options as a shell would split it ("--runner=X --project 'my p'")."""
    if beam_options is None:
        return []
    if isinstance(beam_options, str):
        try:
            return shlex.split(beam_options)
        except ValueError as e:
            raise UsageError(f"bad --beam-options {beam_options!r}: {e}") from None
    return [str(a) for a in beam_options]


def _given(flags: list[str], name: str) -> bool:
    return any(f == name or f.startswith(name + "=") for f in flags)


@_no_basic_config()  # PipelineOptions() calls logging.basicConfig()
def given_runner(flags: list[str]) -> str:
    """The runner the flags select, as the user spelled it ('DirectRunner' by default)."""
    from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions

    return str(PipelineOptions(flags).view_as(StandardOptions).runner or "DirectRunner")


def runner_name(flags: list[str]) -> str:
    """The runner the flags select, lower-cased and without its module ('directrunner' by default)."""
    return given_runner(flags).rsplit(".", 1)[-1].lower()


def pipeline_flags(beam_options: str | list[str] | None, workers: int, shards: int) -> list[str]:
    """The user's flags plus our defaults for what they did not say.

    DirectRunner: multi-processing over min(--workers, shards) processes (a shard is the unit of
    work; in-memory mode would run everything in this one process). Every runner: SDK harness
    logging at ERROR, so workers do not log their start-up at INFO.
    """
    flags = split_options(beam_options)
    if not _given(flags, "--runner"):
        flags.insert(0, "--runner=DirectRunner")
    if runner_name(flags) in LOCAL_RUNNERS - {"prism", "prismrunner"}:
        if not _given(flags, "--direct_running_mode"):
            flags.append("--direct_running_mode=multi_processing")
        if not _given(flags, "--direct_num_workers"):
            flags.append(f"--direct_num_workers={max(1, min(workers, shards))}")
    if not _given(flags, "--default_sdk_harness_log_level"):
        flags.append("--default_sdk_harness_log_level=ERROR")
    return flags


def unknown_options(flags: list[str]) -> list[str]:
    """Flags no Beam option class knows (Beam would drop them with a log line nobody sees)."""
    try:
        import difflib

        from apache_beam.options import pipeline_options as po

        parser = po._BeamArgumentParser(allow_abbrev=False)
        for cls in {str(c): c for c in po.PipelineOptions.__subclasses__()}.values():
            cls._add_argparse_args(parser)
        _, unknown = parser.parse_known_args(flags)
        known = [o for a in parser._actions for o in a.option_strings]
    except Exception:  # a private API changed: skip the courtesy check
        return []
    out = []
    for arg in unknown:
        if arg.startswith("--"):
            close = difflib.get_close_matches(arg.split("=", 1)[0], known, n=1)
            out.append(arg + (f" (did you mean {close[0]}?)" if close else ""))
    return out


@_no_basic_config()
def preflight(beam_options: str | list[str] | None, input_dir: str, output_dir: str) -> None:
    """Cheap checks before the input is listed: Beam installed, options parse, paths fit the runner."""
    import_beam()
    from apache_beam.runners.runner import create_runner

    flags = split_options(beam_options)
    runner, name = runner_name(flags), given_runner(flags)
    try:
        create_runner(name)  # cheap; fails for unknown names and runners whose extra is missing
    except ImportError as e:
        raise UsageError(f"--runner={name}: {e}") from None
    except Exception as e:
        raise UsageError(f"bad {option('beam_options')}: {_last_line(e)}") from None
    if runner in REMOTE_ONLY_RUNNERS and not fs.is_remote(output_dir):
        raise UsageError(
            f"--runner={name}: workers run on other machines and cannot write the local folder {output_dir}; "
            "give a bucket, e.g. gs://my-bucket/out"
        )
    if runner in REMOTE_ONLY_RUNNERS and importlib.util.find_spec("apitools") is None:
        raise UsageError(f"--runner={name} needs Beam's Google Cloud libraries: pip install 'apache-beam[gcp]'")


@dataclass
class BeamEngine:
    """An Apache Beam pipeline, one element per shard (`--beam-options` choose the runner)."""

    beam_options: str | list[str] | None = None
    workers: int | None = None  # DirectRunner processes (default: all CPUs)
    name: str = "beam"
    resumable: bool = False  # runners retry failed work themselves

    def run(self, plan: Plan, staging: str, settings: ShardSettings, emit: EventSink) -> list[ShardOutcome]:
        return run_beam(plan, staging, settings, self.beam_options, emit, self.workers)


@_no_basic_config()
def run_beam(
    plan: Plan,
    staging: str,
    settings: ShardSettings,
    beam_options: str | list[str] | None,
    emit: EventSink,
    workers: int | None = None,
) -> list[ShardOutcome]:
    """Run `plan.shards` on Beam (one element per shard) and return the outcomes in plan order."""
    beam = import_beam()
    from apache_beam.options.pipeline_options import PipelineOptions

    flags = pipeline_flags(beam_options, workers or os.cpu_count() or 1, len(plan.shards))
    runner = runner_name(flags)
    for arg in unknown_options(flags):
        emit("warning", f"{option('beam_options')}: Beam does not know {arg}; it is passed on unchanged")
    if runner in REMOTE_ONLY_RUNNERS:
        local = next(filter(None, (first_local_path(s.tasks) for s in plan.shards)), None)
        if local:
            raise UsageError(
                f"--runner={given_runner(flags)}: workers cannot read the local file {local}; put the images in a bucket (gs://...)"
            )
    elements = write_plan(plan.shards, fs.join(staging, PLAN_NAME))
    fn = WriteShardFn(staging, fs.join(staging, PLAN_NAME), settings)
    try:
        pipeline = beam.Pipeline(options=PipelineOptions(flags))
        _ = pipeline | "Shards" >> beam.Create(elements) | "EncodeAndWriteShard" >> beam.ParDo(fn)
    except Exception as e:  # unknown runner, options the runner rejects
        raise UsageError(f"bad --beam-options {' '.join(split_options(beam_options))!r}: {_last_line(e)}") from None
    result = None
    with _captured_stderr(runner in LOCAL_RUNNERS) as log:
        try:
            result = pipeline.run()
            job_id = getattr(result, "job_id", None)
            if runner not in LOCAL_RUNNERS and callable(job_id):
                emit("note", f"{given_runner(flags)} job {job_id()} is running; waiting for it to finish")
            result.wait_until_finish()
            state = str(getattr(result, "state", "DONE"))
        except KeyboardInterrupt:
            if result is not None and runner not in LOCAL_RUNNERS:
                _cancel(result, emit)  # a cluster job would otherwise go on writing into staging
            raise
        except Exception as e:
            saved = _save_log(log, e)
            raise DataError(f"the Beam pipeline failed: {_last_line(e)} (full log: {saved})") from None
    if "DONE" not in state.upper():
        raise DataError(f"the Beam pipeline ended in state {state}; nothing was published")
    outcomes = read_outcomes(plan.shards, staging)
    for o in outcomes:
        for s in o.skipped:
            emit("skipped", f"{s['path']}: {s['reason']}")
    return outcomes


def _cancel(result: object, emit: EventSink) -> None:
    try:
        result.cancel()  # type: ignore[attr-defined]
        emit("note", "the Beam job was cancelled")
    except Exception as e:  # already finished, or the runner cannot cancel
        emit("warning", f"could not cancel the Beam job ({_last_line(e)}); stop it in the runner's console")


class WriteShardFn(_DoFn):  # type: ignore[misc, valid-type]
    """Encode and write one whole shard per element; leave its outcome next to it in staging.

    Picklable by reference (a module-level class holding strings and a frozen dataclass), so it
    works in DirectRunner worker processes and on remote workers that have img2tfrecord installed.
    `strict` is not applied here: a worker cannot stop the others, so `finalize` enforces it.
    """

    def __init__(self, staging: str, plan_path: str, settings: ShardSettings) -> None:
        super().__init__()
        self.staging = staging
        self.plan_path = plan_path
        self.settings = dataclasses.replace(settings, strict=False)

    def setup(self) -> None:
        """Quiet the worker's logging; load the record writer (TensorFlow's alone for local
        staging, ~0.4 s; all of TensorFlow for gs://, ~3 s; once per worker) in the background."""
        _quiet_loggers()
        if not cstderr.installed():  # a worker process (in-process runners run under convert's)
            cstderr.install()
        self._tf_thread = threading.Thread(
            target=writer.preload_writer, args=(self.staging,), name="import-tensorflow", daemon=True
        )
        self._tf_thread.start()

    def process(self, element: tuple[int, int, int]) -> Iterator[str]:
        _, offset, length = element
        shard = shard_from_json(fs.read_range(self.plan_path, offset, length))
        tf_thread = getattr(self, "_tf_thread", None)
        stream = encoder.encode_shard(
            shard.tasks, self.settings.encode, tf_thread.is_alive if tf_thread else None, PREFETCH_BYTES
        )
        writer.load_writer(self.staging)  # joins the import (needed to write), or raises its error here
        outcome = writer.write_shard(shard, stream, self.staging, self.settings)
        fs.write_text(fs.join(self.staging, shard.name + OUTCOME_SUFFIX), json.dumps(outcome.to_dict()))
        if _beam is not None:
            counter = _beam.metrics.Metrics.counter
            counter("img2tfrecord", "images").inc(outcome.images)
            counter("img2tfrecord", "skipped").inc(len(outcome.skipped))
            counter("img2tfrecord", "shards").inc()
        yield shard.name


def shard_to_json(shard: PlannedShard) -> bytes:
    """One plan line. ASCII JSON keeps undecodable file names (surrogate escapes) intact."""
    tasks = [task_to_json(t) for t in shard.tasks]  # this shard's Tasks, made from the plan's table now
    line = {"split": shard.split, "index": shard.index, "count": shard.count, "tasks": tasks}
    return json.dumps(line, separators=(",", ":")).encode("ascii")


def shard_from_json(data: bytes) -> PlannedShard:
    d = json.loads(data)
    return PlannedShard(
        split=d["split"], index=d["index"], count=d["count"], tasks=tuple(task_from_json(t) for t in d["tasks"])
    )


def task_to_json(task: Task) -> dict[str, Any]:
    """A Task as its plan-file entry: every field by its name, and so are those of the `Objects`,
    `Segment`s and `MetaValue`s inside it, so no reader depends on the order of fields. A field at
    its default is left out (`task_from_json` gives it back): with no keys but names, a plain
    image's line is no longer than the positional list it replaces."""
    return _named(task)  # type: ignore[no-any-return]


def _named(v: Any) -> Any:
    if dataclasses.is_dataclass(v) and not isinstance(v, type):  # Task, Objects
        named = {}
        for f in dataclasses.fields(v):
            value = getattr(v, f.name)
            if f.default is dataclasses.MISSING or value != f.default:
                named[f.name] = _named(value)
        return named
    if isinstance(v, tuple) and hasattr(v, "_fields"):  # a NamedTuple (Segment, MetaValue)
        return {k: _named(x) for k, x in zip(v._fields, v)}
    if isinstance(v, (tuple, list)):
        return [_named(x) for x in v]
    return v


def task_from_json(d: dict[str, Any]) -> Task:
    """A Task from its plan-file entry: JSON's lists back to the tuples the local engine holds,
    the metadata features, boxes and masks back to their named types. A field the entry does not
    know is refused (TypeError), one it leaves out takes its default."""
    fields = {k: _tuples(v) for k, v in d.items() if k not in ("meta", "objects")}
    meta = tuple(MetaValue(**{k: _tuples(v) for k, v in m.items()}) for m in d.get("meta", ()))
    objects = d.get("objects")
    return Task(**fields, meta=meta, objects=None if objects is None else _objects(objects))


def _objects(d: dict[str, Any]) -> Objects:
    masks = d.get("masks")  # --masks: each Segment by its field names
    segments = None if masks is None else tuple(Segment(**{k: _tuples(v) for k, v in m.items()}) for m in masks)
    return Objects(**{k: _tuples(v) for k, v in d.items() if k != "masks"}, masks=segments)


def _tuples(v: Any) -> Any:
    """JSON's (nested) lists as tuples."""
    return tuple(map(_tuples, v)) if isinstance(v, list) else v


def write_plan(plan: list[PlannedShard], path: str) -> list[tuple[int, int, int]]:
    """Write the plan file; return one (shard number, offset, length) element per shard."""
    elements, pos = [], 0
    opener = fs.gfile(path).GFile if fs.is_remote(path) else open
    with opener(path, "wb") as f:
        for i, shard in enumerate(plan):
            line = shard_to_json(shard) + b"\n"
            f.write(line)
            elements.append((i, pos, len(line)))
            pos += len(line)
    return elements


def read_outcomes(plan: list[PlannedShard], staging: str) -> list[ShardOutcome]:
    """The outcome each worker left in staging, in plan order (read concurrently on object stores)."""

    def read(shard: PlannedShard) -> ShardOutcome:
        path = fs.join(staging, shard.name + OUTCOME_SUFFIX)
        try:
            return ShardOutcome.from_dict(json.loads(fs.read_bytes(path)))
        except Exception:
            raise DataError(
                f"the Beam pipeline finished but shard {shard.name} left no result ({path}); nothing was published"
            ) from None

    if not fs.is_remote(staging):
        return [read(s) for s in plan]
    with ThreadPoolExecutor(IO_THREADS, thread_name_prefix="outcomes") as pool:
        return list(pool.map(read, plan))


@dataclasses.dataclass
class _Log:
    """Where the DirectRunner workers' stderr went, and whether to keep it (failed runs only)."""

    path: str | None = None
    keep: bool = False


@contextmanager
def _captured_stderr(enabled: bool) -> Iterator[_Log]:
    """Point file descriptor 2 at a temporary file (DirectRunner workers inherit it)."""
    log = _Log()
    if not enabled:
        yield log
        return
    fd, log.path = tempfile.mkstemp(prefix="img2tfrecord-beam-", suffix=".log")
    try:
        sys.stderr.flush()
    except (AttributeError, ValueError):
        pass
    try:
        saved: int | None = os.dup(2)
    except OSError:  # no fd 2 (daemonised): nothing to capture
        saved = None
    if saved is not None:
        os.dup2(fd, 2)
    try:
        yield log
    finally:
        if saved is not None:
            os.dup2(saved, 2)
            os.close(saved)
        os.close(fd)
        if not log.keep:
            os.remove(log.path)


def _save_log(log: _Log, error: BaseException) -> str:
    """Keep the workers' output and the runner's full error text in a file; return its path."""
    if log.path is None:
        fd, log.path = tempfile.mkstemp(prefix="img2tfrecord-beam-", suffix=".log")
        os.close(fd)
    with open(log.path, "a", encoding="utf-8") as f:
        f.write("\n--- the error the Beam runner raised ---\n" + str(error) + "\n")
    log.keep = True
    return log.path


def _last_line(e: BaseException) -> str:
    """The innermost message of a runner error (Beam wraps worker tracebacks in long texts)."""
    lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
    text = lines[-1] if lines else type(e).__name__
    if text.startswith("[while running") and len(lines) > 1:
        text = lines[-2]
    return text if len(text) < 300 else text[:297] + "..."
