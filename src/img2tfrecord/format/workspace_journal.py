"""Workspace naming and the resume journal's file: where a run's workspace is and what its journal holds.

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
ASIDE_NAME = "previous"  # in the workspace: OUTPUT's old version, between a plain-rename switch's two renames


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


class CutShort(NamedTuple):
    """A switch without RENAME_EXCHANGE killed between its two renames: OUTPUT is missing, its
    dataset renamed aside into the workspace, the new version beside it (conversion.write.publish)."""

    aside: str  # where the dataset is now, as the user's OUTPUT spells it
    command: list[str]  # the command that puts it back and finishes the run that was cut short


def switch_cut_short(output: str) -> CutShort | None:
    """The pending version of an `output` that does not exist (local), or None.

    Every update, compact or convert of OUTPUT first renames the dataset back (`recover`); the
    command advised is the one that also finishes the run: `update IN OUT --resume` (IN as the
    journal's command line gives it), the journal's convert with --resume, or (no journal: a
    compact) `compact OUT`."""
    if fs.is_remote(output) or os.path.lexists(output):
        return None
    head, name = os.path.split(os.path.normpath(output))
    folder = os.path.join(head, workspace_name(name))
    aside = os.path.join(folder, ASIDE_NAME)
    if not os.path.isdir(aside):
        return None
    lines = entries(folder)
    first = lines[0] if lines else {}
    line = first.get("command_line")
    line = line if isinstance(line, list) and len(line) > 3 and all(isinstance(c, str) for c in line) else None
    if not lines:
        command = ["img2tfrecord", "compact", output]
    elif first.get("command") == "update":
        command = ["img2tfrecord", "update", line[2] if line else "INPUT", output, "--resume"]
    else:
        command = [*line, "--resume"] if line else ["img2tfrecord", "convert", "INPUT", output, "--resume"]
    return CutShort(aside, command)
