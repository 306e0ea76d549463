"""A remote input's sizes and mtimes where its listing gives names only (TensorFlow's gs://): one
stat per image, in threads. fsspec's stores list them (stores.Store.entries): nothing left to ask.

Apart from the walk (conversion.plan.walk), which calls it for convert's catalog, as `update` does
(conversion.versions.changes) to tell changed images from unchanged ones.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from img2tfrecord import fs
from img2tfrecord.conversion.plan.table import ImageTable

LIST_THREADS = 32  # concurrent gfile listings of a remote input (each is one or a few HTTP requests)


def stat_remote(table: ImageTable, threads: int = LIST_THREADS) -> int:
    """Fill in the size and mtime_ns that a remote listing leaves at 0, one `gfile.stat` per image
    in `threads` threads; returns how many could not be stat'ed (left at 0). A request per object:
    what `update` pays to tell changed images from unchanged ones, not what `convert`'s walk does."""
    todo = [i for i in range(len(table)) if table.sizes[i] == 0 and table.mtimes[i] == 0]

    def one(i: int) -> fs.FileStat | None:
        try:
            return fs.file_stat(table.task(i).path)
        except Exception:  # tf.errors.NotFoundError & co.: the encoder reports the file later
            return None

    failed = 0
    with ThreadPoolExecutor(max(1, min(threads, len(todo))), thread_name_prefix="stat") as pool:
        for i, st in zip(todo, pool.map(one, todo)):
            if st is None:
                failed += 1
            else:
                table.sizes[i], table.mtimes[i] = st
    return failed
