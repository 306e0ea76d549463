"""The fuzz target in `make test`'s fixed-seed mode (issue 38): the COCO, VOC, YOLO and metadata
readers run through the real CLI on mutated copies of the seeded corpus (tests/fuzz/corpus), in a
child process under RLIMIT_AS, and none may end in a traceback, a crash, a hang or unbounded memory.

The seed is fixed, so every run draws the same cases and the suite cannot turn red or green by
chance; `make fuzz` runs more cases with a random seed. A failure lists each distinct finding with
the last line of what went wrong, the mutation, and the command that runs its case again.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from fuzz_run import CORPUS, FAMILIES, Case, all_corpus_bytes, build_images, make_case, run_case, summary, supervise

SEED = "make-test"
CASES = 1000  # about 30 s on one core
REAL_EVERY = 10  # every tenth case converts for real (one worker), the others are --dry-run


def test_the_readers_take_mutated_files_without_a_traceback(tmp_path: Path) -> None:
    """The fixed-seed run: the COCO, VOC, YOLO and metadata readers take 1,000 mutated files each
    with a one-line error or a skip, never a traceback, a crash or a memory kill (`make fuzz` explores)."""
    found = supervise(SEED, CASES, tmp_path, REAL_EVERY)
    if found:
        pytest.fail(summary(found, tmp_path), pytrace=False)


def test_a_case_is_the_same_for_the_same_seed_and_index(tmp_path: Path) -> None:
    """A finding is re-run alone by (seed, case): its files and its command are a function of them."""
    others = all_corpus_bytes()
    for index in range(40):
        a = make_case(SEED, index, tmp_path / "a", others, REAL_EVERY)
        b = make_case(SEED, index, tmp_path / "b", others, REAL_EVERY)
        assert (a.family, a.mutated, a.real, a.change) == (b.family, b.mutated, b.real, b.change)
        assert [w.replace(str(tmp_path / "a"), "ANN") for w in a.args] == [
            w.replace(str(tmp_path / "b"), "ANN") for w in b.args
        ]
        for rel in a.mutated:
            assert (tmp_path / "a" / rel).read_bytes() == (tmp_path / "b" / rel).read_bytes()
    families = {make_case(SEED, i, tmp_path / "c", others, REAL_EVERY).family.name for i in range(200)}
    assert families == {f.name for f in FAMILIES}  # every reader is drawn


def test_the_oracle_reports_an_exception_with_where_it_was_raised(tmp_path: Path, monkeypatch) -> None:
    """A reader that raises (a one-line bug in the YOLO reader) is a finding naming the exception and
    the reader's frame, not a pass: the fixed-seed run could not miss what it is there to find."""
    from img2tfrecord.conversion.plan import yolo as yolo_reader

    yolo = next(f for f in FAMILIES if f.name == "yolo")
    ann = tmp_path / "ann"
    shutil.copytree(CORPUS / yolo.folder, ann)
    args = [a.replace("ANN", str(ann)) for a in yolo.args]
    case = Case(SEED, 0, yolo, [], args, False, ann, "")
    images = build_images(tmp_path / "in")
    assert run_case(case, images, tmp_path / "out") is None  # the seed corpus itself converts
    monkeypatch.setattr(yolo_reader, "class_names", lambda path, shown: {}[0])
    got = run_case(case, images, tmp_path / "out")
    assert got is not None and got.kind == "exception"
    assert got.signature.startswith("KeyError at conversion/plan/yolo.py:") and "(<lambda>)" not in got.signature
    assert "KeyError: 0" in got.detail


def test_a_crashed_case_is_a_finding_and_the_run_goes_on(tmp_path: Path, monkeypatch) -> None:
    """A case that kills the child (a segfault in a C extension, the kernel's out-of-memory kill) is
    a finding of that case with its files kept, and the cases after it run in a new child."""
    monkeypatch.setenv("FUZZ_SELFTEST_SEGFAULT", "2")
    found = supervise(SEED, 5, tmp_path, real_every=0)
    crashes = [f for f in found if f.kind == "crash"]
    assert [(f.index, f.signature) for f in crashes] == [(2, "child exited -11")]
    assert (tmp_path / "progress").read_text() == "done"  # cases 3 and 4 ran
    assert (tmp_path / "seed-make-test-case-2" / "finding.txt").exists()
    assert not (tmp_path / "work").exists()  # the crashed child's folders are gone
