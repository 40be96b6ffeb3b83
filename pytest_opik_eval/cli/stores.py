"""The store a command reads, found and opened; and the commands that move records between
stores: ``merge`` (the stores of CI shards, and the recordings beside them, into one) and
``sync`` (to the Opik server, what an earlier session could not send)."""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from pytest_opik_eval.escaping import escape_control
from pytest_opik_eval.exceptions import StoreError
from pytest_opik_eval.options import STORE_ENV, STORE_FILE, STORE_FOLDER
from pytest_opik_eval.store import Store
from pytest_opik_eval.store.local import LocalStore


def store_path(given: str | None) -> Path:
    """The store named (``--store``, else the env), else the nearest one up from here, else where
    this folder's would be."""
    if given:
        return Path(given)
    if os.environ.get(STORE_ENV):
        return Path(os.environ[STORE_ENV])
    cwd = Path.cwd()
    for folder in (cwd, *cwd.parents):
        candidate = folder / STORE_FOLDER / STORE_FILE
        if candidate.exists():
            return candidate
    return cwd / STORE_FOLDER / STORE_FILE


def open_store(path: Path, backend: str, *, create: bool) -> Store:
    if backend == "opik":
        from pytest_opik_eval.store.opik.config import read_settings
        from pytest_opik_eval.store.opik.store import OpikStore

        return OpikStore(read_settings(), path)
    return LocalStore(path, create=create, option="--store")


def merge(store: Store, args: argparse.Namespace) -> int:
    if not isinstance(store, LocalStore):
        print("opik-eval: merge combines local stores; with the Opik backend the shards share the server")
        return 2
    for source in args.sources:
        runs = store.merge_from(Path(source))
        print(f"merged {runs} run(s) from {source} into {store.location}")
        _merge_recordings(store.path.parent, Path(source).parent)
        _merge_batches(store.path.parent, Path(source).parent)
    return 0


def _merge_batches(target_folder: Path, source_folder: Path) -> None:
    """The ledgers of a shard's provider batches (--eval-batch): a resume of the merged run
    collects every shard's batches."""
    from pytest_opik_eval.store.batch_ledger import batches_folder, merge

    source, target = batches_folder(source_folder), batches_folder(target_folder)
    if not source.is_dir() or source.resolve() == target.resolve():
        return
    try:
        copied = merge(target, source)
    except OSError as error:
        raise StoreError(f"could not merge the batch ledgers of {source} into {target}: {error}") from None
    print(f"merged {copied} batch ledger file(s) from {source} into {target}")


def _merge_recordings(target_folder: Path, source_folder: Path) -> None:
    """The recordings of the app's calls (--eval-record) beside a shard's store, added to those
    beside this store: the shards of one run recorded its trials between them."""
    from pytest_opik_eval.store import http_recordings

    source = http_recordings.recordings_folder(source_folder)
    target = http_recordings.recordings_folder(target_folder)
    if not source.is_dir() or source.resolve() == target.resolve():
        return
    try:
        added = http_recordings.merge(target, [source])
    except (OSError, ValueError) as error:  # a file that cannot be read, written or parsed
        raise StoreError(f"could not merge the recordings of {source} into {target}: {error}") from None
    print(f"merged {added} recorded call(s) from {source} into {target}")


def sync(path: Path, timeout: float) -> int:
    from pytest_opik_eval.store.opik.client import OpikClient, OpikUnavailable
    from pytest_opik_eval.store.opik.config import read_settings, sync_command
    from pytest_opik_eval.store.opik.sender import drain
    from pytest_opik_eval.store.opik.spool import Spool, unsent_line

    try:
        spool = Spool(path, create=False, option="--store")
    except StoreError as error:
        print(escape_control(f"opik-eval: {error}", newlines=True), file=sys.stderr)
        return 2
    client = OpikClient(read_settings())
    failures: list[OpikUnavailable] = []
    deadline = time.monotonic() + timeout
    client.finish_by(deadline)  # no request outlives the timeout
    try:
        drain(spool, client, until=deadline, on_down=failures.append)
        left = unsent_line(spool, sync_command(path))
    except StoreError as error:
        # The spool cannot be written (marking a batch sent): what was sent but not marked is
        # sent again by the next sync, which is harmless (every write carries its id).
        print(escape_control(f"opik-eval: {error}", newlines=True), file=sys.stderr)
        return 2
    finally:
        client.close()
        spool.close()
    for failure in failures:
        print(f"opik-eval: {escape_control(str(failure))}", file=sys.stderr)
    print(escape_control(left) if left else f"everything in {path} has reached the Opik server")
    return 1 if left else 0
