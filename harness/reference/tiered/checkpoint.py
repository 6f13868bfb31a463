"""Checkpoints of training with tables on the SSD tier, safe against ``kill -9`` at any moment.

A checkpoint at step ``s``:

1. flushes the cache (every dirty row written back, the file ``fsync``-ed): the working
   table file is then exactly the tables at step ``s``;
2. copies that file to ``tables-<s>.bin`` and saves the dense model and optimizer
   (``dense-<s>.pt``), each written to a temporary name, ``fsync``-ed, and renamed;
3. writes the manifest ``checkpoint.json`` (step, files, their SHA-256) the same way. The
   rename of the manifest is the commit: before it the previous checkpoint is the latest,
   after it the new one, and a crash in between leaves at most a stray temporary file.

After the checkpoint, training goes on writing evicted rows into the *working* file, never
into the checkpoint's copy. Resuming (:func:`restore_tables`, :func:`restore_dense`) verifies both checksums (a corrupted
or truncated checkpoint is one clear error), copies the checkpoint's tables back into the
working file and loads the dense state; training then continues from step ``s`` with a
cold cache, which changes nothing in the arithmetic (``tests/reference/test_tiered_resume.py``
kills training with ``SIGKILL`` at random points, resumes, and gets the uninterrupted run's
tables, checksum for checksum).

``python -m harness.reference.tiered.checkpoint JOB.json`` trains a benchmark's model for
``steps`` steps on the SSD tier with a checkpoint every ``every`` steps, resuming from the
job's checkpoint directory if it holds one; it prints ``step N`` and ``checkpoint N`` lines
as it goes and, at the end, writes ``result.json`` (the SHA-256 of the final tables).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
import sys
from pathlib import Path
from typing import Any

import torch

from harness.errors import ErrorCategory, HarnessError

MANIFEST = "checkpoint.json"
_CHUNK = 1 << 22


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _durable_copy(src: Path, dst: Path) -> None:
    tmp = dst.with_name(f".{dst.name}.tmp")
    with open(src, "rb") as fin, open(tmp, "wb") as fout:
        shutil.copyfileobj(fin, fout, _CHUNK)
        fout.flush()
        os.fsync(fout.fileno())
    os.replace(tmp, dst)


def dense_state(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
    """Everything but the embedding tables (which live in their file)."""
    return {
        "model": {k: v for k, v in model.state_dict().items() if not k.startswith("sparse_arch.")},
        "optimizer": optimizer.state_dict(),
    }


def save(directory: Path, step: int, tables: Any, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> None:
    """Checkpoint at ``step`` (see the module docstring for the order of writes)."""
    directory.mkdir(parents=True, exist_ok=True)
    tables.flush()
    tables_file = directory / f"tables-{step}.bin"
    dense_file = directory / f"dense-{step}.pt"
    _durable_copy(tables.store.path, tables_file)
    tmp = dense_file.with_name(f".{dense_file.name}.tmp")
    with open(tmp, "wb") as f:
        torch.save(dense_state(model, optimizer), f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, dense_file)
    manifest = {
        "step": step,
        "tables": tables_file.name,
        "tables_sha256": file_sha256(tables_file),
        "dense": dense_file.name,
        "dense_sha256": file_sha256(dense_file),
    }
    tmp = directory / f".{MANIFEST}.tmp"
    with open(tmp, "w") as f:
        json.dump(manifest, f)
        f.flush()
        os.fsync(f.fileno())
    previous = latest(directory)
    os.replace(tmp, directory / MANIFEST)
    _fsync_dir(directory)
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
    _durable_copy(directory / manifest["tables"], working_tables)
    return manifest


def restore_dense(directory: Path, manifest: dict[str, Any], model: torch.nn.Module,
                  optimizer: torch.optim.Optimizer) -> None:
    """Load the checkpoint's dense model and optimizer state (verified by :func:`restore_tables`)."""
    state = torch.load(directory / manifest["dense"], weights_only=True)
    missing, unexpected = model.load_state_dict(state["model"], strict=False)
    if unexpected or any(not k.startswith("sparse_arch.") for k in missing):
        raise HarnessError(f"checkpoint {directory}: its model does not match this run's", ErrorCategory.BAD_INPUT)
    optimizer.load_state_dict(state["optimizer"])


def main(job_path: str) -> int:
    """The resumable training job of the module docstring."""
    from harness.reference import synthetic
    from harness.reference.tiered import lookahead
    from harness.reference.trainer import RunConfig, Trainer

    job = json.loads(Path(job_path).read_text())
    ckpt, work = Path(job["checkpoints"]), Path(job["tables"])
    config = RunConfig.from_json(json.dumps(job["run_config"]))
    torch.set_num_threads(1)
    manifest = restore_tables(ckpt, work)
    if manifest is not None:  # the working file holds the checkpoint's rows: train on them, cache cold
        config = dataclasses.replace(config, embedding_tier={**(config.embedding_tier or {}), "rows_in_file": True})
    trainer = Trainer(config)
    model, optimizer = trainer._model()  # without a checkpoint, writes the initial tables into the working file
    tables = trainer._tiered_tables
    start = 0
    if manifest is not None:
        restore_dense(ckpt, manifest, model, optimizer)
        start = int(manifest["step"])
    data = trainer._data()
    gbs = int(config.hyperparameters["global_batch_size"])
    order = synthetic.EpochOrder.from_seed(config.seed, config.benchmark["dataset"]["train_samples"])
    batches = synthetic.train_batches(data, order, gbs, start_batch=start)
    loss_fn = torch.nn.BCEWithLogitsLoss()
    print(f"resumed {start}" if start else "started", flush=True)
    step = start
    for batch in lookahead(batches, tables):
        optimizer.zero_grad(set_to_none=True)
        loss_fn(model(batch.dense, batch.sparse), batch.labels).backward()
        optimizer.step()
        step += 1
        print(f"step {step}", flush=True)
        if step % job["every"] == 0:
            print(f"checkpoint {step} begin", flush=True)
            save(ckpt, step, tables, model, optimizer)
            print(f"checkpoint {step} end", flush=True)
        if step == job["steps"]:
            break
    tables.flush()
    (Path(job["result"])).write_text(json.dumps({"steps": step, "tables_sha256": file_sha256(work),
                                                 "resumed_from": start}))
    tables.close()
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1]))
    except HarnessError as err:
        print(f"harness checkpoint: error: {err}", file=sys.stderr)
        sys.exit(err.exit_code)
