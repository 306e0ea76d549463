"""`update`/`compact` review fixes: paths from Python, honest interrupts, a catalog checked before it is trusted."""

from __future__ import annotations

import json
from pathlib import Path

from helpers import make_dataset, natural_image, save
from img2tfrecord.conversion.compact import compact
from img2tfrecord.conversion.convert import convert
from img2tfrecord.conversion.update import update


def test_update_and_compact_take_paths(tmp_path: Path) -> None:
    src, out = tmp_path / "in", tmp_path / "out"
    make_dataset(src, {"a": 3, "b": 2}, size=(16, 12))
    convert(src, out)
    save(natural_image(18, 14, 7), src / "a" / "added.jpg", quality=90)
    assert update(src, out)["version"] == 2
    assert compact(out)["version"] == 3


def test_an_interrupt_after_compact_switched_says_it_was_compacted(tmp_path: Path, cli, monkeypatch) -> None:
    from img2tfrecord.conversion import publish

    src, out = tmp_path / "in", tmp_path / "out"
    make_dataset(src, {"a": 3, "b": 2}, size=(16, 12))
    convert(src, out)
    save(natural_image(18, 14, 7), src / "a" / "added.jpg", quality=90)
    update(src, out)

    def interrupted(ws: publish.Workspace) -> None:  # Ctrl-C while the old version is being removed
        raise KeyboardInterrupt

    monkeypatch.setattr(publish, "_remove_workspace", interrupted)
    r = cli("compact", out)
    assert r.exit_code == 130
    assert "was compacted: it is complete" in r.output and "unchanged" not in r.output
    assert json.loads((out / "dataset.json").read_text())["version"] == 3
