"""Typed builders for the facts of catalogue v1 (DESIGN.md section 4) and the
event envelope (section 3).

Every fact is a keyword-only dataclass named after its type
(``turn.generated`` is :class:`TurnGenerated`). Building one checks nothing;
:meth:`Fact.validate` and :meth:`Event.encode` apply the server's rules and
raise :class:`~rolloutledger.errors.ValidationError` with the code and field
the server would name. Optional fields are ``None`` when absent; an empty
list is *present* (``token_ids=[]`` with ``completion_tokens=3`` is refused,
as the server refuses it).

Arrays may be lists or NumPy arrays; token ids are sent as int32 and
logprobs as float32, exactly as the server stores them.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, ClassVar, Mapping, Sequence

import numpy as np

from . import _schema as S
from . import errors as E
from ._json import encode_string
from ._time import at_from, format_at, parse_at
from .ids import parse_event_id, uuid7

__all__ = [
    "Fact",
    "RunConfig",
    "Gate",
    "RunStarted",
    "TaskRegistered",
    "GroupStarted",
    "AttemptStarted",
    "TurnGenerated",
    "ToolCalled",
    "ContextCompacted",
    "AttemptFinished",
    "AttemptFailed",
    "RewardComputed",
    "GroupClosed",
    "PolicyPublished",
    "GradientApplied",
    "FACT_TYPES",
    "Event",
    "fact_class",
]

_kw = dict(kw_only=True)
# Facts compare by identity: their arrays may be NumPy arrays, whose == is
# elementwise. Compare encodings (Event.encode) to compare content.
_fkw = dict(kw_only=True, eq=False)


@dataclass(**_kw)
class RunConfig:
    """A run's projection configuration (DESIGN.md section 5). ``None``
    leaves a field out: the server applies the default (shown in brackets)."""

    group_size: int | None = None  # [8]
    batch_groups: int | None = None  # [64]
    min_group: int | None = None  # [2]
    max_staleness: int | None = None  # [6]
    pass_band: Sequence[float] | None = None  # [[0.15, 0.85]]
    min_probes: int | None = None  # [4]
    enforce_admission: bool | None = None  # [True]
    partial_credit_cap: float | None = None  # [0.5]
    efficiency_weight: float | None = None  # [0.1]
    advantage: str | None = None  # ["grpo"]; or "grpo_std", "rloo"

    def effective(self) -> dict:
        """Every setting with the defaults applied, as the projector uses them."""
        return S.resolve_config(_wire(self, S.RUN_CONFIG))


@dataclass(**_kw)
class Gate:
    """One validation gate a task went through before registration."""

    name: str
    passed: bool


class Fact:
    """Base of the fact builders. ``TYPE`` is the catalogue type."""

    TYPE: ClassVar[str] = ""

    def to_wire(self) -> dict:
        """The ``data`` object as it would be sent (absent optional fields
        left out), before any check."""
        return _wire(self, S.FACTS[self.TYPE])

    def validate(self) -> "Fact":
        """Checks the fact by the server's rules and returns its normalized
        copy (int32 and float32 arrays, canonical values). Raises
        ValidationError with fields under ``data``."""
        values = S.decode_fact(self.TYPE, self.to_wire())
        return _from_values(self.TYPE, values)


def _plain(v):
    if isinstance(v, np.generic):
        return v.item()
    return v


def _wire(obj, spec: S.Spec) -> dict:
    out = {}
    for f in spec.fields:
        v = getattr(obj, f.name)
        if v is None and f.optional:
            continue
        if f.kind == S.STRUCT and dataclasses.is_dataclass(v):
            v = _wire(v, f.sub)
        elif f.kind == S.STRUCTS and isinstance(v, (list, tuple)):
            v = [_wire(x, f.sub) if dataclasses.is_dataclass(x) else x for x in v]
        elif f.kind == S.FMAP and isinstance(v, Mapping):
            v = {(str(k) if isinstance(k, (int, np.integer)) and not isinstance(k, bool) else k): _plain(x) for k, x in v.items()}
        elif f.kind in (S.INT32S, S.FLOAT32S, S.FLOATS) and isinstance(v, tuple):
            v = list(v)
        else:
            v = _plain(v)
        out[f.name] = v
    return out


def _from_values(fact_type: str, values: dict) -> Fact:
    cls = FACT_TYPES[fact_type]
    kw = dict(values)
    if fact_type == "run.started":
        kw["config"] = RunConfig(**kw["config"])
    elif fact_type == "task.registered":
        kw["gates"] = [Gate(**g) for g in kw["gates"]]
    return cls(**kw)


def _values(fact: Fact) -> dict:
    """The field values of a normalized fact, nested dataclasses as dicts."""
    out = {}
    for f in S.FACTS[fact.TYPE].fields:
        v = getattr(fact, f.name)
        if f.kind == S.STRUCT:
            v = {g.name: getattr(v, g.name) for g in f.sub.fields}
        elif f.kind == S.STRUCTS:
            v = [{g.name: getattr(x, g.name) for g in f.sub.fields} for x in v]
        out[f.name] = v
    return out


@dataclass(**_fkw)
class RunStarted(Fact):
    """Opens a run and fixes its configuration. Written by the scheduler."""

    TYPE: ClassVar[str] = "run.started"
    config: RunConfig = field(default_factory=RunConfig)
    model: str
    harness: str
    notes: str | None = None


@dataclass(**_fkw)
class TaskRegistered(Fact):
    """Makes a task known to the run. ``kind`` is "agentic" or "swe"."""

    TYPE: ClassVar[str] = "task.registered"
    task: str
    source: str
    kind: str
    tier: int
    gates: Sequence[Gate] = field(default_factory=list)


@dataclass(**_fkw)
class GroupStarted(Fact):
    """Opens a group of attempts at one task. ``purpose`` is "train",
    "probe" or "eval"."""

    TYPE: ClassVar[str] = "group.started"
    group: str
    task: str
    size: int
    purpose: str


@dataclass(**_fkw)
class AttemptStarted(Fact):
    """An attempt began in its own microVM. ``retry_of`` names the attempt
    whose slot this one takes."""

    TYPE: ClassVar[str] = "attempt.started"
    attempt: str
    group: str
    task: str
    engine: str
    vm: str
    fork_ms: int
    retry_of: str | None = None


@dataclass(**_fkw)
class TurnGenerated(Fact):
    """One model turn. ``token_ids`` and ``logprobs`` (completion only) go
    together and have ``completion_tokens`` entries each;
    ``observation_token_ids`` are the tool output tokens appended before
    this turn. ``finish`` is "tool_call", "stop" or "length"."""

    TYPE: ClassVar[str] = "turn.generated"
    attempt: str
    turn: int
    policy_version: int
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int = 0
    observation_token_ids: Sequence[int] | np.ndarray | None = None
    token_ids: Sequence[int] | np.ndarray | None = None
    logprobs: Sequence[float] | np.ndarray | None = None
    finish: str
    latency_ms: int


@dataclass(**_fkw)
class ToolCalled(Fact):
    """One tool call made by a turn."""

    TYPE: ClassVar[str] = "tool.called"
    attempt: str
    turn: int
    call: int
    tool: str
    exit_code: int
    duration_ms: int
    output_bytes: int
    to_file: bool = False
    background: bool = False
    timed_out: bool = False


@dataclass(**_fkw)
class ContextCompacted(Fact):
    """The context was compacted after ``turn``: a new training segment."""

    TYPE: ClassVar[str] = "context.compacted"
    attempt: str
    turn: int
    tokens_before: int
    tokens_after: int


@dataclass(**_fkw)
class AttemptFinished(Fact):
    """How the model ended an attempt: "submitted", "turn_budget",
    "context_budget" or "timeout"."""

    TYPE: ClassVar[str] = "attempt.finished"
    attempt: str
    outcome: str


@dataclass(**_fkw)
class AttemptFailed(Fact):
    """An infrastructure failure, not the model's fault."""

    TYPE: ClassVar[str] = "attempt.failed"
    attempt: str
    reason: str


@dataclass(**_fkw)
class RewardComputed(Fact):
    """The verifier's verdict on an attempt."""

    TYPE: ClassVar[str] = "reward.computed"
    attempt: str
    passed: bool
    tests_passed: int
    tests_total: int
    verifier: str


@dataclass(**_fkw)
class GroupClosed(Fact):
    """The scheduler gave up waiting for a group (retries exhausted)."""

    TYPE: ClassVar[str] = "group.closed"
    group: str
    reason: str


@dataclass(**_fkw)
class PolicyPublished(Fact):
    """A new policy weight version."""

    TYPE: ClassVar[str] = "policy.published"
    version: int
    checkpoint: str
    digest: str
    precision: str


@dataclass(**_fkw)
class GradientApplied(Fact):
    """The trainer's report of one optimizer step. ``logprob_gap`` maps a
    staleness (0, 1, ...) to the mean absolute gap between trainer and
    rollout log-probs at that staleness."""

    TYPE: ClassVar[str] = "gradient.applied"
    step: int
    batch: int
    batch_digest: str
    from_version: int
    to_version: int
    loss: float
    trained_tokens: int
    truncated_fraction: float
    logprob_gap: Mapping[str | int, float] = field(default_factory=dict)
    grad_norm: float


FACT_TYPES: dict[str, type[Fact]] = {
    cls.TYPE: cls
    for cls in (
        RunStarted,
        TaskRegistered,
        GroupStarted,
        AttemptStarted,
        TurnGenerated,
        ToolCalled,
        ContextCompacted,
        AttemptFinished,
        AttemptFailed,
        RewardComputed,
        GroupClosed,
        PolicyPublished,
        GradientApplied,
    )
}


def fact_class(fact_type: str) -> type[Fact]:
    """The builder class of a catalogue type."""
    return FACT_TYPES[fact_type]


class Event:
    """One fact with its envelope.

    ``Event(run, fact, source=...)`` gives it a fresh UUIDv7 id and the
    current time; pass ``id`` to send a fact again under the id it had (the
    ledger then drops the copy as a duplicate). ``at`` may be a string, an
    aware datetime or None (now); it is informational only.
    """

    __slots__ = ("id", "run", "type", "v", "at", "source", "data")

    def __init__(
        self,
        run: str,
        data: Fact | Any,
        *,
        source: str,
        id: str | None = None,
        at=None,
        type: str | None = None,
        v: int | None = None,
    ):
        self.run = run
        self.data = data
        self.source = source
        self.id = uuid7() if id is None else id
        self.at = at_from(at)
        self.type = data.TYPE if type is None else type
        self.v = S.current_version(self.type) if v is None else v

    def __repr__(self) -> str:
        return f"Event(id={self.id!r}, run={self.run!r}, type={self.type!r}, source={self.source!r}, data={self.data!r})"

    def __eq__(self, other) -> bool:
        if not isinstance(other, Event):
            return NotImplemented
        return self.encode() == other.encode()

    def to_wire(self) -> dict:
        """The envelope as it would be sent, before any check."""
        data = self.data.to_wire() if isinstance(self.data, Fact) else self.data
        return {
            "id": self.id,
            "run": self.run,
            "type": self.type,
            "v": self.v,
            "at": self.at,
            "source": self.source,
            "data": data,
        }

    def validate(self) -> "Event":
        """Checks the event by the server's rules and returns its normalized
        copy (canonical id and ``at``, normalized data)."""
        return decode_event(self.to_wire())

    def encode(self) -> bytes:
        """The canonical JSON record the ledger stores for this event.
        Raises ValidationError when the server would refuse the event."""
        return encode_canonical(self.validate())


def decode_event(obj) -> Event:
    """Decodes one parsed envelope the way the server does (events.Decode):
    the envelope's fields in order, then the id, run, at, type, version, and
    the data. Raises ValidationError (index 0)."""
    env = S.decode_object(obj, S.ENVELOPE, "")
    eid = parse_event_id(env["id"])
    if eid is None:
        raise E.ValidationError(E.INVALID_VALUE, "id", f"{env['id'][:64]!r} is not a UUID (8-4-4-4-12 hex)")
    if not S.valid_run_id(env["run"]):
        raise E.ValidationError(
            E.INVALID_VALUE, "run", f"{env['run'][:64]!r} is not a run id ([A-Za-z0-9._-]{{1,128}}, not . or ..)"
        )
    at = parse_at(env["at"])
    if at is None:
        raise E.ValidationError(E.INVALID_VALUE, "at", f"{env['at'][:64]!r} is not an RFC 3339 time in years 0000-9999")
    ftype = env["type"]
    if ftype not in S.FACTS:
        raise E.ValidationError(E.UNKNOWN_TYPE, "type", f"{ftype[:64]!r} is not in the catalogue")
    if env["v"] not in S.VERSIONS[ftype]:
        raise E.ValidationError(E.UNKNOWN_VERSION, "v", f"{ftype} has no schema version {env['v']}")
    values = S.decode_fact(ftype, env["data"])
    return Event(
        env["run"],
        _from_values(ftype, values),
        source=env["source"],
        id=eid,
        at=format_at(*at),
        type=ftype,
        v=env["v"],
    )


def encode_canonical(ev: Event) -> bytes:
    """The canonical form of a *normalized* event (from decode_event)."""
    text = (
        '{"id":'
        + encode_string(ev.id)
        + ',"run":'
        + encode_string(ev.run)
        + ',"type":'
        + encode_string(ev.type)
        + ',"v":'
        + str(ev.v)
        + ',"at":'
        + encode_string(ev.at)
        + ',"source":'
        + encode_string(ev.source)
        + ',"data":'
        + S.encode_values(_values(ev.data), S.FACTS[ev.type])
        + "}"
    )
    out = text.encode("utf-8")
    if len(out) > S.MAX_RECORD_BYTES:
        raise E.ValidationError(E.TOO_LARGE, "", f"{len(out)} bytes encoded, more than {S.MAX_RECORD_BYTES}")
    return out
