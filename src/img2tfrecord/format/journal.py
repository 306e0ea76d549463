"""The resume journal's file: where a run's workspace is and what its journal holds.

A run writes OUTPUT's next version in a workspace beside it, `.NAME.img2tfrecord/` (in OUTPUT
itself where there is no atomic switch: conversion.write.publish), and records each finished shard in
its `journal.jsonl`: a header line (the job's fingerprint, and the command that makes it), then one
line per finished shard (conversion.write.resume writes it). Readers use this to say what an interrupted
run left: `inspect` of an OUTPUT a killed run never published.
"""

from __future__ import annotations

import json
import os
from typing import Any, NamedTuple

from img2tfrecord import fs

JOURNAL_NAME = "journal.jsonl"
WORKSPACE_SUFFIX = ".img2tfrecord"


def workspace_name(output_name: str) -> str:
    """`.out.img2tfrecord`: the workspace folder of an OUTPUT named `out`, in OUTPUT's parent."""
    return f".{output_name}{WORKSPACE_SUFFIX}"


def entries(folder: str) -> list[Any]:
    """The journal's lines in `folder`: its header, then one per finished shard; [] without a journal."""
    path = fs.join(folder, JOURNAL_NAME)
    if not fs.exists(path):
        return []
    out = []
    for line in fs.read_bytes(path).splitlines():
        try:
            out.append(json.loads(line))
        except (ValueError, RecursionError):
            break  # a line cut short by a crash (or damaged): what follows it is not trusted
    return out if out and isinstance(out[0], dict) else []


class Unfinished(NamedTuple):
    """An interrupted run's workspace beside an OUTPUT that does not exist."""

    folder: str  # as the user's OUTPUT path spells it: `.out.img2tfrecord`
    done: int  # finished shards
    total: int  # shards of the run
    command: list[str] | None  # the convert command line that makes the job (without --resume)


def unfinished_beside(output: str) -> Unfinished | None:
    """The workspace an interrupted run left beside `output` (local), or None."""
    if fs.is_remote(output):
        return None
    head, name = os.path.split(os.path.normpath(output))
    folder = os.path.join(head, workspace_name(name))
    lines = entries(folder)
    if not lines:
        return None
    first = lines[0]
    shards, command = first.get("shards"), first.get("command_line")
    total = len(shards) if isinstance(shards, dict) else len(lines) - 1
    ok = isinstance(command, list) and all(isinstance(c, str) for c in command) and "command" not in first
    return Unfinished(folder, len(lines) - 1, total, command if ok else None)
