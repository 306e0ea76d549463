"""The fuzz target: the COCO, VOC, YOLO and metadata readers run on mutated copies of a seeded corpus.

Each case is one corpus family (tests/fuzz/corpus/FAMILY), one to two of its files mutated
(mutate.py), and the real CLI run on it in-process with click's CliRunner: `convert IN OUT
--annotations ANN --dry-run` (or `--metadata FILE`), and every few cases without `--dry-run` (a real
conversion, one worker: what the readers hand the encoder is used too). A case is a pure function of
(seed, index), so one failure is re-run alone with `--seed S --case I`.

The oracle: no exception escapes but the project's own (which the CLI turns into exit 1 or 2), the
exit code is 0, 1 or 2, no "Traceback" in any output, a usage error (exit 2) is one line, and with
`--json` stdout is one JSON object. Memory: the cases run in a child process under RLIMIT_AS
(MEMORY_LIMIT), so an allocation without bound is a MemoryError (a traceback the oracle sees) or a
kill the supervisor sees; the supervisor also kills a case that runs over HANG_SECONDS (a hang
detector, not a timing assertion) and carries on with the next case.

    python tests/fuzz/fuzz_run.py --seed 7 --cases 5000 --out fuzz-failures   # `make fuzz FUZZ_SEED=7`
    python tests/fuzz/fuzz_run.py --seed 7 --case 123 --out fuzz-failures     # one case again, verbose

Without --seed (or FUZZ_SEED) the seed is random; `make test` runs a fixed one (test_fuzz.py).
"""

from __future__ import annotations

import argparse
import faulthandler
import json
import os
import random
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

HERE = Path(__file__).resolve().parent
CORPUS = HERE / "corpus"
sys.path[:0] = [str(HERE), str(HERE.parent)]  # mutate.py; tests/helpers.py (image builders)

from mutate import mutate  # noqa: E402

MEMORY_LIMIT = 3 * 1024**3  # RLIMIT_AS of the child that runs the cases
MEMORY_GROWTH = 1024**3  # a case that grows the child's peak RSS by more than this is a finding
HANG_SECONDS = 120.0  # one case running longer than this is killed and reported as a hang

# The images the corpus names (tests/fuzz/corpus/*): rel path -> (width, height). The COCO seed says
# c1.png is 44x32 and names it by base name; VOC's s1.xml has no <size>.
IMAGES = {"circle/c0.jpg": (40, 30), "circle/c1.png": (44, 32), "square/s0.jpg": (40, 30), "square/s1.png": (36, 36)}
# The same images in Ultralytics' layout, for the yolo-yaml family (its data.yaml names these folders).
ULTRALYTICS = {"circle/c0.jpg": "images/train/c0.jpg", "square/s0.jpg": "images/val/s0.jpg"}


class Family(NamedTuple):
    """A corpus folder and how the CLI is pointed at it (ANN is the case's copy of the folder)."""

    name: str
    reader: str  # coco | voc | yolo | metadata: whose fix a finding is
    folder: str  # below tests/fuzz/corpus
    args: tuple[str, ...]
    mutable: tuple[str, ...] = ()  # only these files are mutated (default: any file of the folder)
    tree: str = "classes"  # INPUT: classes (IMAGES) | ultralytics (ULTRALYTICS) | ann (ULTRALYTICS' images in ANN)


FAMILIES = [
    Family("coco", "coco", "coco", ("--annotations", "ANN/instances.json")),
    Family("coco-masks", "coco", "coco", ("--annotations", "ANN/instances.json", "--masks")),
    Family("coco-dir", "coco", "coco", ("--annotations", "ANN")),
    Family("voc", "voc", "voc", ("--annotations", "ANN")),
    Family("voc-file", "voc", "voc", ("--annotations", "ANN/c1.xml"), ("c1.xml",)),
    Family("yolo", "yolo", "yolo", ("--annotations", "ANN")),
    Family("yolo-yaml", "yolo", "yolo-yaml", ("--annotations", "ANN"), tree="ultralytics"),
    # Ultralytics' own layout: one folder holds data.yaml, images/ and labels/, and is INPUT and ANN both
    Family("yolo-ultralytics", "yolo", "yolo-yaml", ("--annotations", "ANN"), tree="ann"),
    Family("metadata-jsonl", "metadata", "metadata", ("--metadata", "ANN/metadata.jsonl"), ("metadata.jsonl",)),
    Family("metadata-csv", "metadata", "metadata", ("--metadata", "ANN/metadata.csv"), ("metadata.csv",)),
    Family(
        "metadata-labels",
        "metadata",
        "metadata",
        ("--metadata", "ANN/labels/metadata.jsonl"),
        ("labels/metadata.jsonl",),
    ),
]


@dataclass
class Case:
    """One case: its family, the files it mutated, the CLI's words, and whether it is a real conversion."""

    seed: str
    index: int
    family: Family
    mutated: list[str]
    args: list[str]
    real: bool
    ann: Path
    change: str  # what the mutation did, in short (describe())


@dataclass
class Finding:
    """What the oracle saw wrong in one case."""

    seed: str
    index: int
    family: str
    reader: str
    kind: str  # exception | exit | traceback | lines | json | memory | crash | hang
    signature: str  # what tells two findings apart: the exception type and where it was raised
    detail: str
    command: str
    change: str = ""

    def key(self) -> tuple[str, str, str]:
        return (self.reader, self.kind, self.signature)


def corpus_files(folder: str) -> list[str]:
    top = CORPUS / folder
    return sorted(str(p.relative_to(top)) for p in top.rglob("*") if p.is_file())


def all_corpus_bytes() -> list[bytes]:
    return [p.read_bytes() for p in sorted(CORPUS.rglob("*")) if p.is_file()]


def build_images(top: Path) -> dict[str, Path]:
    """The image folders the cases convert, by Family.tree (real images: JPEG and PNG, the sizes the
    corpus names)."""
    from helpers import natural_image, save

    for i, (rel, (w, h)) in enumerate(IMAGES.items()):
        save(natural_image(w, h, 900 + i), top / "classes" / rel, quality=90)
        if rel in ULTRALYTICS:
            save(natural_image(w, h, 900 + i), top / "ultralytics" / ULTRALYTICS[rel], quality=90)
    return {"classes": top / "classes", "ultralytics": top / "ultralytics"}


def make_case(seed: str, index: int, ann: Path, others: list[bytes], real_every: int) -> Case:
    """Write case `index`'s annotation folder at `ann` (a copy of its family's corpus, mutated)."""
    rng = random.Random(f"img2tfrecord-fuzz:{seed}:{index}")
    family = rng.choice(FAMILIES)
    shutil.rmtree(ann, ignore_errors=True)
    shutil.copytree(CORPUS / family.folder, ann)
    files = list(family.mutable) or corpus_files(family.folder)
    mutated = sorted(set(rng.sample(files, min(len(files), 1 if rng.random() < 0.8 else 2))))
    changes = []
    for rel in mutated:
        p = ann / rel
        before = p.read_bytes()
        after = mutate(rel, before, rng, others)
        p.write_bytes(after)
        changes.append(describe(rel, before, after))
    args = [a.replace("ANN", str(ann)) for a in family.args]
    if rng.random() < 0.4:
        args.append("--json")
    if rng.random() < 0.2:
        args.append("--strict")
    real = real_every > 0 and index % real_every == real_every - 1
    return Case(seed, index, family, mutated, args, real, ann, "; ".join(changes))


def describe(rel: str, before: bytes, after: bytes, width: int = 40) -> str:
    """The mutation in one line: the file, where it first differs and the bytes there before and after
    (the reproducer keeps the whole file; this is for a report's reader to tell findings apart)."""
    at = next((i for i, (a, b) in enumerate(zip(before, after)) if a != b), min(len(before), len(after)))
    if before == after:
        return f"{rel}: unchanged"
    start = max(0, at - 8)
    was, now = before[start : start + width], after[start : start + width]
    return f"{rel} @{at}: {was!r} -> {now!r} ({len(before)} -> {len(after)} bytes)"


def run_case(case: Case, images: dict[str, Path], out: Path) -> Finding | None:
    """The CLI on one case, and the oracle's verdict (None: nothing wrong)."""
    from click.testing import CliRunner

    from img2tfrecord.cli import main

    shutil.rmtree(out, ignore_errors=True)
    if case.family.tree == "ann":
        shutil.copytree(images["ultralytics"], case.ann, dirs_exist_ok=True)
    source = case.ann if case.family.tree == "ann" else images[case.family.tree]
    words = ["convert", str(source), str(out), *case.args]
    words += ["--workers", "1", "--no-fsync"] if case.real else ["--dry-run"]
    command = " ".join(words)
    finding = lambda kind, sig, detail: Finding(  # noqa: E731
        case.seed, case.index, case.family.name, case.family.reader, kind, sig, detail, command, case.change
    )
    result = CliRunner().invoke(main, words, catch_exceptions=True)
    exc = result.exception
    if exc is not None and not isinstance(exc, SystemExit):
        tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        return finding("exception", f"{type(exc).__name__} at {_where(exc)}", tb)
    stdout, stderr = result.stdout, result.stderr
    if result.exit_code not in (0, 1, 2):
        return finding("exit", f"exit {result.exit_code}", stderr[-2000:])
    if "Traceback" in stdout + stderr:
        return finding("traceback", "Traceback in the output", (stdout + stderr)[-4000:])
    errors = [line for line in stderr.splitlines() if line.startswith("error:")]
    if "--json" in words:
        try:
            answer = json.loads(stdout)
            assert isinstance(answer, dict)
        except (ValueError, AssertionError):
            return finding("json", "stdout is not one JSON object", stdout[-2000:])
        error = answer.get("error")
        errors.append(str(error.get("message", "")) if isinstance(error, dict) else "")
    elif result.exit_code == 2 and len(stderr.strip().splitlines()) != 1:
        return finding("lines", "a usage error of more than one line", stderr[-2000:])
    if quoted := _quoted("\n".join(errors), [(case.ann / rel) for rel in case.mutated]):
        return finding("quotes", "a message quotes the file's bytes", f"{quoted!r} in:\n{stderr[-2000:]}")
    return None


SYNTAX = ('":', '",', '{"', '"}', "</", "><", "/>")  # in a quote of a JSON or XML file, never in a name


def _quoted(text: str, files: list[Path], width: int = 24) -> str:
    """A run of `width` characters of `text` (the error lines: a skip may name a row's file_name) that
    holds JSON or XML syntax and is in one of `files`: a message that quotes the file instead of naming
    the position (issue 38, item 23)."""
    text = text[:4000]
    windows = {text[i : i + width] for i in range(len(text) - width + 1)}
    windows = {w for w in windows if any(s in w for s in SYNTAX)}
    for path in files:
        body = path.read_bytes()[:4_000_000].decode("utf-8", "replace") if path.is_file() else ""
        if hit := next((w for w in sorted(windows) if w in body), ""):
            return hit
    return ""


def _where(exc: BaseException) -> str:
    """The innermost frame of the package in `exc`'s traceback (else the innermost): module:function."""
    frames = traceback.extract_tb(exc.__traceback__)
    ours = [f for f in frames if "img2tfrecord" in f.filename] or frames
    if not ours:
        return "?"
    f = ours[-1]
    name = f.filename.split("img2tfrecord/")[-1] if "img2tfrecord/" in f.filename else os.path.basename(f.filename)
    return f"{name}:{f.lineno} ({f.name})"


def keep(finding: Finding, ann: Path, out_dir: Path) -> Path:
    """The reproducer: the case's files and what went wrong, in OUT/seed-S-case-I/."""
    where = out_dir / f"seed-{finding.seed}-case-{finding.index}"
    shutil.rmtree(where, ignore_errors=True)
    if ann.exists():
        shutil.copytree(ann, where / "ann")
    where.mkdir(parents=True, exist_ok=True)
    (where / "finding.txt").write_text(
        f"reader: {finding.reader} ({finding.family})\nkind: {finding.kind}\nsignature: {finding.signature}\n"
        f"command: {finding.command}\nmutation: {finding.change}\n"
        f"again: python tests/fuzz/fuzz_run.py --seed {finding.seed} --case {finding.index}\n\n{finding.detail}\n",
        errors="backslashreplace",
    )
    return where


# ---- the child: runs cases in one process ------------------------------------------------------


def work(seed: str, start: int, stop: int, out_dir: Path, real_every: int) -> None:
    """Run cases start..stop-1, each one's index written to PROGRESS before it starts, findings appended
    to findings.jsonl (the supervisor reads both)."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    faulthandler.enable()  # a segfault's Python stack, for the supervisor's finding
    others = all_corpus_bytes()
    progress = out_dir / "progress"
    (out_dir / "work").mkdir(exist_ok=True)
    # below OUT/work, which the supervisor removes after each child (a crash leaves it behind)
    with tempfile.TemporaryDirectory(prefix="img2tfrecord-fuzz-", dir=out_dir / "work") as tmp:
        images = build_images(Path(tmp) / "in")
        base = _peak()
        for index in range(start, stop):
            progress.write_text(str(index))
            ann = Path(tmp) / "ann"
            case = make_case(seed, index, ann, others, real_every)
            if os.environ.get("FUZZ_SELFTEST_SEGFAULT") == str(index):  # test_fuzz.py: a crash is a finding
                os.kill(os.getpid(), signal.SIGSEGV)
            got = run_case(case, images, Path(tmp) / "out")
            if got is None and _peak() - base > MEMORY_GROWTH:
                base = _peak()
                sig = "peak RSS grew by over 1 GB"
                got = Finding(seed, index, case.family.name, case.family.reader, "memory", sig, "", "", case.change)
            if got is not None:
                keep(got, ann, out_dir)
                with open(out_dir / "findings.jsonl", "a") as f:
                    f.write(json.dumps(got.__dict__) + "\n")
        progress.write_text("done")


def _peak() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _limit() -> None:
    """RLIMIT_AS of this process: an allocation past MEMORY_LIMIT fails (MemoryError, or a C library's
    crash) instead of growing until the kernel kills something."""
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))


# ---- the supervisor: restarts the child after a crash or a hang ------------------------------------


def supervise(seed: str, cases: int, out_dir: Path, real_every: int, hang: float = HANG_SECONDS) -> list[Finding]:
    """Every case of `seed` in child processes under RLIMIT_AS; a child killed by a signal or stuck in
    one case is a finding of that case, and the cases after it run in a new child. All findings are
    also in OUT/findings.jsonl, one JSON object a line."""
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "findings.jsonl").unlink(missing_ok=True)
    progress = out_dir / "progress"
    start = 0
    while start < cases:
        progress.unlink(missing_ok=True)
        cmd = [sys.executable, __file__, "--worker", "--seed", seed, "--start", str(start), "--cases", str(cases)]
        cmd += ["--out", str(out_dir), "--real-every", str(real_every)]
        log = out_dir / "child.log"  # a file, not a pipe: a child that writes much never blocks on it
        with open(log, "wb") as sink:
            child = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=sink, stderr=sink)
        current, since, hung = "", time.monotonic(), False
        while child.poll() is None:
            time.sleep(0.2)
            now = progress.read_text() if progress.exists() else ""
            if now != current:
                current, since = now, time.monotonic()
            elif current and current != "done" and time.monotonic() - since > hang:
                hung = True
                child.kill()
                child.wait()
        output = log.read_bytes()[-8000:].decode("utf-8", "replace")
        log.unlink()
        shutil.rmtree(out_dir / "work", ignore_errors=True)
        done = progress.read_text() if progress.exists() else ""
        if child.returncode == 0 and done == "done":
            break
        if not done.isdigit():  # the child failed before its first case: nothing to go on with
            raise RuntimeError(f"the fuzz child exited {child.returncode} before any case:\n{output[-4000:]}")
        index = int(done)
        case = make_case(seed, index, out_dir / "tmp-ann", all_corpus_bytes(), real_every)
        kind = "hang" if hung else "crash"  # a SIGKILL not ours is the kernel's (out of memory)
        sig = f"over {hang:.0f} s in one case" if kind == "hang" else f"child exited {child.returncode}"
        how = ["--workers", "1", "--no-fsync"] if case.real else ["--dry-run"]
        source = str(case.ann) if case.family.tree == "ann" else f"IN/{case.family.tree}"
        command = " ".join(["convert", source, "OUT", *case.args, *how])
        f = Finding(seed, index, case.family.name, case.family.reader, kind, sig, output[-4000:], command, case.change)
        keep(f, out_dir / "tmp-ann", out_dir)
        shutil.rmtree(out_dir / "tmp-ann", ignore_errors=True)
        with open(out_dir / "findings.jsonl", "a") as out:
            out.write(json.dumps(f.__dict__) + "\n")
        start = index + 1
    found = [Finding(**json.loads(line)) for line in _lines(out_dir / "findings.jsonl")]
    return sorted(found, key=lambda f: f.index)


def _lines(path: Path) -> Iterator[str]:
    if path.exists():
        yield from path.read_text().splitlines()


def summary(found: list[Finding], out_dir: Path) -> str:
    """Distinct findings (by reader, kind and signature), each with its count, the last line of what
    went wrong, its first case's mutation and where that case's files are kept."""
    first: dict[tuple[str, str, str], list[Finding]] = {}
    for f in found:
        first.setdefault(f.key(), []).append(f)
    lines = [f"{len(found)} failing cases, {len(first)} distinct findings"]
    for (reader, kind, sig), fs in sorted(first.items()):
        f = fs[0]
        lines += [
            f"  [{reader}] {kind}: {sig}  x{len(fs)}  first: case {f.index} ({f.family})",
            f"      {last_line(f.detail)[:300]}",
            f"      mutation: {f.change[:300]}",
            f"      again: python tests/fuzz/fuzz_run.py --seed {f.seed} --case {f.index}"
            f"  (files: {out_dir / f'seed-{f.seed}-case-{f.index}'})",
        ]
    return "\n".join(lines)


def last_line(text: str) -> str:
    """The last non-blank line of a traceback or an output (the exception and its message)."""
    return next((line.strip() for line in reversed(text.splitlines()) if line.strip()), "")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seed", default=os.environ.get("FUZZ_SEED") or str(random.SystemRandom().randrange(10**9)))
    p.add_argument("--cases", type=int, default=int(os.environ.get("FUZZ_CASES") or 5000))
    p.add_argument("--case", type=int, help="run this one case in this process and show what it did")
    p.add_argument("--out", type=Path, default=Path(os.environ.get("FUZZ_OUT") or "fuzz-failures"))
    p.add_argument("--real-every", type=int, default=10, help="every Nth case converts for real (0: never)")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--start", type=int, default=0, help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.worker:
        _limit()  # the child limits itself (no preexec_fn: not safe in a threaded parent, as pytest-xdist's)
        work(a.seed, a.start, a.cases, a.out, a.real_every)
        return 0
    if a.case is not None:
        return _one(a.seed, a.case, a.out, a.real_every)
    print(f"fuzzing the annotation and metadata readers: seed {a.seed}, {a.cases} cases -> {a.out}", flush=True)
    found = supervise(a.seed, a.cases, a.out, a.real_every)
    print(summary(found, a.out))
    print(f"a case again: python tests/fuzz/fuzz_run.py --seed {a.seed} --case I")
    return 1 if found else 0


def _one(seed: str, index: int, out_dir: Path, real_every: int) -> int:
    _limit()  # as in the child: a case that allocates without bound fails here, not the machine
    faulthandler.enable()
    with tempfile.TemporaryDirectory(prefix="img2tfrecord-fuzz-") as tmp:
        images = build_images(Path(tmp) / "in")
        ann = Path(tmp) / "ann"
        case = make_case(seed, index, ann, all_corpus_bytes(), real_every)
        print(f"case {index}: {case.family.name}, mutated {case.mutated}, real={case.real}")
        got = run_case(case, images, Path(tmp) / "out")
        if got is None:
            print("no finding")
            return 0
        where = keep(got, ann, out_dir)
        print(f"{got.kind}: {got.signature}\n{got.command}\n{got.detail}\nfiles kept in {where}")
        return 1


if __name__ == "__main__":
    sys.exit(main())
