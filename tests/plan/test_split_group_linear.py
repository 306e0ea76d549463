"""--split-group's pattern runs in linear time (RE2), means what Python's `re` makes of it, and a
pattern RE2 cannot run is refused in one line before any work (issue 38, item 12).

The pattern is recorded in dataset.json and searched in every path of every later update, so a
backtracking pattern (`(a+)+!` on a long run of a's: exponential in Python's `re`) would stall every
update of the dataset.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from PIL import Image

from img2tfrecord.format.linear_re import compile_linear
from img2tfrecord.format.split_groups import group_key

SPLIT = "train=0.5,validation=0.5"


def _image(path: Path, seed: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", (4, 4), (seed % 256, seed // 256, 9)).save(path)


def test_a_backtracking_pattern_on_a_long_name_converts(tmp_path: Path) -> None:
    """`(a+)+!` against 60 a's not followed by `!`: Python's `re` tries 2**60 ways (the run never
    ends; the timeout turns that into a failure); RE2 answers at once. The CLI runs in a process of
    its own so the old code's endless search can be stopped."""
    src = tmp_path / "in"
    for k in range(4):
        _image(src / "c0" / f"{'a' * 60}{k}.png", k)  # no `!`: the pattern does not match
        _image(src / "c0" / f"{'a' * 60}!{k}.png", 10 + k)  # matches: group 'a'
    cmd = "from img2tfrecord.cli import main; main()"
    args = ["convert", src, tmp_path / "out", "--split", SPLIT, "--split-group", "(a+)+!", "--quiet", "--json"]
    res = subprocess.run([sys.executable, "-c", cmd, *map(str, args)], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr[-2000:]
    manifest = json.loads((tmp_path / "out" / "dataset.json").read_text())
    assert manifest["options"]["split_group"] == "(a+)+!"
    assert sum(s["records"] for s in manifest["splits"].values()) == 8


@pytest.mark.parametrize(
    ("pattern", "reason"),
    [
        (r"(p\d+)_\1", r"invalid escape sequence: \1"),
        (r"(?=p)(p\d+)", "invalid perl operator: (?="),
        (r"(?<=/)(p\d+)", "invalid perl operator: (?<"),
        (r"(?P<g>p\d+)(?P=g)", "invalid perl operator: (?P"),
    ],
)
def test_what_re2_cannot_run_is_refused_before_any_work(tmp_path: Path, cli, pattern: str, reason: str) -> None:
    _image(tmp_path / "in" / "c0" / "p1_a.png", 1)
    _image(tmp_path / "in" / "c0" / "p2_a.png", 2)
    r = cli("convert", tmp_path / "in", tmp_path / "out", "--split", SPLIT, "--split-group", pattern)
    assert r.exit_code == 2
    assert r.output.startswith("error: bad --split-group ") and len(r.output.strip().splitlines()) == 1
    assert "without backtracking" in r.output and "backreferences, lookahead/lookbehind" in r.output
    assert reason in r.output
    assert not (tmp_path / "out").exists()
    r = cli("convert", tmp_path / "in", tmp_path / "out", "--split", SPLIT, "--split-group", pattern, "--json")
    assert r.exit_code == 2 and "without backtracking" in json.loads(r.stdout)["error"]["message"]


def test_inspect_and_update_refuse_it_too(tmp_path: Path, cli) -> None:
    """inspect's --split-group takes the same patterns; a dataset.json whose recorded pattern RE2
    cannot run (edited, or written before) makes update say so, one line, exit 2, nothing written."""
    src = tmp_path / "in"
    for k in range(4):
        _image(src / "c0" / f"p{k}_a.png", k)
    out = tmp_path / "out"
    assert cli("convert", src, out, "--split", SPLIT, "--split-group", r"(p\d)_", "--quiet").exit_code == 0
    r = cli("inspect", out, "--split-group", r"(p\d)_\1")
    assert r.exit_code == 2 and "without backtracking" in r.output and len(r.output.strip().splitlines()) == 1
    manifest = json.loads((out / "dataset.json").read_text())
    manifest["options"]["split_group"] = r"(?=p)(p\d)_"
    (out / "dataset.json").write_text(json.dumps(manifest))
    before = sorted(p.name for p in out.iterdir())
    _image(src / "c0" / "p9_a.png", 9)
    r = cli("update", src, out)
    assert r.exit_code == 2, r.output
    assert "without backtracking" in r.output and len(r.output.strip().splitlines()) == 1
    assert sorted(p.name for p in out.iterdir()) == before


def test_python_meaning_is_kept(tmp_path: Path, cli) -> None:
    """Python's `\\d` is any Unicode digit (RE2's only 0-9): group keys stay what `re` gave them."""
    src = tmp_path / "in"
    names = ["p\u0663_a.png", "p\u0663_b.png", "p7_a.png", "p7_b.png"]  # ARABIC-INDIC DIGIT THREE
    for k, n in enumerate(names):
        _image(src / "c0" / n, k)
    out = tmp_path / "out"
    assert cli("convert", src, out, "--split", SPLIT, "--split-group", r"p(\d)_", "--quiet").exit_code == 0
    r = cli("inspect", out, "--split-group", r"p(\d)_", "--json")
    groups = json.loads(r.output)["split_groups"]
    assert groups["groups"] == 2 and groups["images_grouped"] == 4 and groups["crossing"] == {}


PATTERNS = [
    r"_(\d\d)\.",
    r"^([^/]+)/",
    r"(\w+)_\d",
    r"(?i)(CIRCLE|sq)_(\d+)?",
    r"\s(\S+)",
    r"([\w.]+?)_(\d+)\Z",
    r"(?P<g>x)(y)?",
    r"[[](\W)",
    r"[]a]+(\D*)",
    r"a{,2}(b)",
    r"(a|ab)(c|bcd)(d*)",
    r"(?s)(.)$",
]
ALPHABET = "abcdxyCIRSQ_./- 09[]\n\u0663\u00e9\u00c9\u3000\ud800"  # Unicode digit, letters, space; a lone surrogate
COMPILED = {p: compile_linear(p) for p in PATTERNS}


@given(pattern=st.sampled_from(PATTERNS), text=st.text(alphabet=ALPHABET, max_size=24))
def test_groups_agree_with_python_re(pattern: str, text: str) -> None:
    """The group key (and every group's span) is the one Python's `re.search` finds."""
    ours = COMPILED[pattern].search(text)
    theirs = re.compile(pattern).search(text)
    if pattern.endswith("$") and text.endswith("\n"):
        return  # Python's `$` also matches before a final newline (documented in format.linear_re)
    assert (ours is None) == (theirs is None), (pattern, text)
    if theirs is not None and ours is not None:
        spans = tuple(None if theirs.start(i) < 0 else theirs.span(i) for i in range(theirs.re.groups + 1))
        assert ours.spans == spans, (pattern, text)
        assert group_key(COMPILED[pattern], text) == (
            theirs.group(1) if theirs.re.groups and theirs.group(1) is not None else theirs.group(0)
        )
