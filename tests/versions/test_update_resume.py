"""`update --resume`: an interrupted update keeps its finished new shards; the same command with
--resume reuses them and publishes the bytes of an uninterrupted update."""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import pytest

from helpers import make_dataset, natural_image, save
from img2tfrecord.conversion.convert import convert
from img2tfrecord.conversion.versions.update import update
from img2tfrecord.conversion.write.workspace import workspace
from img2tfrecord.format import catalog


@pytest.fixture(scope="module")
def case(tmp_path_factory):
    """A 16-image dataset of 4 shards, 8 images added since (2 new shards) and 2 removed from two
    shards (2 rewritten); and the update's bytes."""
    from test_faults import visible

    root = tmp_path_factory.mktemp("versions.resume")
    src, old = root / "in", root / "old"
    make_dataset(src, {"a": 8, "b": 8}, size=(16, 12))
    convert(str(src), str(old), shards=4, workers=1)
    cat = catalog.decode((old / catalog.CATALOG_NAME).read_bytes())
    first = {}
    for rel, shard in zip(cat.rels, cat.shards):
        first.setdefault(shard, rel)
    holders = sorted(first)[:2]  # the shards that lose an image: rewritten in this order
    for shard in holders:
        (src / first[shard].decode()).unlink()
    for i in range(8):
        save(natural_image(18, 14, 700 + i), src / "ab"[i % 2] / f"new_{i}.png")
    ref = root / "ref"
    shutil.copytree(old, ref)
    s = update(str(src), str(ref), workers=1)
    assert (s["shards_new"], s["shards_rewritten"]) == (2, 2), s
    return src, old, visible(old), visible(ref), holders


@pytest.mark.parametrize(
    "sig, at, code, finished",
    [("SIGINT", "journal", 130, (1, 2)), ("SIGKILL", "journal", -9, (1,)), ("SIGKILL", "rewrite", -9, (3,))],
)
def test_an_interrupted_update_resumes_to_the_same_bytes(case, tmp_path: Path, cli, sig, at, code, finished) -> None:
    """A signal as the update journals a new shard (strace at the journal's open: SIGINT at the
    first line, SIGKILL at the second; the close-shard thread writes both) or as it starts the
    second rewritten shard: OUTPUT is the old version; a rerun without --resume is refused; with
    it, the finished shards (new and rewritten) are reused and the rest made again."""
    from test_faults import STRACE, traced, visible

    if STRACE is None:
        pytest.skip("strace is not installed (apt-get install strace)")
    src, old_dir, old, new, holders = case
    out = tmp_path / "out"
    shutil.copytree(old_dir, out)
    ws = workspace(str(out))
    journal = os.path.join(ws.root, "journal.jsonl")
    path = journal if at == "journal" else os.path.join(ws.build, ".update-new", "rewrite-" + holders[1])
    when = 2 if (sig, at) == ("SIGKILL", "journal") else 1
    spec = ["-P", path, "-e", "trace=openat", "-e", f"inject=openat:signal={sig}:when={when}"]
    res = traced("/dev/null", spec, "update", src, out, "--workers", "1")
    assert res.returncode == code, res.stderr
    if sig == "SIGINT":
        line = res.stderr.strip().splitlines()[-1]
        assert line.startswith(f"interrupted: {out} is unchanged") and "with --resume to continue" in line, line
        assert "Traceback" not in res.stderr
    assert visible(out) == old  # the old version, untouched
    assert os.path.exists(journal)

    refused = cli("update", src, out)
    m = re.search(r"unfinished update with (\d) finished shards?", refused.output)
    assert refused.exit_code == 2 and m and "--resume" in refused.output, refused.output
    done = int(m[1])  # a SIGINT at the first line may find the other new shard closed too
    assert done in finished, done
    assert visible(out) == old

    events: list[tuple[str, str]] = []
    s = update(str(src), str(out), workers=1, resume=True, on_event=lambda k, m: events.append((k, m)))
    assert ("note", f"resuming: {done} of 4 shards reused") in events, events
    assert s["version"] == 2 and (s["shards_new"], s["shards_rewritten"]) == (2, 2)
    assert visible(out) == new  # byte-identical to the uninterrupted update
    assert not os.path.lexists(ws.root)


def test_an_unfinished_update_is_not_resumed_by_convert(case, tmp_path: Path, cli) -> None:
    """convert --resume and compact leave an update's journal alone: they say to run update --resume."""
    from test_faults import STRACE, traced

    if STRACE is None:
        pytest.skip("strace is not installed (apt-get install strace)")
    src, old_dir, *_ = case
    out = tmp_path / "out"
    shutil.copytree(old_dir, out)
    journal = os.path.join(workspace(str(out)).root, "journal.jsonl")
    spec = ["-P", journal, "-e", "trace=openat", "-e", "inject=openat:signal=SIGKILL:when=1"]
    assert traced("/dev/null", spec, "update", src, out, "--workers", "1").returncode == -9
    for args in (["convert", src, out, "--resume"], ["compact", out]):
        res = cli(*args)
        assert res.exit_code == 2 and "holds an unfinished update" in res.output, (args, res.output)
        assert "update with --resume" in res.output, (args, res.output)
