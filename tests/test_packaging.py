"""The installed package: a consistent dependency set and both entry points."""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest


def test_dependency_set_is_consistent():
    """TensorFlow and (when installed) Apache Beam agree on protobuf & co.: `pip check` is clean."""
    res = subprocess.run([sys.executable, "-m", "pip", "check"], capture_output=True, text=True)
    assert res.returncode == 0, res.stdout + res.stderr


def test_console_script_and_module_entry_point():
    script = shutil.which("img2tfrecord", path=str(__import__("pathlib").Path(sys.executable).parent))
    if script is None:
        pytest.skip("package not installed with its console script")
    for cmd in ([script, "--version"], [sys.executable, "-m", "img2tfrecord", "--version"]):
        res = subprocess.run(cmd, capture_output=True, text=True)
        assert res.returncode == 0 and res.stdout.startswith("img2tfrecord, version ")
