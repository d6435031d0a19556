"""Sealed batches and their materialized samples, as NumPy arrays.

A batch's manifest (the ``batch.sealed`` decision, DESIGN.md section 5) is a
:class:`Batch`; its samples (``GET .../batches/{seq}/samples``, one NDJSON
line per attempt and training segment) are a :class:`SampleBatch` of
:class:`Sample`. Every token of a sample carries its id, its loss mask (1 on
completion tokens of trained turns, 0 on observation tokens and stale
turns), the rollout log-prob (0 for observation tokens) and the policy
version of its turn; the sample carries its attempt's advantage.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Iterator, Sequence

import numpy as np

__all__ = ["Batch", "Sample", "SampleBatch", "parse_samples"]


def _torch():
    try:
        import torch  # noqa: PLC0415 - optional dependency
    except ImportError as e:  # pragma: no cover - depends on the machine
        raise ImportError("to_torch() needs PyTorch: pip install torch (or rolloutledger[torch])") from e
    return torch


@dataclass(eq=False)
class Sample:
    """One attempt's training segment."""

    group: str
    attempt: str
    segment: int
    token_ids: np.ndarray  # int32
    loss_mask: np.ndarray  # int8, 1 where the token trains
    rollout_logprobs: np.ndarray  # float32
    policy_versions: np.ndarray  # int64
    advantage: float

    def __len__(self) -> int:
        return int(self.token_ids.shape[0])

    @property
    def advantages(self) -> np.ndarray:
        """The attempt's advantage on every trained token, 0 elsewhere
        (float32)."""
        return (self.loss_mask * np.float32(self.advantage)).astype(np.float32)

    def to_torch(self, device=None) -> dict[str, Any]:
        """The arrays as torch tensors (int64 token ids, bool loss mask)."""
        torch = _torch()
        return {
            "token_ids": torch.as_tensor(self.token_ids.astype(np.int64), device=device),
            "loss_mask": torch.as_tensor(self.loss_mask.astype(bool), device=device),
            "rollout_logprobs": torch.as_tensor(self.rollout_logprobs, device=device),
            "policy_versions": torch.as_tensor(self.policy_versions, device=device),
            "advantages": torch.as_tensor(self.advantages, device=device),
        }


class SampleBatch(Sequence[Sample]):
    """The samples of one batch, in manifest order."""

    def __init__(self, samples: list[Sample]):
        self.samples = samples

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, i):
        return self.samples[i]

    def __iter__(self) -> Iterator[Sample]:
        return iter(self.samples)

    @property
    def num_tokens(self) -> int:
        return sum(len(s) for s in self.samples)

    @property
    def num_trained_tokens(self) -> int:
        return int(sum(int(s.loss_mask.sum()) for s in self.samples))

    def padded(self, pad_id: int = 0) -> dict[str, np.ndarray]:
        """Right-padded 2-D arrays, one row per sample:

        token_ids int32 [n, L] (pad ``pad_id``), loss_mask int8 [n, L],
        attention_mask int8 [n, L], rollout_logprobs float32 [n, L],
        policy_versions int64 [n, L] (pad -1), token_advantages float32
        [n, L] (the advantage where loss_mask is 1), advantages float64 [n],
        lengths int64 [n].
        """
        n = len(self.samples)
        lengths = np.array([len(s) for s in self.samples], dtype=np.int64)
        width = int(lengths.max()) if n else 0
        out = {
            "token_ids": np.full((n, width), pad_id, dtype=np.int32),
            "loss_mask": np.zeros((n, width), dtype=np.int8),
            "attention_mask": np.zeros((n, width), dtype=np.int8),
            "rollout_logprobs": np.zeros((n, width), dtype=np.float32),
            "policy_versions": np.full((n, width), -1, dtype=np.int64),
            "token_advantages": np.zeros((n, width), dtype=np.float32),
            "advantages": np.array([s.advantage for s in self.samples], dtype=np.float64),
            "lengths": lengths,
        }
        for i, s in enumerate(self.samples):
            m = len(s)
            out["token_ids"][i, :m] = s.token_ids
            out["loss_mask"][i, :m] = s.loss_mask
            out["attention_mask"][i, :m] = 1
            out["rollout_logprobs"][i, :m] = s.rollout_logprobs
            out["policy_versions"][i, :m] = s.policy_versions
            out["token_advantages"][i, :m] = s.advantages
        return out

    def packed(self) -> dict[str, np.ndarray]:
        """All samples end to end, with ``cu_seqlens`` int64 [n+1] marking
        where each starts (the layout of variable-length attention kernels)."""
        lengths = np.array([len(s) for s in self.samples], dtype=np.int64)
        cu = np.zeros(len(self.samples) + 1, dtype=np.int64)
        np.cumsum(lengths, out=cu[1:])

        def cat(name, dtype):
            parts = [getattr(s, name) for s in self.samples]
            return np.concatenate(parts).astype(dtype) if parts else np.zeros(0, dtype=dtype)

        return {
            "token_ids": cat("token_ids", np.int32),
            "loss_mask": cat("loss_mask", np.int8),
            "rollout_logprobs": cat("rollout_logprobs", np.float32),
            "policy_versions": cat("policy_versions", np.int64),
            "token_advantages": cat("advantages", np.float32),
            "advantages": np.array([s.advantage for s in self.samples], dtype=np.float64),
            "cu_seqlens": cu,
        }

    def to_torch(self, device=None, pad_id: int = 0) -> dict[str, Any]:
        """:meth:`padded` as torch tensors (int64 ids, bool masks)."""
        torch = _torch()
        p = self.padded(pad_id)
        out = {}
        for k, v in p.items():
            if k == "token_ids":
                v = v.astype(np.int64)
            elif k in ("loss_mask", "attention_mask"):
                v = v.astype(bool)
            out[k] = torch.as_tensor(v, device=device)
        return out


def parse_samples(ndjson: bytes) -> SampleBatch:
    """Parses the NDJSON body of ``GET .../batches/{seq}/samples``."""
    out = []
    for line in ndjson.splitlines():
        if not line.strip():
            continue
        d = json.loads(line)
        out.append(
            Sample(
                group=d["group"],
                attempt=d["attempt"],
                segment=int(d["segment"]),
                token_ids=np.asarray(d["token_ids"], dtype=np.int32),
                loss_mask=np.asarray(d["loss_mask"], dtype=np.int8),
                rollout_logprobs=np.asarray(d["rollout_logprobs"], dtype=np.float32),
                policy_versions=np.asarray(d["policy_versions"], dtype=np.int64),
                advantage=float(d["advantage"]),
            )
        )
    return SampleBatch(out)


class Batch:
    """A sealed batch: the manifest of ``batch.sealed``.

    ``seq`` k feeds gradient step k, which starts from policy version k-1.
    ``manifest`` is the whole decoded manifest; the fixed fields are also
    attributes. :meth:`samples` fetches (once) the materialized samples.
    """

    def __init__(self, manifest: dict, ledger=None):
        self.manifest = manifest
        self._ledger = ledger
        self._samples: SampleBatch | None = None

    run = property(lambda self: self.manifest["run"])
    seq = property(lambda self: int(self.manifest["seq"]))
    digest = property(lambda self: self.manifest.get("digest", ""))
    trainer_version = property(lambda self: self.manifest.get("trainer_version"))
    rule_version = property(lambda self: self.manifest.get("rule_version"))
    watermark = property(lambda self: self.manifest.get("watermark"))
    tree = property(lambda self: self.manifest.get("tree"))
    groups = property(lambda self: self.manifest.get("groups") or [])
    dropped = property(lambda self: self.manifest.get("dropped") or [])
    stats = property(lambda self: self.manifest.get("stats") or {})

    @property
    def step(self) -> int:
        """The gradient step this batch feeds (= seq)."""
        return self.seq

    @property
    def from_version(self) -> int:
        """The policy version the step starts from (seq - 1)."""
        return self.seq - 1

    @property
    def attempts(self) -> list[dict]:
        """Every included attempt of every group, in manifest order."""
        return [a for g in self.groups for a in g.get("attempts", [])]

    def samples(self) -> SampleBatch:
        if self._samples is None:
            if self._ledger is None:
                raise RuntimeError("this batch is not bound to a ledger client")
            self._samples = self._ledger.samples(self.run, self.seq)
        return self._samples

    def __repr__(self) -> str:
        return f"Batch(run={self.run!r}, seq={self.seq}, groups={len(self.groups)}, digest={self.digest!r})"

    @classmethod
    def from_json(cls, body: bytes, ledger=None) -> "Batch":
        return cls(json.loads(body), ledger)
