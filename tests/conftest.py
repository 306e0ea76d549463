"""Fixtures: the real CLI in-process (click's CliRunner). Helpers live in helpers.py."""

from __future__ import annotations

import os
from typing import Any

import pytest
from click.testing import CliRunner
from hypothesis import settings

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
# dataset.json's lineage `created` is the run's time unless SOURCE_DATE_EPOCH fixes it: the suite
# fixes it, so its byte-for-byte comparisons of whole outputs (dataset.json included) hold across a
# second boundary; tests/versions/test_lineage.py checks what changes without it (only `created`).
os.environ.setdefault("SOURCE_DATE_EPOCH", "1700000000")

# Property tests: the same examples on every run (`derandomize`: seeded from each test's own code; no
# example database replaying an earlier run's failures), so `make test` cannot turn red or green by
# chance. `make test-explore` (HYPOTHESIS_PROFILE=explore) draws random, ten times as many examples
# (helpers.examples scales each test's count by the profile's max_examples over the default 100):
# what it finds is then pinned as an ordinary test.
settings.register_profile("ci", derandomize=True, database=None, max_examples=100, print_blob=True)
settings.register_profile("explore", derandomize=False, database=None, max_examples=1000, print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "property: a Hypothesis test (make test-explore runs them)")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark every Hypothesis test `property` (`make test-explore` runs `-m property`)."""
    for item in items:
        if getattr(getattr(item, "obj", None), "is_hypothesis_test", False):
            item.add_marker(pytest.mark.property)


@pytest.fixture
def cli():
    """Run `img2tfrecord ...` in-process (no 3 s TensorFlow import per call)."""
    from img2tfrecord.cli import main

    runner = CliRunner()

    def run(*args: str) -> Any:
        return runner.invoke(main, [str(a) for a in args], catch_exceptions=False)

    return run


# ---- parallel runs: `make test` runs the suite on all cores (pytest-xdist: -n auto --dist loadgroup)
# Every test works in its own tmp_path (each worker has its own base folder), so tests may run side
# by side. The modules below start real processes and act on them while they run (signals sent
# while a conversion works, strace delaying system calls to open a race window, a lock contended by
# two processes, a timed --help): they share one worker, so two such tests never compete with each
# other for the cores they need; the rest are balanced over the other workers meanwhile.
ONE_WORKER_MODULES = frozenset(
    {
        "test_cli_process",
        "test_contract",
        "test_faults",
        "test_output_faults",
        "test_remote",
        "test_resume_published",
        "test_robustness",
        "test_update_resume",
    }
)


def pytest_itemcollected(item: pytest.Item) -> None:
    """Put the tests of ONE_WORKER_MODULES in one xdist group (honoured by --dist loadgroup)."""
    if item.path.stem in ONE_WORKER_MODULES:
        item.add_marker(pytest.mark.xdist_group("processes"))
