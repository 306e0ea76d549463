"""A bucket whose endpoint does not answer: every command that reads or writes it says so in one
line (exit 1, no traceback) before any work, and load() raises our DataError, not botocore's."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from helpers import make_dataset
from img2tfrecord.cli import main
from img2tfrecord.errors import DataError

DEAD = "http://127.0.0.1:9"  # discard port on the loopback: nothing listens, the connection is refused


@pytest.fixture
def dead_endpoint(monkeypatch: pytest.MonkeyPatch) -> None:
    import s3fs  # noqa: F401 - make test installs it (the test extra): missing is a failure, not a skip

    for k, v in {"AWS_ENDPOINT_URL": DEAD, "AWS_ACCESS_KEY_ID": "x", "AWS_SECRET_ACCESS_KEY": "y"}.items():
        monkeypatch.setenv(k, v)
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")  # botocore's retries of a refused connection: one is enough here
    monkeypatch.delenv("IMG2TFRECORD_STORAGE_OPTIONS", raising=False)


@pytest.mark.parametrize(
    "args",
    [
        ["convert", "DATA", "s3://bkt/out"],
        ["convert", "s3://bkt/in", "OUT"],
        ["update", "DATA", "s3://bkt/out"],
        ["compact", "s3://bkt/out"],
        ["inspect", "s3://bkt/out"],
        ["inspect", "s3://bkt/out", "--verify"],
        ["report", "s3://bkt/out", "-o", "OUT/r.html"],
    ],
    ids=lambda a: " ".join(a[:2]),
)
def test_every_command_says_in_one_line_that_the_bucket_does_not_answer(
    tmp_path: Path, dead_endpoint: None, args: list[str]
) -> None:
    data = tmp_path / "data"
    make_dataset(data, {"cat": 1})
    (tmp_path / "out").mkdir()
    argv = [str(data) if a == "DATA" else a.replace("OUT", str(tmp_path / "out")) for a in args]
    r = CliRunner().invoke(main, argv)
    assert r.exit_code == 1, r.output
    assert "Traceback" not in r.output
    assert r.exception is None or isinstance(r.exception, SystemExit)  # our exit, not an escaped error
    (line,) = [x for x in r.output.splitlines() if x.strip()]
    assert line.startswith("error: ") and "cannot be reached" in line and "127.0.0.1:9" in line


def test_load_of_a_bucket_that_does_not_answer_raises_one_clear_error(dead_endpoint: None) -> None:
    from img2tfrecord import load

    with pytest.raises(DataError, match="cannot be reached"):
        load("s3://bkt/out")
