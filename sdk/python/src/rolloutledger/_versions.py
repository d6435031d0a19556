"""The steps between a fact type's schema versions (docs/design.md §18.4).

The schema describes each version; how one becomes the next is code, here
as in the server's events/versions.go. A step works on decoded values (the
dicts :func:`._strict.decode_data` returns): ``up`` turns version k's into
version k+1's, ``down`` turns k+1's back into k's or raises
:class:`~rolloutledger.errors.ValidationError` when version k has no place
for what they hold. Decoding a version k record runs ``up`` to the newest
version; encoding an event of version k runs ``down`` from the newest, so
that a fact keeps the shape, and the bytes, of its own version.
"""

from __future__ import annotations

from . import _schema as S
from . import errors as E


def _not_in(fact_type: str, v: int, field: str, why: str) -> E.ValidationError:
    return E.ValidationError(E.INVALID_VALUE, "data." + field, f"{fact_type} v{v} cannot hold it: {why}")


def _turn_up(d: dict) -> dict:
    out = {k: x for k, x in d.items() if k != "policy_version"}
    out["version_segments"] = [{"start": 0, "policy_version": d["policy_version"]}]
    return out


def _turn_down(d: dict) -> dict:
    segs = d.get("version_segments")
    if not isinstance(segs, list) or len(segs) != 1:
        n = len(segs) if isinstance(segs, list) else 0
        raise _not_in("turn.generated", 1, "version_segments", f"one policy version per turn, not {n} segments")
    if segs[0].get("start") != 0:
        raise _not_in("turn.generated", 1, "version_segments", f"its one segment starts at token 0, not {segs[0].get('start')}")
    if d.get("text") or d.get("text_cut"):
        raise _not_in("turn.generated", 1, "text", "no text")
    out = {k: x for k, x in d.items() if k not in ("version_segments", "text", "text_cut")}
    out["policy_version"] = segs[0].get("policy_version")
    return out


def _texts_down(fact_type: str, pairs: tuple):
    def down(d: dict) -> dict:
        for text, cut in pairs:
            if d.get(text) or d.get(cut):
                raise _not_in(fact_type, 1, text, f"no {text}")
        return {k: x for k, x in d.items() if not any(k in p for p in pairs)}

    return down


def _add(names: tuple):
    return lambda d: {**d, **{n: None for n in names}}


# What version 3 of turn.generated adds (docs/design.md §18.9).
_TURN_V3 = ("parent", "prefix_tokens", "diverged", "prompt_ids_from", "ids_from", "sampling", "engine", "tags")


def _turn_v2_up(d: dict) -> dict:
    out = {**d, **{n: None for n in _TURN_V3}}
    out["version_segments"] = [{**s, "known": None} for s in d["version_segments"]]
    return out


def _present(x) -> bool:
    return x is not None and not (isinstance(x, (str, list, tuple)) and len(x) == 0)


def _turn_v2_down(d: dict) -> dict:
    for name in _TURN_V3:
        if _present(d.get(name)) and not (name == "prefix_tokens" and d.get(name) == 0):
            raise _not_in("turn.generated", 2, "parent" if name == "prefix_tokens" else name,
                          {"parent": "no parent", "prefix_tokens": "no parent", "diverged": "no divergence",
                           "sampling": "no sampling parameters", "engine": "no engine", "tags": "no tags"}.get(name, f"no {name}"))
    if d.get("finish") == "abort":
        raise _not_in("turn.generated", 2, "finish", "no finish reason abort")
    segs = d.get("version_segments")
    if isinstance(segs, list):
        for i, s in enumerate(segs):
            if isinstance(s, dict) and _present(s.get("known")):
                raise _not_in("turn.generated", 2, f"version_segments[{i}].known", "no known")
        segs = [{k: x for k, x in s.items() if k != "known"} if isinstance(s, dict) else s for s in segs]
    return {**{k: x for k, x in d.items() if k not in _TURN_V3}, "version_segments": segs}


_TOOL_V3 = ("call_id", "unanswered", "exit_unknown")


def _tool_v2_down(d: dict) -> dict:
    for name in _TOOL_V3:
        if d.get(name):
            raise _not_in("tool.called", 2, name, f"no {name}")
    return {k: x for k, x in d.items() if k not in _TOOL_V3}


# (type, version) -> the step between that version and the next.
UP = {
    ("turn.generated", 1): _turn_up,
    ("turn.generated", 2): _turn_v2_up,
    ("tool.called", 1): _add(("input", "input_cut", "output", "output_cut")),
    ("tool.called", 2): _add(_TOOL_V3),
    ("task.registered", 1): _add(("prompt", "prompt_cut")),
}
DOWN = {
    ("turn.generated", 1): _turn_down,
    ("turn.generated", 2): _turn_v2_down,
    ("tool.called", 2): _tool_v2_down,
    ("tool.called", 1): _texts_down("tool.called", (("input", "input_cut"), ("output", "output_cut"))),
    ("task.registered", 1): _texts_down("task.registered", (("prompt", "prompt_cut"),)),
}


def upcast(fact_type: str, v: int, values: dict) -> dict:
    """The decoded values of version v as the newest version's."""
    for k in range(v, S.current_version(fact_type)):
        values = UP[fact_type, k](values)
    return values


def downcast(fact_type: str, v: int, values: dict) -> dict:
    """The newest version's values as version v's; raises ValidationError
    when version v cannot hold them."""
    for k in range(S.current_version(fact_type) - 1, v - 1, -1):
        values = DOWN[fact_type, k](values)
    return values
