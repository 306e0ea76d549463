"""Resuming an interrupted conversion: a journal of finished shards in the staging folder.

Every shard that closes (fsync'd, checksummed) is recorded in ``journal.jsonl`` (in the workspace
beside OUTPUT, `conversion.write.publish`): a first line with a fingerprint of the job (options, classes
and the exact shard plan: which files, their sizes, in which shard) and, per shard, a digest of its
sources' modification times, then one line per finished shard, appended (so recording a shard costs
the same for the first and the ten-thousandth; a line cut short by a crash is ignored).
``--resume`` reuses the shards whose sources were not modified since (same st_mtime_ns: a file
edited in place with the same size is caught) and whose bytes still match the recorded checksum (with ``--checksum
none``: whose records' CRCs hold) and converts only the rest, naming each one it redoes and why,
so the result is byte-identical to an uninterrupted run; a different fingerprint (input or
options changed) is refused, saying what changed, rather than silently mixed.
"""

from __future__ import annotations

import hashlib
import json
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from img2tfrecord import fs
from img2tfrecord.conversion.plan.table import fingerprint_items, mtimes_of, stamps_of
from img2tfrecord.conversion.write.dedupe import DIGEST_HEX
from img2tfrecord.conversion.write.shards import ShardOutcome
from img2tfrecord.conversion.write.workspace import JOURNAL  # the one name, beside the workspace's others
from img2tfrecord.errors import DataError, UsageError, option, plural, said
from img2tfrecord.format import workspace_journal as journal_file

if TYPE_CHECKING:  # pragma: no cover
    from img2tfrecord.conversion.plan.job import Plan


def header(plan: Plan) -> dict[str, Any]:
    """The journal's first line: a fingerprint of everything that decides the output bytes (not
    the engine or worker count), and what went into it, so that a refused --resume can say what
    differs: the options, the classes, the number of images and a digest of each shard's files."""
    h = hashlib.sha256()
    h.update(json.dumps({"options": plan.options, "classes": plan.classes}, sort_keys=True, default=str).encode())
    shards, sources = {}, {}
    for shard in plan.shards:
        h.update(shard.name.encode())
        items = fingerprint_items(shard.tasks)  # from the plan's columns: no Task made
        h.update(items)
        shards[shard.name] = hashlib.sha256(items).hexdigest()[:16]
        source = items + mtimes_of(shard.tasks).tobytes() + stamps_of(shard.tasks)  # stamps: annotations edited
        sources[shard.name] = hashlib.sha256(source).hexdigest()[:16]
    return {
        "fingerprint": h.hexdigest(),
        "options": _plain(plan.options),
        "classes": list(plan.classes),
        "images": plan.images,
        "shards": shards,
        # per shard, with its images' st_mtime_ns and boxes: a source or an annotation edited rebuilds it
        "sources": sources,
        # the convert command line that makes this job (`inspect` of a missing OUTPUT advises it
        # with --resume); not part of the fingerprint
        "command_line": convert_command_line(plan),
    }


def convert_command_line(plan: Plan) -> list[str] | None:
    """`img2tfrecord convert IN OUT` and the flags of every option not at its default, the shard
    request as asked for: the command whose --resume continues this job. None when no command line
    can say it (a list of labels given from Python, not a file; the labels of a `like` dataset)."""
    from img2tfrecord.conversion.plan.job import plan_options
    from img2tfrecord.conversion.plan.like import cli_flags

    defaults = plan_options({})
    given = {k: v for k, v in plan.options.items() if k != "shards" and v != defaults.get(k, v)}
    if given.pop("labels", None) is not None or plan.known_classes is not None:
        return None
    if plan.shard_request is not None:
        given["shards"] = plan.shard_request
    return ["img2tfrecord", "convert", plan.input_dir, plan.output_dir, *cli_flags(given)]


def _plain(value: Any) -> Any:
    return json.loads(json.dumps(value, default=str))


class Journal:
    """Append-only record of finished shards; safe to call from the shard-closing thread."""

    def __init__(
        self,
        staging: str,
        job_header: dict[str, Any],
        done: dict[str, ShardOutcome] | None = None,
        journal_dir: str | None = None,
    ) -> None:
        self.staging = staging  # where the shards are; the journal is in `journal_dir` (default: there too)
        self.path = fs.join(journal_dir or staging, JOURNAL)
        self.header = job_header
        self.done: dict[str, ShardOutcome] = dict(done or {})
        self._lock = threading.Lock()
        self._save()

    def record(self, outcome: ShardOutcome) -> None:
        with self._lock:
            self.done[outcome.info.file] = outcome
            if fs.is_remote(self.path):  # object stores cannot append: rewrite
                self._save()
            else:
                with open(self.path, "a", encoding="utf-8") as f:
                    f.write(json.dumps(outcome.to_dict()) + "\n")

    def _save(self) -> None:
        lines = [self.header] + [o.to_dict() for o in self.done.values()]
        fs.write_text(self.path, "".join(json.dumps(line) + "\n" for line in lines))


def _entries(journal_dir: str) -> list[Any]:
    """The journal's lines: its header, then one per finished shard; [] without a journal."""
    return journal_file.entries(journal_dir)


def journal_header(journal_dir: str) -> dict[str, Any] | None:
    """An unfinished run's journal header (its fingerprint); None without a journal."""
    entries = _entries(journal_dir)
    return entries[0] if entries else None


def journal_command(journal_dir: str) -> str | None:
    """Which command an unfinished run's journal belongs to ("convert" or "update"); None without one."""
    head = journal_header(journal_dir)
    if head is None:
        return None
    command = head.get("command", "convert")
    return command if isinstance(command, str) else "convert"


def same_job(then: dict[str, Any] | None, plan: Plan) -> bool:
    """Whether a journal header is this job's: the same fingerprint (options, classes, shard plan)
    and the same sources' mtimes, i.e. what this run would write is what that run wrote."""
    if then is None or then.get("command", "convert") != "convert":
        return False
    now = header(plan)
    return then.get("fingerprint") == now["fingerprint"] and then.get("sources") == now["sources"]


def finished_count(journal_dir: str) -> int | None:
    """How many finished shards an unfinished run's journal lists; None without a journal."""
    entries = _entries(journal_dir)
    return len(entries) - 1 if entries else None


@dataclass(frozen=True)
class Redone:
    """A journaled shard `--resume` does not reuse (it is converted again), and `why`."""

    name: str
    why: str


@dataclass(frozen=True)
class Reusable:
    """`load_done`'s answer: the finished shards reused, by name, and the journaled ones redone."""

    done: dict[str, ShardOutcome] = field(default_factory=dict)
    redone: list[Redone] = field(default_factory=list)


def load_done(
    plan: Plan, staging: str, journal_dir: str | None = None, extra_sources: dict[str, str] | None = None
) -> Reusable:
    """The finished shards of an interrupted run of this same job, each checked (by its checksum,
    or with --checksum none by its records' CRCs), and the journaled shards that are not reused,
    with the reason.

    `extra_sources`: shards the job makes besides the plan's (update's rewritten ones), each with
    a digest of what it is made from, as the header's `sources` holds it.

    Raises UsageError, saying what differs, when the journal belongs to another input or options.
    """
    entries = _entries(journal_dir or staging)
    if not entries:
        return Reusable()
    now = header(plan)
    if entries[0].get("fingerprint") != now["fingerprint"]:
        raise UsageError(
            f"{option('resume', True)}: the interrupted run in {plan.output_dir} differs from this one: {'; '.join(_differences(entries[0], now))}; "
            f"{said('run the command it was', 'call convert() as it was called')}, or drop {option('resume')} "
            f"and add {option('overwrite', True)} to start over"
        )
    now["sources"] |= extra_sources or {}
    planned = {s.name for s in plan.shards} | set(extra_sources or {})
    then_sources = entries[0].get("sources")
    then_sources = then_sources if isinstance(then_sources, dict) else {}
    done: dict[str, ShardOutcome] = {}
    redone: list[Redone] = []
    for d in entries[1:]:
        outcome = _journaled(d)
        if outcome is None:  # edited, damaged or another version's: that shard is converted again
            name = d.get("info", {}).get("file") if isinstance(d, dict) and isinstance(d.get("info"), dict) else None
            if isinstance(name, str) and name in planned:
                redone.append(Redone(name=name, why="its journal line is damaged"))
            continue
        name = outcome.info.file
        if name not in planned:
            continue
        if then_sources.get(name) != now["sources"][name]:
            redone.append(Redone(name=name, why="its source images were modified since it was written"))
            continue
        why = _damage(fs.join(staging, name), outcome, plan.settings.compression)
        if why is None and outcome.info.index and not fs.exists(fs.join(staging, outcome.info.index)):
            why = f"its index {outcome.info.index} is missing"
        if why is None:
            done[name] = outcome
        else:
            redone.append(Redone(name=name, why=why))
    return Reusable(done=done, redone=redone)


def _journaled(d: Any) -> ShardOutcome | None:
    """A journal line as the ShardOutcome it records, or None if it does not hold one: every field
    of the type `--resume` and the manifest will use, so a hand-edited line cannot surface later
    as a traceback (or as a bad dataset.json)."""
    try:
        o = ShardOutcome.from_dict(d)
    except (TypeError, KeyError, AttributeError, ValueError, IndexError):
        return None
    i = o.info
    whole = lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 0  # noqa: E731
    texts = lambda v: isinstance(v, dict) and all(isinstance(k, str) and isinstance(x, str) for k, x in v.items())  # noqa: E731
    counts = lambda v: isinstance(v, dict) and all(isinstance(k, str) and whole(x) for k, x in v.items())  # noqa: E731
    rows = lambda v: isinstance(v, list) and all(texts(x) for x in v)  # noqa: E731
    ok = (
        isinstance(o.split, str)
        and isinstance(i.file, str)
        and whole(i.records)
        and whole(i.bytes)
        and texts(i.checksums)
        and all(k in fs.CHECKSUMS and k != "none" for k in i.checksums)
        and i.index in (None, i.file + ".idx")
        and all(counts(v) for v in (o.class_counts, o.formats, o.transcoded, o.depths, o.reduced))
        and rows(o.skipped)
        and rows(o.dropped)
        and all(whole(v) for v in (o.orientation_ignored, o.images, o.bytes_read))
        and isinstance(o.digests, str)
        and len(o.digests) % DIGEST_HEX == 0
    )
    return o if ok else None


def _differences(then: dict[str, Any], now: dict[str, Any]) -> list[str]:
    """What differs between the journal's header and this job's, in the user's words."""
    out = []
    old_opts = then.get("options")
    if isinstance(old_opts, dict):
        for key in sorted(set(old_opts) | set(now["options"])):
            a, b = old_opts.get(key), now["options"].get(key)
            if a != b:
                what = "the shard counts" if key == "shards" else option(key)
                out.append(f"{what} {_shown(a)} then, {_shown(b)} now")
    old_classes = then.get("classes")
    if isinstance(old_classes, list) and old_classes != now["classes"]:
        gone, new = (
            [c for c in old_classes if c not in now["classes"]],
            [c for c in now["classes"] if c not in old_classes],
        )
        detail = ", ".join([f"{c} gone" for c in gone[:3]] + [f"{c} new" for c in new[:3]]) or "same names, other order"
        out.append(f"the classes ({detail})")
    old_shards = then.get("shards")
    if out:  # the options or classes explain it (a seed or a --labels change moves every file)
        return out
    if isinstance(old_shards, dict) and then.get("images") != now["images"]:
        out.append(f"the input: {then.get('images')} images then, {now['images']} now")
    elif isinstance(old_shards, dict) and old_shards.keys() == now["shards"].keys():
        changed = [n for n, d in now["shards"].items() if old_shards[n] != d]
        if changed:
            out.append(f"the input: other files (or sizes) in {plural(len(changed), 'shard')}, e.g. {changed[0]}")
    return out or ["the input or the options (this journal does not say which)"]


def _shown(value: Any) -> str:
    text = "(not given)" if value is None else json.dumps(value) if not isinstance(value, str) else value
    return text if len(text) <= 40 else text[:37] + "..."


def _damage(path: str, outcome: ShardOutcome, compression: str | None) -> str | None:
    """Why a journaled shard's bytes cannot be trusted any more, or None: its size and checksum
    must be those journaled; with --checksum none, every record's CRC must hold and the count too."""
    if not fs.exists(path):
        return "the file is gone"
    size = fs.getsize(path)
    if size != outcome.info.bytes:
        return f"it is {size:,} bytes, {outcome.info.bytes:,} when it was finished"
    for name, digest in outcome.info.checksums.items():
        if fs.checksum(path, name) != digest:
            return f"its {name} differs from the one taken when it was finished (the file changed)"
    if outcome.info.checksums:
        return None
    if fs.is_remote(path):
        return f"with {option('checksum', 'none')}, a shard on remote storage cannot be checked"
    from img2tfrecord.format.framing import FramingError, TFRecordFile

    records = 0
    try:
        for rec in TFRecordFile(path, compression or "none"):
            if not rec.crc_ok:
                return f"record {rec.index} at byte {rec.offset:,}: data CRC mismatch (the file changed)"
            records += 1
    except FramingError as e:
        return f"record {e.index} at byte {e.offset:,}: {e.message}"
    except (OSError, DataError) as e:
        return f"cannot be read: {e}"
    if records != outcome.info.records:
        return f"it holds {records} records, {outcome.info.records} when it was finished"
    return None


def prune(staging: str, keep: set[str]) -> None:
    """After an interruption: drop partial files, keep finished shards (+ indexes) and the journal."""
    try:
        names = fs.listdir(staging)
    except Exception:
        return
    for name in names:
        if name != JOURNAL and name not in keep and name.removesuffix(".idx") not in keep:
            try:
                fs.remove(fs.join(staging, name))
            except Exception:
                pass
