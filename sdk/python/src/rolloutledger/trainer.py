"""Resuming a trainer after a crash: :class:`TrainerState`.

The resume point is kept in a small JSON file the trainer owns (next to its
checkpoints), because the ledger's HTTP interface has no read-back of the
``gradient.applied`` facts. The file is written like a write-ahead log:

1. before reporting step k, the SDK records the exact records it is about to
   send (``gradient.applied`` for batch k and, optionally, the
   ``policy.published`` of version k) together with the state they lead to;
2. it sends them and waits for the ledger's acknowledgment;
3. it records step k as applied and clears the pending records.

Each write replaces the file atomically (write, fsync, rename), so the file
always holds either the old or the new state. After a crash at any point:

* before 1: step k was not reported; the loop resumes after step k-1 and
  gets batch k again (nothing lost);
* between 1 and 3: the pending records are sent again with the same ids and
  bytes, which the ledger drops as duplicates, and step k counts as applied
  (nothing repeated);
* after 3: the loop resumes after step k.

The ledger is used to check the file: on resume, the digest recorded for the
last applied step must equal the sealed batch's digest, so a state file of
another run or another ledger is refused rather than silently followed.

The trainer's own weights must be durable for step k before step k is
reported (save the checkpoint, then call ``gradient_applied``); ``extra``
lets the trainer commit, say, the checkpoint path in the same write.
"""

from __future__ import annotations

import json
import os
import tempfile
from typing import Any

from . import errors as E

__all__ = ["TrainerState"]

_FORMAT = 1


class TrainerState:
    """The trainer's resume point for one run, kept in ``path``.

    ``step`` is the last gradient step reported and acknowledged (0 before
    the first), ``digest`` the digest of its batch, ``version`` the last
    policy version published through this state (-1 if none), ``extra`` the
    caller's data committed with the last step.
    """

    def __init__(self, path: str | os.PathLike, run: str):
        self.path = os.fspath(path)
        self.run = run
        self.step = 0
        self.digest = ""
        self.version = -1
        self.extra: dict[str, Any] = {}
        self.pending: dict[str, Any] | None = None
        if os.path.exists(self.path):
            self._load()

    def _load(self):
        with open(self.path, "rb") as f:
            d = json.load(f)
        if d.get("format") != _FORMAT:
            raise E.ResumeError(f"{self.path}: unknown state format {d.get('format')!r}")
        if d.get("run") != self.run:
            raise E.ResumeError(f"{self.path} is the state of run {d.get('run')!r}, not {self.run!r}")
        self.step = int(d["step"])
        self.digest = str(d.get("digest", ""))
        self.version = int(d.get("version", -1))
        self.extra = dict(d.get("extra") or {})
        self.pending = d.get("pending")

    def to_json(self) -> dict:
        return {
            "format": _FORMAT,
            "run": self.run,
            "step": self.step,
            "digest": self.digest,
            "version": self.version,
            "extra": self.extra,
            "pending": self.pending,
        }

    def save(self):
        """Replaces the file atomically and durably."""
        d = os.path.dirname(os.path.abspath(self.path))
        os.makedirs(d, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".trainer-state-", dir=d)
        try:
            with os.fdopen(fd, "w") as f:
                json.dump(self.to_json(), f, separators=(",", ":"))
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.path)
        except BaseException:
            try:
                os.unlink(tmp)
            except FileNotFoundError:
                pass
            raise
        try:
            dfd = os.open(d, os.O_RDONLY)
        except OSError:  # pragma: no cover - platforms without directory fds
            return
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)

    # The write-ahead protocol, driven by the Ledger client.

    def begin(self, records: list[bytes], commit: dict[str, Any]):
        """Step 1: records about to be sent and the state they lead to."""
        self.pending = {"records": [r.decode("utf-8") for r in records], "commit": commit}
        self.save()

    def commit(self):
        """Step 3: the pending records were acknowledged."""
        if self.pending is None:
            return
        c = self.pending["commit"]
        if "step" in c:
            self.step = int(c["step"])
            self.digest = str(c["digest"])
        if "version" in c:
            self.version = int(c["version"])
        if "extra" in c:
            self.extra = dict(c["extra"] or {})
        self.pending = None
        self.save()

    def pending_records(self) -> list[bytes]:
        if self.pending is None:
            return []
        return [r.encode("utf-8") for r in self.pending["records"]]

    def __repr__(self) -> str:
        return f"TrainerState(path={self.path!r}, run={self.run!r}, step={self.step}, version={self.version}, pending={self.pending is not None})"
