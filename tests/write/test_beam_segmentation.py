"""`--engine beam` on a segmentation input (`--masks-dir`): the DirectRunner (2 worker processes)
writes the local engine's bytes, masks and dataset.json's class counts included. Runs in .venv-beam."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "encode"))  # the corpus of tests/encode

from test_beam import BEAM_OPTIONS, dataset_files, without_engine  # noqa: E402
from test_segmentation import corpus  # noqa: E402

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("apache_beam") is None,
    reason="the beam extra is not installed here: `make test` runs these in .venv-beam (make test-beam)",
)


def test_beam_writes_the_local_engines_segmentation_bytes(tmp_path, cli):
    corpus(tmp_path)
    args = ["--masks-dir", tmp_path / "masks", "--mask-colors", "voc", "--encoding", "png", "--shards", "2", "-q"]
    local, beam = tmp_path / "local", tmp_path / "beam"
    assert cli("convert", tmp_path / "images", local, *args).exit_code == 0
    res = cli("convert", tmp_path / "images", beam, *args, "--engine", "beam", "--beam-options", BEAM_OPTIONS)
    assert res.exit_code == 0, res.output
    a, b = dataset_files(local), dataset_files(beam)
    assert sorted(a) == sorted(b)
    for name in a:
        if name != "dataset.json":
            assert a[name] == b[name], name
    assert without_engine(a["dataset.json"]) == without_engine(b["dataset.json"])
    assert json.loads(b["dataset.json"])["metadata"]["segmentation"]["per_split"]["train"]["pixels"]
