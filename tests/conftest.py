"""Fixtures: the real CLI in-process (click's CliRunner). Helpers live in helpers.py."""

from __future__ import annotations

import os
from typing import Any

import pytest
from click.testing import CliRunner

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
# dataset.json's lineage `created` is the run's time unless SOURCE_DATE_EPOCH fixes it: the suite
# fixes it, so its byte-for-byte comparisons of whole outputs (dataset.json included) hold across a
# second boundary; tests/test_lineage.py checks what changes without it (only `created`).
os.environ.setdefault("SOURCE_DATE_EPOCH", "1700000000")


@pytest.fixture
def cli():
    """Run `img2tfrecord ...` in-process (no 3 s TensorFlow import per call)."""
    from img2tfrecord.cli import main

    runner = CliRunner()

    def run(*args: str) -> Any:
        return runner.invoke(main, [str(a) for a in args], catch_exceptions=False)

    return run
