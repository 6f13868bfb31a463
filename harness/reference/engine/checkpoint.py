"""Checkpoints of training with tables on the SSD tier, safe against ``kill -9`` at any moment.

A checkpoint at step ``s``:

1. flushes the cache (every dirty row written back, the file ``fsync``-ed): the working
   table file is then exactly the tables at step ``s``;
2. copies that file to ``tables-<s>.bin`` and saves the rest of the session's state (step,
   dense model, optimizer: ``dense-<s>.pt``), each written to a temporary name, ``fsync``-ed, and renamed;
3. writes the manifest ``checkpoint.json`` (step, files, their SHA-256) the same way. The
   rename of the manifest is the commit: before it the previous checkpoint is the latest,
   after it the new one, and a crash in between leaves at most a stray temporary file.

After the checkpoint, training goes on writing evicted rows into the *working* file, never
into the checkpoint's copy. Resuming (:func:`restore_tables`, :func:`restore_state`) verifies both checksums (a corrupted
or truncated checkpoint is one clear error), copies the checkpoint's tables back into the
working file and loads the rest of the session's state; training then continues from step ``s`` with a
cold cache, which changes nothing in the arithmetic (``tests/reference/engine/test_checkpoint.py``
kills training with ``SIGKILL`` at random points, resumes, and gets the uninterrupted run's
tables, checksum for checksum).

``python -m harness.reference.engine.checkpoint JOB.json`` trains a benchmark's model for
``steps`` steps on the SSD tier with a checkpoint every ``every`` steps, resuming from the
job's checkpoint directory if it holds one; it prints ``step N`` and ``checkpoint N`` lines
as it goes and, at the end, writes ``result.json`` (the SHA-256 of the final tables).
"""

from __future__ import annotations

import hashlib
import json
import shutil
import sys
from pathlib import Path
from typing import Any

import torch

from harness.errors import ErrorCategory, HarnessError
from harness.files import replace_atomic
from harness.process import exit_now
from harness.reference.engine.run_config import RunConfig
from harness.reference.engine.session import SessionHooks, TrainingSession

MANIFEST = "checkpoint.json"
_CHUNK = 1 << 22


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def _copy(src: Path, tmp: Path) -> None:
    with open(src, "rb") as fin, open(tmp, "wb") as fout:
        shutil.copyfileobj(fin, fout, _CHUNK)


def save(directory: Path, session: TrainingSession) -> None:
    """Checkpoint ``session`` (a :class:`~harness.reference.engine.session.TrainingSession` with its
    tables on the SSD tier) at its current step (see the module docstring for the order of writes)."""
    step, source = session.step_count, session.table_file
    if source is None:
        raise HarnessError("a checkpoint is of tables on the SSD tier; this session's are in memory",
                           ErrorCategory.BAD_INPUT)
    directory.mkdir(parents=True, exist_ok=True)
    session.flush()
    tables_file = directory / f"tables-{step}.bin"
    dense_file = directory / f"dense-{step}.pt"
    replace_atomic(tables_file, lambda tmp: _copy(source, tmp), durable=True)
    # everything but the tables, which are in their file
    replace_atomic(dense_file, lambda tmp: torch.save(session.state_dict(), tmp), durable=True)
    manifest = {
        "step": step,
        "tables": tables_file.name,
        "tables_sha256": file_sha256(tables_file),
        "dense": dense_file.name,
        "dense_sha256": file_sha256(dense_file),
    }
    previous = latest(directory)
    replace_atomic(directory / MANIFEST, lambda tmp: tmp.write_text(json.dumps(manifest)), durable=True)
    if previous is not None and previous["step"] != step:  # the old checkpoint is no longer needed
        (directory / previous["tables"]).unlink(missing_ok=True)
        (directory / previous["dense"]).unlink(missing_ok=True)


def latest(directory: Path) -> dict[str, Any] | None:
    """The committed checkpoint's manifest, or None."""
    try:
        return json.loads((directory / MANIFEST).read_text())
    except FileNotFoundError:
        return None
    except (OSError, json.JSONDecodeError) as err:
        raise HarnessError(f"{directory / MANIFEST}: unreadable checkpoint manifest ({err})") from None


def restore_tables(directory: Path, working_tables: Path) -> dict[str, Any] | None:
    """Verify the latest checkpoint (both files against their SHA-256) and copy its tables into
    ``working_tables``; its manifest, or None when there is no checkpoint."""
    manifest = latest(directory)
    if manifest is None:
        return None
    for kind in ("tables", "dense"):
        path = directory / manifest[kind]
        if not path.is_file() or file_sha256(path) != manifest[f"{kind}_sha256"]:
            raise HarnessError(
                f"checkpoint {directory} (step {manifest['step']}): {path.name} is missing or does not match its "
                "SHA-256; it cannot be resumed from", ErrorCategory.BAD_INPUT,
            )
    replace_atomic(working_tables, lambda tmp: _copy(directory / manifest["tables"], tmp), durable=True)
    return manifest


def restore_state(directory: Path, manifest: dict[str, Any], session: TrainingSession) -> None:
    """Continue ``session`` from the checkpoint's state (verified by :func:`restore_tables`)."""
    session.load_state_dict(torch.load(directory / manifest["dense"], weights_only=True))


class _Checkpoints(SessionHooks):
    """The job's hooks: a line per step, a checkpoint every ``every`` steps."""

    def __init__(self, directory: Path, every: int):
        self.directory, self.every = directory, every

    def after_step(self, session: TrainingSession, loss: torch.Tensor) -> bool:
        print(f"step {session.step_count}", flush=True)
        if session.step_count % self.every == 0:
            print(f"checkpoint {session.step_count} begin", flush=True)
            save(self.directory, session)
            print(f"checkpoint {session.step_count} end", flush=True)
        return False


def main(job_path: str) -> int:
    """The resumable training job of the module docstring."""
    job = json.loads(Path(job_path).read_text())
    ckpt, work = Path(job["checkpoints"]), Path(job["tables"])
    config = RunConfig.from_json(json.dumps(job["run_config"]))
    torch.set_num_threads(1)
    manifest = restore_tables(ckpt, work)
    if manifest is not None:  # the working file holds the checkpoint's rows: train on them, cache cold
        config = config.with_tier(rows_in_file=True)
    session = TrainingSession(config)  # without a checkpoint, writes the initial tables into the working file
    if manifest is not None:
        restore_state(ckpt, manifest, session)
    start = session.step_count
    print(f"resumed {start}" if start else "started", flush=True)
    session.train(_Checkpoints(ckpt, job["every"]), eval_at=[], until=job["steps"], stop_at_target=False)
    session.flush()
    (Path(job["result"])).write_text(json.dumps({"steps": session.step_count, "tables_sha256": file_sha256(work),
                                                 "resumed_from": start}))
    session.close()
    return 0


def cli(job_path: str) -> int:
    """:func:`main` as ``python -m harness.reference.engine.checkpoint JOB.json`` runs it: an
    error is one line on stderr and its exit status."""
    try:
        return main(job_path)
    except HarnessError as err:
        print(f"harness checkpoint: error: {err}", file=sys.stderr, flush=True)
        return err.exit_code


if __name__ == "__main__":
    exit_now(cli(sys.argv[1]))
