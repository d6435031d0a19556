"""The catalogue's field rules and the strict decoder that applies them.

This mirrors the server's events package (events/facts.go field tags and
validate methods, events/strict.go, events/config.go, events/envelope.go):
the same checks in the same order, so that a body gets the same verdict —
the same code, event index and field path — here and there.

Values come either from parsed JSON (see _json) or from the typed builders
(Python ints, floats, strings, lists, NumPy arrays); both go through
:func:`decode_object`, which returns normalized values: ints, floats (float32
fields rounded to float32), str, and NumPy arrays for token and logprob
arrays.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field as dc_field

import numpy as np

from . import errors as E
from ._json import (
    NEG_ZERO,
    BigIntLiteral,
    Float32Overflow,
    FloatLiteral,
    encode_string,
    fix_surrogates,
    float32_from,
    format_float,
)

MAX_TEXT_BYTES = 64 << 10
MAX_RECORD_BYTES = 1 << 20
# events.MaxDepth: how deeply a body's arrays and objects may nest.
MAX_DEPTH = 1000

INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1
INT32_MIN, INT32_MAX = -(1 << 31), (1 << 31) - 1

# Field kinds.
STR, BOOL, INT, FLOAT, INT32S, FLOAT32S, FLOATS, FMAP, STRUCT, STRUCTS, RAW = range(11)


@dataclass(frozen=True)
class Field:
    name: str
    kind: int
    optional: bool = False
    id: bool = False
    signed: bool = False
    allow_empty: bool = False
    max: float | None = None
    enum: tuple[str, ...] | None = None
    # omitempty: left out of the canonical form when None or empty.
    omitempty: bool = False
    sub: "Spec | None" = None


@dataclass(frozen=True)
class Spec:
    name: str
    fields: tuple[Field, ...]
    by_name: dict = dc_field(default_factory=dict, compare=False)

    def __post_init__(self):
        self.by_name.update({f.name: f for f in self.fields})


def _opt(name, kind, **kw):
    return Field(name, kind, optional=True, omitempty=True, **kw)


GATE = Spec("gate", (Field("name", STR), Field("passed", BOOL)))

RUN_CONFIG = Spec(
    "config",
    (
        _opt("group_size", INT),
        _opt("batch_groups", INT),
        _opt("min_group", INT),
        _opt("max_staleness", INT),
        _opt("pass_band", FLOATS, max=1),
        _opt("min_probes", INT),
        _opt("enforce_admission", BOOL),
        _opt("partial_credit_cap", FLOAT, max=1),
        _opt("efficiency_weight", FLOAT),
        _opt("advantage", STR, enum=("grpo", "grpo_std", "rloo")),
    ),
)

ENVELOPE = Spec(
    "envelope",
    (
        Field("id", STR),
        Field("run", STR),
        Field("type", STR),
        Field("v", INT),
        Field("at", STR),
        Field("source", STR, id=True),
        Field("data", RAW),
    ),
)

_ID = dict(id=True)

FACTS: dict[str, Spec] = {
    "run.started": Spec(
        "run.started",
        (
            Field("config", STRUCT, sub=RUN_CONFIG),
            Field("model", STR),
            Field("harness", STR),
            _opt("notes", STR),
        ),
    ),
    "task.registered": Spec(
        "task.registered",
        (
            Field("task", STR, **_ID),
            Field("source", STR, **_ID),
            Field("kind", STR, enum=("agentic", "swe")),
            Field("tier", INT),
            Field("gates", STRUCTS, sub=GATE),
        ),
    ),
    "group.started": Spec(
        "group.started",
        (
            Field("group", STR, **_ID),
            Field("task", STR, **_ID),
            Field("size", INT),
            Field("purpose", STR, enum=("train", "probe", "eval")),
        ),
    ),
    "attempt.started": Spec(
        "attempt.started",
        (
            Field("attempt", STR, **_ID),
            Field("group", STR, **_ID),
            Field("task", STR, **_ID),
            Field("engine", STR, **_ID),
            Field("vm", STR, **_ID),
            Field("fork_ms", INT),
            _opt("retry_of", STR, **_ID),
        ),
    ),
    "turn.generated": Spec(
        "turn.generated",
        (
            Field("attempt", STR, **_ID),
            Field("turn", INT),
            Field("policy_version", INT),
            Field("prompt_tokens", INT),
            Field("completion_tokens", INT),
            Field("cached_tokens", INT),
            _opt("observation_token_ids", INT32S),
            _opt("token_ids", INT32S),
            _opt("logprobs", FLOAT32S, signed=True, max=0),
            Field("finish", STR, enum=("tool_call", "stop", "length")),
            Field("latency_ms", INT),
        ),
    ),
    "tool.called": Spec(
        "tool.called",
        (
            Field("attempt", STR, **_ID),
            Field("turn", INT),
            Field("call", INT),
            Field("tool", STR),
            Field("exit_code", INT, signed=True),
            Field("duration_ms", INT),
            Field("output_bytes", INT),
            Field("to_file", BOOL),
            Field("background", BOOL),
            Field("timed_out", BOOL),
        ),
    ),
    "context.compacted": Spec(
        "context.compacted",
        (
            Field("attempt", STR, **_ID),
            Field("turn", INT),
            Field("tokens_before", INT),
            Field("tokens_after", INT),
        ),
    ),
    "attempt.finished": Spec(
        "attempt.finished",
        (
            Field("attempt", STR, **_ID),
            Field("outcome", STR, enum=("submitted", "turn_budget", "context_budget", "timeout")),
        ),
    ),
    "attempt.failed": Spec(
        "attempt.failed",
        (Field("attempt", STR, **_ID), Field("reason", STR)),
    ),
    "reward.computed": Spec(
        "reward.computed",
        (
            Field("attempt", STR, **_ID),
            Field("passed", BOOL),
            Field("tests_passed", INT),
            Field("tests_total", INT),
            Field("verifier", STR),
        ),
    ),
    "group.closed": Spec(
        "group.closed",
        (Field("group", STR, **_ID), Field("reason", STR)),
    ),
    "policy.published": Spec(
        "policy.published",
        (
            Field("version", INT),
            Field("checkpoint", STR),
            Field("digest", STR),
            Field("precision", STR),
        ),
    ),
    "gradient.applied": Spec(
        "gradient.applied",
        (
            Field("step", INT),
            Field("batch", INT),
            Field("batch_digest", STR),
            Field("from_version", INT),
            Field("to_version", INT),
            Field("loss", FLOAT, signed=True),
            Field("trained_tokens", INT),
            Field("truncated_fraction", FLOAT, max=1),
            Field("logprob_gap", FMAP),
            Field("grad_norm", FLOAT),
        ),
    ),
}

# Schema versions per type: a new version is a new entry, old ones stay.
VERSIONS: dict[str, tuple[int, ...]] = {t: (1,) for t in FACTS}


def current_version(fact_type: str) -> int:
    return max(VERSIONS.get(fact_type, (0,)))


# --- ids ---------------------------------------------------------------------

_WORD = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")
_ENTITY = _WORD | frozenset(":/")


def valid_entity_id(s: str) -> bool:
    """[A-Za-z0-9._:/-]{1,200}: a task, group, attempt, engine, vm or source."""
    return 0 < len(s) <= 200 and all(c in _ENTITY for c in s)


def valid_run_id(s: str) -> bool:
    """[A-Za-z0-9._-]{1,128}, and neither "." nor ".."."""
    return 0 < len(s) <= 128 and s not in (".", "..") and all(c in _WORD for c in s)


# --- decoding ----------------------------------------------------------------


def _err(code: str, path: str, detail: str) -> E.ValidationError:
    return E.ValidationError(code, path, detail)


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def _kind(v) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "a boolean"
    if isinstance(v, str):
        return "a string"
    if isinstance(v, dict):
        return "an object"
    if isinstance(v, (list, tuple, np.ndarray)):
        return "an array"
    if isinstance(v, (int, float, BigIntLiteral)):
        return "a number"
    return type(v).__name__


_WANT = {
    STR: "a string",
    BOOL: "a boolean",
    INT: "an integer",
    FLOAT: "a number",
    INT32S: "an array of 32-bit integers",
    FLOAT32S: "an array of numbers",
    FLOATS: "an array of numbers",
    FMAP: "an object of numbers",
}


class _Mismatch(Exception):
    """A value of the wrong JSON type (or one that does not fit)."""


def _int(v, lo: int = INT64_MIN, hi: int = INT64_MAX) -> int:
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
        raise _Mismatch
    v = int(v)
    if not lo <= v <= hi:
        raise _Mismatch
    return v


def _float64(v) -> float:
    if isinstance(v, (bool, np.bool_)):
        raise _Mismatch
    if v is NEG_ZERO:
        return -0.0
    if isinstance(v, FloatLiteral):
        if math.isinf(v):
            raise _Mismatch  # out of the float64 range
        return float(v)
    if isinstance(v, BigIntLiteral):
        f = float(v.text)
        if math.isinf(f):
            raise _Mismatch
        return f
    if isinstance(v, (int, np.integer)):
        try:
            return float(int(v))
        except OverflowError:
            raise _Mismatch from None
    if isinstance(v, (float, np.floating)):
        return float(v)  # NaN and inf are left to the value checks
    raise _Mismatch


def _float32(v) -> float:
    if isinstance(v, (bool, np.bool_)):
        raise _Mismatch
    try:
        if v is NEG_ZERO:
            return -0.0
        if isinstance(v, FloatLiteral):
            return float32_from(float(v), v.text)
        if isinstance(v, BigIntLiteral):
            return float32_from(float(v.text), v.text)
        if isinstance(v, (int, np.integer)):
            v = int(v)
            try:
                return float32_from(float(v), str(v))
            except OverflowError:
                raise _Mismatch from None
        if isinstance(v, (float, np.floating)):
            f = float(v)
            r = float32_from(f)
            if math.isinf(r) and not math.isinf(f):
                raise _Mismatch
            return r
    except Float32Overflow:
        raise _Mismatch from None
    raise _Mismatch


def _null_element(v, kind: int, path: str):
    """The server refuses a null inside an array (or object) of scalars
    before it reads the values' types."""
    if kind in (INT32S, FLOAT32S, FLOATS) and isinstance(v, (list, tuple)):
        for i, x in enumerate(v):
            if x is None:
                raise _err(E.WRONG_TYPE, f"{path}[{i}]", "null is not allowed")
    elif kind == FMAP and isinstance(v, dict):
        for k in sorted(v, key=_key_order):
            if v[k] is None:
                raise _err(E.WRONG_TYPE, f"{path}.{k}", "null is not allowed")


def _key_order(k):
    return k if isinstance(k, str) else str(k)


def _int_array(v, lo: int, hi: int) -> np.ndarray:
    if isinstance(v, np.ndarray):
        if v.ndim != 1:
            raise _Mismatch
        if v.dtype.kind in "iu":
            if v.size and (int(v.min()) < lo or int(v.max()) > hi):
                raise _Mismatch
            return v.astype(np.int32)
        if v.dtype.kind != "O":
            raise _Mismatch
        v = v.tolist()
    if not isinstance(v, (list, tuple)):
        raise _Mismatch
    return np.fromiter((_int(x, lo, hi) for x in v), dtype=np.int32, count=len(v))


def _float32_array(v) -> np.ndarray:
    if isinstance(v, np.ndarray):
        if v.ndim != 1:
            raise _Mismatch
        if v.dtype.kind in "f":
            with np.errstate(over="ignore"):
                out = v.astype(np.float32)
            if np.any(np.isinf(out) & ~np.isinf(v)):
                raise _Mismatch
            return out
        if v.dtype.kind in "iu":
            return np.fromiter((_float32(int(x)) for x in v.tolist()), dtype=np.float32, count=v.size)
        if v.dtype.kind != "O":
            raise _Mismatch
        v = v.tolist()
    if not isinstance(v, (list, tuple)):
        raise _Mismatch
    return np.fromiter((_float32(x) for x in v), dtype=np.float32, count=len(v))


def _float_list(v) -> list[float]:
    if isinstance(v, np.ndarray):
        if v.ndim != 1:
            raise _Mismatch
        v = v.tolist()
    if not isinstance(v, (list, tuple)):
        raise _Mismatch
    return [_float64(x) for x in v]


def _float_map(v) -> dict[str, float]:
    if not isinstance(v, dict):
        raise _Mismatch
    out = {}
    for k, x in v.items():
        if isinstance(k, bool) or not isinstance(k, (str, int)):
            raise _Mismatch
        out[fix_surrogates(str(k))] = _float64(x)
    # Earlier values of a repeated key are decoded too, and may fail.
    for _, x in getattr(v, "dups", ()):
        if x is not None:
            _float64(x)
    return out


def decode_object(obj, spec: Spec, path: str) -> dict:
    """Decodes the JSON object ``obj`` by ``spec``: a repeated key first (the
    first repeated in document order), unknown fields next (the first in
    sorted order), then each field in declaration order — missing,
    null, wrong type, then the field's rules."""
    if not isinstance(obj, dict):
        raise _err(E.WRONG_TYPE, path, f"want an object, got {_kind(obj)}")
    # A key given twice, before anything else (events.duplicateKey).
    dups = getattr(obj, "dups", None)
    if dups:
        k = dups[0][0]
        raise _err(E.DUPLICATE_FIELD, _join(path, k), f"{k!r} is given more than once")
    unknown = sorted(k for k in obj if k not in spec.by_name)
    if unknown:
        k = unknown[0]
        where = path or "the envelope"
        raise _err(E.UNKNOWN_FIELD, _join(path, k), f"{k!r} is not a field of {where}")
    out = {}
    for f in spec.fields:
        fpath = _join(path, f.name)
        if f.name not in obj:
            if f.optional:
                out[f.name] = None
                continue
            raise _err(E.MISSING_FIELD, fpath, "required")
        v = obj[f.name]
        if v is None:
            raise _err(E.WRONG_TYPE, fpath, "null is not allowed")
        out[f.name] = _decode_value(v, f, fpath)
    return out


def _decode_value(v, f: Field, path: str):
    kind = f.kind
    if kind == RAW:
        return v
    if kind == STRUCT:
        return decode_object(v, f.sub, path)
    if kind == STRUCTS:
        if not isinstance(v, (list, tuple)):
            raise _err(E.WRONG_TYPE, path, f"want an array of objects, got {_kind(v)}")
        return [decode_object(item, f.sub, f"{path}[{i}]") for i, item in enumerate(v)]
    if kind == FMAP and getattr(v, "dups", None):
        k = v.dups[0][0]
        raise _err(E.DUPLICATE_FIELD, f"{path}.{k}", f"key {k!r} is given more than once")
    _null_element(v, kind, path)
    try:
        if kind == STR:
            if not isinstance(v, str):
                raise _Mismatch
            val = fix_surrogates(v)
        elif kind == BOOL:
            if not isinstance(v, (bool, np.bool_)):
                raise _Mismatch
            val = bool(v)
        elif kind == INT:
            val = _int(v)
        elif kind == FLOAT:
            val = _float64(v)
        elif kind == INT32S:
            val = _int_array(v, INT32_MIN, INT32_MAX)
        elif kind == FLOAT32S:
            val = _float32_array(v)
        elif kind == FLOATS:
            val = _float_list(v)
        elif kind == FMAP:
            val = _float_map(v)
        else:  # pragma: no cover - every kind is handled above
            raise AssertionError(kind)
    except _Mismatch:
        raise _err(E.WRONG_TYPE, path, f"want {_WANT[kind]}, got {_kind(v)}") from None
    _check_value(val, f, path)
    return val


def _check_number(x: float, f: Field, path: str):
    if not f.signed and x < 0:
        raise _err(E.INVALID_VALUE, path, f"must not be negative, got {x:g}")
    if f.max is not None and x > f.max:
        raise _err(E.INVALID_VALUE, path, f"must be at most {f.max:g}, got {x:g}")


def _check_float(x: float, f: Field, path: str):
    if math.isnan(x) or math.isinf(x):
        raise _err(E.INVALID_VALUE, path, "not a finite number")
    _check_number(x, f, path)


_NO_RULES = Field("", STR)


def check_string(s: str, f: Field, path: str):
    try:
        b = s.encode("utf-8")
    except UnicodeEncodeError:
        b = None
    if len(b if b is not None else s.encode("utf-8", "surrogatepass")) > MAX_TEXT_BYTES:
        raise _err(E.INVALID_VALUE, path, f"more than {MAX_TEXT_BYTES} bytes")
    if b is None:
        raise _err(E.INVALID_VALUE, path, "not valid UTF-8")
    if "\x00" in s:
        raise _err(E.INVALID_VALUE, path, "contains a NUL character")
    if s == "" and not f.allow_empty and not f.optional:
        raise _err(E.INVALID_VALUE, path, "must not be empty")
    if f.id and not valid_entity_id(s):
        raise _err(E.INVALID_VALUE, path, f"{s[:64]!r} is not an id ([A-Za-z0-9._:/-]{{1,200}})")
    if f.enum is not None and s not in f.enum:
        raise _err(E.INVALID_VALUE, path, f"{s[:64]!r} is not one of {', '.join(f.enum)}")


def _check_value(val, f: Field, path: str):
    kind = f.kind
    if kind == STR:
        check_string(val, f, path)
    elif kind == INT:
        _check_number(val, f, path)
    elif kind == FLOAT:
        _check_float(val, f, path)
    elif kind == INT32S:
        if val.size and not f.signed and int(val.min()) < 0:
            i = int(np.argmax(val < 0))
            _check_number(int(val[i]), f, f"{path}[{i}]")
    elif kind == FLOAT32S:
        if val.size:
            bad = ~np.isfinite(val)
            if not f.signed:
                bad |= val < 0
            if f.max is not None:
                bad |= val > f.max
            if bad.any():
                i = int(np.argmax(bad))
                _check_float(float(val[i]), f, f"{path}[{i}]")
    elif kind == FLOATS:
        for i, x in enumerate(val):
            _check_float(x, f, f"{path}[{i}]")
    elif kind == FMAP:
        for k in sorted(val):
            check_string(k, _NO_RULES, path)
            _check_float(val[k], f, f"{path}.{k}")


# --- cross-field rules (the validate methods) --------------------------------

DEFAULT_CONFIG = {
    "group_size": 8,
    "batch_groups": 64,
    "min_group": 2,
    "max_staleness": 6,
    "pass_band": [0.15, 0.85],
    "min_probes": 4,
    "enforce_admission": True,
    "partial_credit_cap": 0.5,
    "efficiency_weight": 0.1,
    "advantage": "grpo",
}


def resolve_config(cfg: dict) -> dict:
    """The effective configuration: every field left out takes its default."""
    out = dict(DEFAULT_CONFIG)
    for k, v in cfg.items():
        if v is None:
            continue
        if k == "pass_band":
            if len(v) == 2:
                out[k] = list(v)
            continue
        out[k] = v
    return out


def config_problems(cfg: dict) -> list[tuple[str, str]]:
    """Every problem of a run's (decoded) configuration, in the server's
    order, as (field, detail)."""
    probs = []
    band = cfg.get("pass_band")
    if band is not None and len(band) != 2:
        probs.append(("pass_band", f"want [low, high], got {len(band)} numbers"))
    c = resolve_config(cfg)
    if c["group_size"] < 1:
        probs.append(("group_size", f"must be at least 1, got {c['group_size']}"))
    if c["batch_groups"] < 1:
        probs.append(("batch_groups", f"must be at least 1, got {c['batch_groups']}"))
    if c["min_group"] < 1 or c["min_group"] > c["group_size"]:
        probs.append(("min_group", f"must be between 1 and group_size {c['group_size']}, got {c['min_group']}"))
    if c["max_staleness"] < 0:
        probs.append(("max_staleness", f"must be at least 0, got {c['max_staleness']}"))
    lo, hi = c["pass_band"]
    if lo < 0 or hi > 1 or lo > hi:
        probs.append(("pass_band", f"want 0 <= low <= high <= 1, got [{lo:g}, {hi:g}]"))
    if c["min_probes"] < 1:
        probs.append(("min_probes", f"must be at least 1, got {c['min_probes']}"))
    ew = c["efficiency_weight"]
    if ew < 0 or ew >= 2:
        probs.append(("efficiency_weight", f"must be in [0, 2), got {ew:g}"))
    limit = 1 - ew / 2
    pcc = c["partial_credit_cap"]
    if pcc < 0 or pcc >= limit:
        probs.append(
            ("partial_credit_cap", f"must be in [0, 1 - efficiency_weight/2) = [0, {limit:g}), got {pcc:g}")
        )
    if c["advantage"] not in ("grpo", "grpo_std", "rloo"):
        probs.append(("advantage", f"must be grpo, grpo_std or rloo, got {c['advantage']!r}"))
    return probs


def _validate_run_started(d):
    probs = config_problems(d["config"])
    if probs:
        detail = "; ".join(f"data.config.{f}: {m}" for f, m in probs)
        raise _err(E.INVALID_VALUE, "data.config." + probs[0][0], detail)


def _validate_group_started(d):
    if d["size"] < 1:
        raise _err(E.INVALID_VALUE, "data.size", f"a group holds at least 1 attempt, got {d['size']}")


def _validate_turn_generated(d):
    if d["cached_tokens"] > d["prompt_tokens"]:
        raise _err(
            E.INVALID_VALUE,
            "data.cached_tokens",
            f"{d['cached_tokens']} cached tokens exceed {d['prompt_tokens']} prompt tokens",
        )
    ids, lps = d["token_ids"], d["logprobs"]
    if (ids is None) != (lps is None):
        if ids is None:
            raise _err(E.MISSING_FIELD, "data.token_ids", "logprobs given without token_ids")
        raise _err(E.MISSING_FIELD, "data.logprobs", "token_ids given without logprobs")
    n = d["completion_tokens"]
    if ids is not None and len(ids) != n:
        raise _err(E.INVALID_VALUE, "data.token_ids", f"{len(ids)} token ids for {n} completion tokens")
    if lps is not None and len(lps) != n:
        raise _err(E.INVALID_VALUE, "data.logprobs", f"{len(lps)} logprobs for {n} completion tokens")


def _validate_context_compacted(d):
    if d["tokens_after"] > d["tokens_before"]:
        raise _err(
            E.INVALID_VALUE,
            "data.tokens_after",
            f"{d['tokens_after']} tokens after compaction exceed {d['tokens_before']} before",
        )


def _validate_reward_computed(d):
    if d["tests_passed"] > d["tests_total"]:
        raise _err(E.INVALID_VALUE, "data.tests_passed", f"{d['tests_passed']} tests passed of {d['tests_total']}")


def is_staleness_key(k: str) -> bool:
    return 0 < len(k) <= 6 and not (len(k) > 1 and k[0] == "0") and all(c in "0123456789" for c in k)


def _validate_gradient_applied(d):
    if d["step"] < 1:
        raise _err(E.INVALID_VALUE, "data.step", f"steps start at 1, got {d['step']}")
    if d["batch"] < 1:
        raise _err(E.INVALID_VALUE, "data.batch", f"batches start at 1, got {d['batch']}")
    if d["to_version"] <= d["from_version"]:
        raise _err(
            E.INVALID_VALUE,
            "data.to_version",
            f"to_version {d['to_version']} does not follow from_version {d['from_version']}",
        )
    for k in sorted(d["logprob_gap"]):
        if not is_staleness_key(k):
            raise _err(E.INVALID_VALUE, "data.logprob_gap." + k, f"key {k!r} is not a staleness (a non-negative integer)")


VALIDATORS = {
    "run.started": _validate_run_started,
    "group.started": _validate_group_started,
    "turn.generated": _validate_turn_generated,
    "context.compacted": _validate_context_compacted,
    "reward.computed": _validate_reward_computed,
    "gradient.applied": _validate_gradient_applied,
}


def drop_empty_optional(values: dict, spec: Spec) -> dict:
    """Optional arrays and maps given empty become absent, as in the
    canonical form (after the cross-field rules saw them)."""
    for f in spec.fields:
        v = values.get(f.name)
        if f.kind == STRUCT and v is not None:
            drop_empty_optional(v, f.sub)
        elif f.optional and f.kind in (INT32S, FLOAT32S, FLOATS, FMAP) and v is not None and len(v) == 0:
            values[f.name] = None
    return values


def decode_fact(fact_type: str, obj) -> dict:
    """Decodes and validates the data of a fact; raises ValidationError with
    fields under "data"."""
    spec = FACTS[fact_type]
    values = decode_object(obj, spec, "data")
    check = VALIDATORS.get(fact_type)
    if check is not None:
        check(values)
    return drop_empty_optional(values, spec)


# --- canonical encoding ------------------------------------------------------


def _float32_texts(a: np.ndarray) -> list[str]:
    out = a.astype(str).tolist()
    for i, s in enumerate(out):
        if "e" in s:
            out[i] = format_float(float(a[i]), 32)
        elif s.endswith(".0"):
            out[i] = s[:-2]
    return out


def encode_values(values: dict, spec: Spec) -> str:
    parts = []
    for f in spec.fields:
        v = values.get(f.name)
        if f.omitempty and (v is None or (f.kind in (STR, INT32S, FLOAT32S, FLOATS, FMAP) and len(v) == 0)):
            continue
        parts.append(encode_string(f.name) + ":" + _encode_value(v, f))
    return "{" + ",".join(parts) + "}"


def _encode_value(v, f: Field) -> str:
    kind = f.kind
    if kind == STR:
        return encode_string(v)
    if kind == BOOL:
        return "true" if v else "false"
    if kind == INT:
        return str(int(v))
    if kind == FLOAT:
        return format_float(v, 64)
    if kind == INT32S:
        return "[" + ",".join(map(str, v.tolist())) + "]"
    if kind == FLOAT32S:
        return "[" + ",".join(_float32_texts(v)) + "]"
    if kind == FLOATS:
        return "[" + ",".join(format_float(x, 64) for x in v) + "]"
    if kind == FMAP:
        return "{" + ",".join(encode_string(k) + ":" + format_float(v[k], 64) for k in sorted(v)) + "}"
    if kind == STRUCT:
        return encode_values(v, f.sub)
    if kind == STRUCTS:
        return "[" + ",".join(encode_values(x, f.sub) for x in v) + "]"
    raise AssertionError(kind)
