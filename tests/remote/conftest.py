"""A real S3 server on this machine: moto's (`moto[server]`: the S3 HTTP protocol on 127.0.0.1).

One server a test session (a pytest-xdist worker starts its own), reached through the variables
an AWS user sets (AWS_ENDPOINT_URL, keys, region), which worker processes inherit; a bucket a test.
No network: the server listens on the loopback only. moto missing is a failure, not a skip: `make
test` installs it (the `test` extra).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

S3_ENV = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_listening(port: int, proc: subprocess.Popen[bytes], log: Path) -> None:
    """Until the server accepts connections (it imports Flask and moto first: a few seconds)."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"moto_server exited with {proc.returncode}: {log.read_text()[-2000:]}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            time.sleep(0.1)
    pytest.fail(f"moto_server did not listen on 127.0.0.1:{port}: {log.read_text()[-2000:]}")


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """moto's S3 server as a subprocess; the endpoint URL, set with dummy keys in os.environ."""
    try:
        import moto.server  # noqa: F401
        import s3fs  # noqa: F401
    except ImportError as e:
        pytest.fail(f"the S3 tests need moto[server] and s3fs (pip install -e '.[test]'): {e}")
    port = _free_port()
    log = tmp_path_factory.mktemp("moto") / "server.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    endpoint = f"http://127.0.0.1:{port}"
    saved = {k: os.environ.get(k) for k in [*S3_ENV, "AWS_ENDPOINT_URL"]}
    try:
        _wait_listening(port, proc, log)
        os.environ.update(S3_ENV | {"AWS_ENDPOINT_URL": endpoint})
        yield endpoint
    finally:
        proc.terminate()
        proc.wait(30)
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@pytest.fixture
def bucket(s3_server: str) -> str:
    """A new empty bucket: its s3:// URL."""
    import s3fs

    name = f"test-{uuid.uuid4().hex[:12]}"
    s3fs.S3FileSystem(use_listings_cache=False).mkdir(name)
    return f"s3://{name}"
