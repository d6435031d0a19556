"""Sealed batches and their materialized samples, as NumPy arrays.

A batch's manifest (the ``batch.sealed`` decision, docs/design.md section
7.3) is a :class:`Batch`; its samples (``GET .../batches/{seq}/samples``,
one per attempt and training segment, section 6.9) are a
:class:`SampleBatch` of :class:`Sample`. Every token of a sample carries its
id, its loss mask (1 on completion tokens of version segments that train, 0
on observation tokens and stale segments), the rollout log-prob (0 for
observation tokens) and the policy version that generated it; the sample
carries its attempt's advantage.

The samples arrive as Apache Arrow IPC when pyarrow is installed
(``pip install rolloutledger[arrow]``), else as NDJSON. The server sends a
batch's Arrow body, written once when the batch was sealed, as one record
batch with its Content-Length (docs/design.md section 15.3): the client
reads it into one buffer, and every array is a view of that buffer,
reached without a copy (read-only arrays; copy one with ``np.array(x)`` to
write to it); ``to_torch()`` hands out tensors sharing the same memory.
The client asks for the body with its repeated columns (loss mask, policy
versions, temperatures) LZ4-compressed when pyarrow reads that: those
three are then decompressed into arrays of their own, and token ids and
log-probs stay views. A body of several record batches (a batch past 2^26
tokens, or an older server, which split large batches) has each column
joined once into one contiguous array. A :class:`SampleBatch` holds the
batch's columns flat, end to end, with ``offsets`` marking where each
sample starts; a :class:`Sample` is a view of its slice.

The batch digest covers the manifest and the samples in a canonical binary
form (docs/design.md section 7.4), which :meth:`SampleBatch.canonical_chunks`
rebuilds from the arrays, so :meth:`Batch.samples` can check it
(``verify_digest=True``) whichever way the samples travelled.
"""

from __future__ import annotations

import hashlib
import json
import struct
import warnings
from dataclasses import dataclass
from typing import Any, Iterator, Sequence

import numpy as np

from . import errors as E

__all__ = ["Batch", "Sample", "SampleBatch", "parse_samples", "parse_arrow_samples", "have_pyarrow", "arrow_codec_available"]

ARROW_MEDIA_TYPE = "application/vnd.apache.arrow.stream"
NDJSON_MEDIA_TYPE = "application/x-ndjson"

# The dtypes of the columns, in NumPy and in the canonical form alike.
_DTYPES = {
    "token_ids": np.dtype("<i4"),
    "loss_mask": np.dtype("u1"),
    "rollout_logprobs": np.dtype("<f4"),
    "policy_versions": np.dtype("<i8"),
}


def _torch():
    try:
        import torch  # noqa: PLC0415 - optional dependency
    except ImportError as e:  # pragma: no cover - depends on the machine
        raise ImportError("to_torch() needs PyTorch: pip install torch (or rolloutledger[torch])") from e
    return torch


def arrow_codec_available(name: str) -> bool:
    """Whether pyarrow is installed and reads Arrow IPC buffers compressed
    with codec ``name`` ("lz4": the LZ4 frame format)."""
    if not have_pyarrow():
        return False
    import pyarrow  # noqa: PLC0415 - optional dependency

    return bool(pyarrow.Codec.is_available(name))


def have_pyarrow() -> bool:
    """Whether pyarrow can be imported (samples then travel as Arrow)."""
    try:
        import pyarrow  # noqa: F401, PLC0415 - optional dependency
    except ImportError:
        return False
    return True


def _tensor(torch, a: np.ndarray, device=None):
    """A tensor sharing a's memory (a may be a read-only view of a
    response: torch warns about those, and the tensor must not be written
    in place); on another device, a copy there."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        t = torch.from_numpy(a)
    return t if device is None else t.to(device)


def _mask_tensor(torch, mask: np.ndarray, device=None):
    """The uint8 loss mask as a torch.bool tensor, a view of the same bytes."""
    t = _tensor(torch, np.ascontiguousarray(mask, dtype=np.uint8)).view(torch.bool)
    return t if device is None else t.to(device)


@dataclass(eq=False)
class Sample:
    """One attempt's training segment (its arrays may be read-only views)."""

    group: str
    attempt: str
    segment: int
    token_ids: np.ndarray  # int32
    loss_mask: np.ndarray  # uint8, 1 where the token trains
    rollout_logprobs: np.ndarray  # float32
    policy_versions: np.ndarray  # int64
    advantage: float
    # float32, each token's sampling temperature (1 where the turn did not
    # say); None in a batch of rule version 3 or older, which has none.
    temperatures: np.ndarray | None = None

    def __len__(self) -> int:
        return int(self.token_ids.shape[0])

    @property
    def advantages(self) -> np.ndarray:
        """The attempt's advantage on every trained token, 0 elsewhere
        (float32)."""
        return (self.loss_mask * np.float32(self.advantage)).astype(np.float32)

    def to_torch(self, device=None) -> dict[str, Any]:
        """The arrays as torch tensors sharing the arrays' memory: int32
        token ids (``.long()`` for an int64 copy), a bool view of the loss
        mask, float32 log-probs, int64 versions; on another device, copies
        there."""
        torch = _torch()
        return {
            "token_ids": _tensor(torch, self.token_ids, device),
            "loss_mask": _mask_tensor(torch, self.loss_mask, device),
            "rollout_logprobs": _tensor(torch, self.rollout_logprobs, device),
            "policy_versions": _tensor(torch, self.policy_versions, device),
            "advantages": _tensor(torch, self.advantages, device),
            **({} if self.temperatures is None else {"temperatures": _tensor(torch, self.temperatures, device)}),
        }


_TEMPERATURES = np.dtype("<f4")
# Bit 63 of a sample's token count in the canonical form: the sample
# carries temperatures.
_WITH_TEMPERATURES = 1 << 63


class SampleBatch(Sequence[Sample]):
    """The samples of one batch, in manifest order, held as flat columns:
    ``token_ids`` (int32), ``loss_mask`` (uint8), ``rollout_logprobs``
    (float32) and ``policy_versions`` (int64) of every sample end to end,
    ``offsets`` (int64, n+1) where each sample starts, and per sample
    ``groups``, ``attempts``, ``segments`` and ``sample_advantages``;
    ``temperatures`` (float32, each token's sampling temperature) from rule
    version 4 on, else None.
    ``source`` says how they arrived: "arrow" or "ndjson"; ``body`` is the
    response's memory the arrays are views of (an Arrow body of one record
    batch), None when they own their memory."""

    def __init__(self, samples: list[Sample] | None = None, *, columns: dict[str, Any] | None = None,
                 source: str = "ndjson"):
        self.source = source
        if columns is None:
            samples = samples or []
            lengths = np.array([len(s) for s in samples], dtype=np.int64)
            offsets = np.zeros(len(samples) + 1, dtype=np.int64)
            np.cumsum(lengths, out=offsets[1:])

            def cat(name):
                parts = [np.asarray(getattr(s, name), dtype=_DTYPES[name]) for s in samples]
                return np.concatenate(parts) if parts else np.zeros(0, dtype=_DTYPES[name])

            temps = [s.temperatures for s in samples]
            if samples and all(t is not None for t in temps):
                temperatures = np.concatenate([np.asarray(t, dtype=_TEMPERATURES) for t in temps])
            elif any(t is not None for t in temps):
                raise E.LedgerError("samples: some samples carry temperatures and some do not")
            else:
                temperatures = None
            columns = {
                "temperatures": temperatures,
                "groups": [s.group for s in samples],
                "attempts": [s.attempt for s in samples],
                "segments": np.array([s.segment for s in samples], dtype=np.int64),
                "sample_advantages": np.array([s.advantage for s in samples], dtype=np.float64),
                "offsets": offsets,
                **{name: cat(name) for name in _DTYPES},
            }
        self.groups: list[str] = columns["groups"]
        self.attempts: list[str] = columns["attempts"]
        self.segments: np.ndarray = columns["segments"]
        self.sample_advantages: np.ndarray = columns["sample_advantages"]
        self.offsets: np.ndarray = columns["offsets"]
        self.token_ids: np.ndarray = columns["token_ids"]
        self.loss_mask: np.ndarray = columns["loss_mask"]
        self.rollout_logprobs: np.ndarray = columns["rollout_logprobs"]
        self.policy_versions: np.ndarray = columns["policy_versions"]
        self.temperatures: np.ndarray | None = columns.get("temperatures")
        n = len(self.groups)
        if not (len(self.attempts) == len(self.segments) == len(self.sample_advantages) == n and len(self.offsets) == n + 1):
            raise E.LedgerError(f"samples: per-sample columns of unequal length ({n} groups, {len(self.offsets)} offsets)")
        total = int(self.offsets[-1]) if n else 0
        for name, dt in _DTYPES.items():
            a = getattr(self, name)
            if a.dtype != dt or a.ndim != 1 or len(a) != total:
                raise E.LedgerError(f"samples: column {name} is {a.dtype}[{len(a)}], want {dt}[{total}]")
        t = self.temperatures
        if t is not None and (t.dtype != _TEMPERATURES or t.ndim != 1 or len(t) != total):
            raise E.LedgerError(f"samples: column temperatures is {t.dtype}[{len(t)}], want float32[{total}]")
        self._samples: list[Sample] | None = None
        # The NDJSON body as served, when the samples came as NDJSON: what a
        # rule version 1 batch's digest covers.
        self.raw_ndjson: bytes | None = None
        self.body = None

    @property
    def samples(self) -> list[Sample]:
        """The samples, each a view of its slice of the columns."""
        if self._samples is None:
            o = self.offsets
            self._samples = [
                Sample(
                    group=self.groups[i],
                    attempt=self.attempts[i],
                    segment=int(self.segments[i]),
                    token_ids=self.token_ids[o[i]:o[i + 1]],
                    loss_mask=self.loss_mask[o[i]:o[i + 1]],
                    rollout_logprobs=self.rollout_logprobs[o[i]:o[i + 1]],
                    policy_versions=self.policy_versions[o[i]:o[i + 1]],
                    advantage=float(self.sample_advantages[i]),
                    temperatures=None if self.temperatures is None else self.temperatures[o[i]:o[i + 1]],
                )
                for i in range(len(self.groups))
            ]
        return self._samples

    def __len__(self) -> int:
        return len(self.groups)

    def __getitem__(self, i):
        return self.samples[i]

    def __iter__(self) -> Iterator[Sample]:
        return iter(self.samples)

    @property
    def lengths(self) -> np.ndarray:
        return np.diff(self.offsets)

    @property
    def num_tokens(self) -> int:
        return int(len(self.token_ids))

    @property
    def num_trained_tokens(self) -> int:
        return int(np.count_nonzero(self.loss_mask))

    def token_advantages(self) -> np.ndarray:
        """float32 per token: its sample's advantage where the loss mask is
        1, else 0."""
        per_token = np.repeat(self.sample_advantages.astype(np.float32), self.lengths)
        return per_token * self.loss_mask

    def padded(self, pad_id: int = 0) -> dict[str, np.ndarray]:
        """Right-padded 2-D arrays, one row per sample (copies):

        token_ids int32 [n, L] (pad ``pad_id``), loss_mask uint8 [n, L],
        attention_mask uint8 [n, L], rollout_logprobs float32 [n, L],
        policy_versions int64 [n, L] (pad -1), token_advantages float32
        [n, L] (the advantage where loss_mask is 1), advantages float64 [n],
        lengths int64 [n].
        """
        n = len(self)
        lengths = self.lengths.astype(np.int64)
        width = int(lengths.max()) if n else 0
        # Row i, column j holds flat token offsets[i] + j when j < lengths[i].
        cols = np.arange(width, dtype=np.int64)
        valid = cols[None, :] < lengths[:, None]
        flat = (self.offsets[:-1, None] + cols[None, :])[valid]
        adv = self.token_advantages()

        def place(a, fill, dtype):
            out = np.full((n, width), fill, dtype=dtype)
            out[valid] = a[flat]
            return out

        return {
            "token_ids": place(self.token_ids, pad_id, np.int32),
            "loss_mask": place(self.loss_mask, 0, np.uint8),
            "attention_mask": valid.astype(np.uint8),
            "rollout_logprobs": place(self.rollout_logprobs, 0, np.float32),
            "policy_versions": place(self.policy_versions, -1, np.int64),
            **({} if self.temperatures is None else {"temperatures": place(self.temperatures, 1, np.float32)}),
            "token_advantages": place(adv, 0, np.float32),
            "advantages": self.sample_advantages.astype(np.float64),
            "lengths": lengths,
        }

    def packed(self) -> dict[str, np.ndarray]:
        """All samples end to end — the columns themselves, no copy — with
        ``cu_seqlens`` int64 [n+1] marking where each starts (the layout of
        variable-length attention kernels) and ``token_advantages``."""
        return {
            "token_ids": self.token_ids,
            "loss_mask": self.loss_mask,
            "rollout_logprobs": self.rollout_logprobs,
            "policy_versions": self.policy_versions,
            **({} if self.temperatures is None else {"temperatures": self.temperatures}),
            "token_advantages": self.token_advantages(),
            "advantages": self.sample_advantages.astype(np.float64),
            "cu_seqlens": self.offsets.astype(np.int64),
        }

    def to_torch(self, device=None, pad_id: int = 0, layout: str = "packed") -> dict[str, Any]:
        """The batch as torch tensors. ``layout="packed"`` (default): the
        columns of :meth:`packed`, sharing their memory (int32 token ids,
        a bool view of the loss mask; read-only: do not write in place);
        ``layout="padded"``: :meth:`padded` (copies), ids int32, masks bool.
        On another ``device``, copies there."""
        torch = _torch()
        if layout == "packed":
            p = self.packed()
        elif layout == "padded":
            p = self.padded(pad_id)
        else:
            raise ValueError(f"layout {layout!r}: want 'packed' or 'padded'")
        out = {}
        for k, v in p.items():
            out[k] = _mask_tensor(torch, v, device) if k in ("loss_mask", "attention_mask") else _tensor(torch, v, device)
        return out

    def canonical_chunks(self) -> Iterator[memoryview | bytes]:
        """The samples' canonical binary form (docs/design.md section 7.4),
        piece by piece: what the batch digest covers after the manifest."""
        o = self.offsets
        cols = [np.ascontiguousarray(getattr(self, name), dtype=dt) for name, dt in _DTYPES.items()]
        flag = 0
        if self.temperatures is not None:
            cols.append(np.ascontiguousarray(self.temperatures, dtype=_TEMPERATURES))
            flag = _WITH_TEMPERATURES
        for i in range(len(self)):
            g, a = self.groups[i].encode(), self.attempts[i].encode()
            lo, hi = int(o[i]), int(o[i + 1])
            yield struct.pack("<I", len(g)) + g + struct.pack("<I", len(a)) + a + struct.pack(
                "<qdQ", int(self.segments[i]), float(self.sample_advantages[i]), (hi - lo) | flag)
            for c in cols:
                yield memoryview(c[lo:hi]).cast("B")

    def digest(self, manifest_without_digest: bytes) -> str:
        """``sha256:<hex>`` of the manifest (its canonical bytes without
        the digest member) followed by the samples' canonical form."""
        h = hashlib.sha256(manifest_without_digest)
        for chunk in self.canonical_chunks():
            h.update(chunk)
        return "sha256:" + h.hexdigest()


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
                loss_mask=np.asarray(d["loss_mask"], dtype=np.uint8),
                rollout_logprobs=np.asarray(d["rollout_logprobs"], dtype=np.float32),
                policy_versions=np.asarray(d["policy_versions"], dtype=np.int64),
                advantage=float(d["advantage"]),
                temperatures=np.asarray(d["temperatures"], dtype=np.float32) if "temperatures" in d else None,
            )
        )
    return SampleBatch(out, source="ndjson")


def _flat(col, name):
    """A list column's values and offsets: views of the body when the
    column is one record batch (what the server sends), else one copy of
    the values into a new array (a body of several record batches)."""
    chunks = col.chunks
    if len(chunks) == 1:
        arr = chunks[0]
        values = arr.values.to_numpy(zero_copy_only=True)
        offsets = arr.offsets.to_numpy(zero_copy_only=True)
        return values, offsets
    parts, lengths = [], []
    for c in chunks:
        off = c.offsets.to_numpy(zero_copy_only=True)
        # A chunk's values may start past 0 (a slice): take its own span.
        parts.append(c.values.to_numpy(zero_copy_only=True)[off[0] : off[-1]])
        lengths.append(np.diff(off))
    if not parts:
        return np.zeros(0, dtype=_DTYPES.get(name, _TEMPERATURES)), np.zeros(1, dtype=np.int64)
    values = np.concatenate(parts)
    lengths = np.concatenate(lengths)
    offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    return values, offsets


def parse_arrow_samples(body) -> tuple[SampleBatch, dict[str, str]]:
    """Reads an Arrow IPC stream of samples (the answer to ``Accept:
    application/vnd.apache.arrow.stream``): a stream of one record batch
    without copying the token columns (they are views of ``body``), of
    several with one copy per column to join them; returns the samples and
    the schema's metadata (run, seq, digest, rule_version)."""
    import pyarrow as pa  # noqa: PLC0415 - optional dependency

    reader = pa.ipc.open_stream(pa.py_buffer(body))
    table = reader.read_all()
    meta = {k.decode(): v.decode() for k, v in (table.schema.metadata or {}).items()}
    want = {"group", "attempt", "segment", "advantage", *_DTYPES}
    if not want <= set(table.column_names):
        raise E.LedgerError(f"Arrow samples lack columns {sorted(want - set(table.column_names))}")
    columns: dict[str, Any] = {
        "groups": table.column("group").to_pylist(),
        "attempts": table.column("attempt").to_pylist(),
        "segments": table.column("segment").to_numpy().astype(np.int64),
        "sample_advantages": table.column("advantage").to_numpy(),
    }
    offsets = None
    for name, dt in _DTYPES.items():
        values, off = _flat(table.column(name), name)
        if values.dtype != dt:
            raise E.LedgerError(f"Arrow samples: column {name} holds {values.dtype}, want {dt}")
        columns[name] = values
        if offsets is None:
            offsets = off
        elif not np.array_equal(offsets, off):
            raise E.LedgerError(f"Arrow samples: column {name} has other sample boundaries than token_ids")
    columns["offsets"] = (offsets if offsets is not None else np.zeros(1)).astype(np.int64)
    if "temperatures" in table.column_names:
        values, off = _flat(table.column("temperatures"), "temperatures")
        if values.dtype != _TEMPERATURES or not np.array_equal(offsets, off):
            raise E.LedgerError("Arrow samples: column temperatures does not match token_ids")
        columns["temperatures"] = values
    batch = SampleBatch(columns=columns, source="arrow")
    # Whether every array was copied out of the body (it came as several
    # record batches), so the body's memory may serve again.
    batch._copied = table.num_rows == 0 or all(table.column(c).num_chunks > 1 for c in ("advantage", *_DTYPES))
    if not batch._copied:
        batch.body = body
    return batch, meta


class Batch:
    """A sealed batch: the manifest of ``batch.sealed``.

    ``seq`` k feeds gradient step k, which starts from policy version k-1.
    ``manifest`` is the whole decoded manifest; the fixed fields are also
    attributes. :meth:`samples` fetches (once) the materialized samples.
    """

    def __init__(self, manifest: dict, ledger=None, raw: bytes | None = None):
        self.manifest = manifest
        self._ledger = ledger
        self.raw = raw  # the manifest's bytes as served, when read from the ledger
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

    def samples(self, *, verify_digest: bool = False, format: str | None = None) -> SampleBatch:
        """The batch's samples, fetched once. ``format`` is "arrow",
        "ndjson" or None (the client's choice: Arrow when pyarrow is
        installed). With ``verify_digest``, the digest is recomputed from
        this manifest's bytes and the samples' arrays (docs/design.md
        section 7.4) and a mismatch raises DigestMismatchError."""
        if self._samples is None:
            if self._ledger is None:
                raise RuntimeError("this batch is not bound to a ledger client")
            self._samples = self._ledger.samples(self.run, self.seq, format=format)
        if verify_digest:
            self.verify(self._samples)
        return self._samples

    def manifest_without_digest(self) -> bytes:
        """The canonical manifest bytes the digest covers: the manifest as
        served, without its last member ``"digest"``."""
        if self.raw is None:
            raise E.LedgerError("this batch was not read from the ledger: its canonical bytes are unknown")
        body = self.raw.rstrip(b"\n")
        cut = body.rfind(b',"digest":')
        if cut < 0 or not body.endswith(b'"}'):
            raise E.LedgerError(f"batch {self.seq}: the manifest has no trailing digest member")
        return body[:cut] + b"}"

    def verify(self, samples: SampleBatch) -> str:
        """Recomputes the digest from the manifest and ``samples``; returns
        it, or raises DigestMismatchError. Batches of rule version 1 were
        digested over their NDJSON body, which only the NDJSON route can
        reproduce."""
        if (self.rule_version or 1) < 2:
            raw = getattr(samples, "raw_ndjson", None)
            if raw is None:
                raise E.LedgerError(f"batch {self.seq} was sealed under rule version 1, whose digest covers the NDJSON body: fetch it with format='ndjson' to verify")
            got = "sha256:" + hashlib.sha256(self.manifest_without_digest() + raw).hexdigest()
        else:
            got = samples.digest(self.manifest_without_digest())
        if got != self.digest:
            raise E.DigestMismatchError(f"batch {self.seq} of run {self.run}: the manifest and samples hash to {got}, the manifest says {self.digest}")
        return got

    def __repr__(self) -> str:
        return f"Batch(run={self.run!r}, seq={self.seq}, groups={len(self.groups)}, digest={self.digest!r})"

    @classmethod
    def from_json(cls, body: bytes, ledger=None) -> "Batch":
        return cls(json.loads(body), ledger, raw=bytes(body))
