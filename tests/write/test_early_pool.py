"""The local engine's workers start before the plan is made (issue 41 item 3), and that changes
nothing in what is written: same bytes whatever the worker count, no process left behind by a
refused run, the first record after the plan in the summary."""

from __future__ import annotations

import hashlib
import json
import multiprocessing
from pathlib import Path

import pytest

import img2tfrecord.conversion.convert as convert_module
from helpers import make_dataset
from img2tfrecord.conversion.write.engines import pool


def _shards(out: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(out.iterdir()) if "-of-" in p.name}


@pytest.fixture
def started_at_plan(monkeypatch):
    """What the early pool was when the plan began: (started processes, or None without a pool)."""
    seen: list[int | None] = []
    real = convert_module.plan_job

    def plan_job(*args, **kwargs):
        seen.append(pool._early.started if pool._early is not None else None)
        return real(*args, **kwargs)

    monkeypatch.setattr(convert_module, "plan_job", plan_job)
    return seen


@pytest.mark.parametrize("shards", [1, 3, 7])
@pytest.mark.parametrize("split", [None, "train=0.7,validation=0.3"])
def test_workers_started_before_the_plan_write_the_bytes_one_process_writes(
    tmp_path, cli, started_at_plan, shards, split
):
    make_dataset(tmp_path / "in", {"a": 9, "b": 7, "c": 5}, seed=shards)
    extra = ["--split", split] if split else []
    outs = {}
    for workers in (1, 2, 3):
        out = tmp_path / f"out{workers}"
        res = cli("convert", tmp_path / "in", out, "--json", "--shards", shards, "--workers", workers, *extra)
        assert res.exit_code == 0, res.output
        summary = json.loads(res.output.strip().splitlines()[-1])
        assert summary["planned_seconds"] <= summary["first_record_seconds"] <= summary["elapsed_seconds"]
        outs[workers] = _shards(out)
    # the pool was there, started, when the plan began: as many as asked for besides this process
    assert started_at_plan == [None, 1, 2]
    assert outs[2] == outs[1] and outs[3] == outs[1]
    assert pool._early is None and not multiprocessing.active_children()


def test_a_refused_run_leaves_no_worker_behind(tmp_path, cli):
    make_dataset(tmp_path / "in", {"a": 3})
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "mine.txt").write_text("not a dataset")
    res = cli("convert", tmp_path / "in", tmp_path / "out", "--workers", "2")
    assert res.exit_code == 2 and "Traceback" not in res.output
    assert pool._early is None and not multiprocessing.active_children()


def test_the_default_worker_count_is_guessed_from_a_bounded_count_of_files(tmp_path):
    for i in range(7):
        (tmp_path / "a" / ("sub" if i % 2 else "")).mkdir(parents=True, exist_ok=True)
        (tmp_path / "a" / ("sub" if i % 2 else "") / f"{i}.jpg").write_bytes(b"x")
    (tmp_path / "a" / ".hidden.jpg").write_bytes(b"x")
    assert pool.count_files(str(tmp_path), 100) == 7
    assert pool.count_files(str(tmp_path), 4) == 4
    assert pool.count_files(str(tmp_path / "missing"), 100) == 0
    pool.start_early(str(tmp_path), str(tmp_path / "out"), workers=None, engine="local", dry_run=False, file_list=None)
    assert pool._early is None  # 7 files: one process, as the plan will say
    for kwargs in ({"engine": "beam"}, {"dry_run": True}, {"file_list": "list.txt"}):
        args = {"workers": 2, "engine": "local", "dry_run": False, "file_list": None} | kwargs
        pool.start_early(str(tmp_path), str(tmp_path / "out"), **args)
        assert pool._early is None, kwargs
