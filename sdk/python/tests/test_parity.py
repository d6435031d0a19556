"""Differential check against the live server: bodies derived from the
shared vectors by seeded mutations, and hand-picked corner cases, get the
same verdict from the Python validator and from the server."""

from __future__ import annotations

import json
import random


import rolloutledger as rl
from test_vectors import VECTOR_CASES

def parses(body: str) -> bool:
    """Whether Python's json reads body (not one nested past its recursion
    limit), which mutate needs."""
    try:
        json.loads(body)
    except (ValueError, RecursionError):
        return False
    return True


VALID = [v["body"] for v in VECTOR_CASES if v["valid"]]
ANY = [v["body"] for v in VECTOR_CASES if "body" in v and parses(v["body"])]

VALUES = [
    "null", "true", "false", "0", "-0", "1", "-1", "1.0", "1e2", "-0.0", "0.5", "2147483647", "2147483648",
    "-2147483649", "9223372036854775807", "9223372036854775808", "-9223372036854775809", "1" + "0" * 30,
    "1e308", "1e309", "1e-400", "3.4028235e38", "-3.40282357e38", "-1.000000059604644775390625",
    "-7.006492321624085e-46", "16777217", '""', '"x"', '"\\u0000"', '"\\ud800"', '"\\ud83d\\ude00"', '"\u2028"',
    '"tâche"', '"a:b/c"', '"a b"', '"' + "a" * 201 + '"', "[]", "[null]", '["a"]', "[[1]]", "{}", '{"1":0.5}',
    '{"1":"x","1":0.5}', '{"0":0,"6":1}', "[-0.5,-0.25,0]", "[0.5]", "[1,2,3]", "[0.15,0.85]", "[0.9,0.1]",
    '"2026-11-29T9:10:00,5+24:00"', '"0000-01-01T00:00:00Z"', '"9999-12-31T23:59:59.999999999Z"',
    '"2026-02-29T00:00:00Z"', '"0192F0C4-7A1E-7C3B-BD2E-4B1F8A6C0D11"', '"0192f0c4-7a1e-7c3b-cd2e-4b1f8a6c0d11"',
    '"train"', '"stop"', '"rloo"',
]
EXTRA_KEYS = ["id", "run", "data", "config", "x", "ID", "token_ids", "logprobs", "notes", "retry_of"]
INSERTS = [" ", "\u00a0", "\x0b", ",", "]", "[", '"', "x", "\\", "\u3000", "\ufeff", "\x00"]


def mutate(body: str, r: random.Random) -> str:
    obj = json.loads(body)
    dicts = [obj]
    stack = [obj]
    while stack:
        d = stack.pop()
        for v in d.values():
            for x in v if isinstance(v, list) else [v]:
                if isinstance(x, dict):
                    dicts.append(x)
                    stack.append(x)
    target = r.choice(dicts)
    op = r.random()
    if op < 0.5 and target:
        target[r.choice(list(target))] = "@@"
        return json.dumps(obj, ensure_ascii=False).replace('"@@"', r.choice(VALUES))
    if op < 0.6 and target:
        del target[r.choice(list(target))]
        return json.dumps(obj, ensure_ascii=False)
    if op < 0.7:
        target[r.choice(EXTRA_KEYS)] = "@@"
        return json.dumps(obj, ensure_ascii=False).replace('"@@"', r.choice(VALUES))
    if op < 0.8 and target:
        key = json.dumps(r.choice(list(target))) + ":"
        return json.dumps(obj, ensure_ascii=False).replace(key, key + r.choice(VALUES) + "," + key, 1)
    if op < 0.9:
        return json.dumps([obj, json.loads(r.choice(ANY))], ensure_ascii=False)
    s = json.dumps(obj, ensure_ascii=False)
    i = r.randrange(len(s) + 1)
    return s[:i] + r.choice(INSERTS) + s[i:]


def corner_cases() -> list[bytes]:
    fa = VALID[12]  # attempt.failed
    out = [
        "\u00a0" + fa + "\u2029",  # Unicode spaces around the body are trimmed
        " \x0c[" + fa + "]\u0085",
        "[" * 5000 + "]" * 5000,  # deeper than Python's recursion limit
        '{"x":' + '{"a":' * 3000 + "1" + "}" * 3000 + "}",
        "[" + fa + "," + "[" * 3000 + "]" * 3000 + "]",
        fa.replace('"microVM lost its host"', '"' + "\\u0001" * 5000 + '"'),
    ]
    return [b.encode("utf-8") for b in out]


def cases() -> list[bytes]:
    r = random.Random(20261129)
    out = corner_cases()
    for _ in range(300):
        body = r.choice(VALID)
        for _ in range(r.choice([1, 1, 2, 3])):
            try:
                body = mutate(body, r)
            except (ValueError, AttributeError, RecursionError):
                # No longer a JSON object, or one nested deeper than
                # Python's json reads: mutate no further.
                break
        out.append(body.encode("utf-8", "surrogatepass"))
    return out


def local_verdict(body: bytes):
    try:
        return ("valid", [e.id for e in rl.validate_body(body)])
    except rl.ValidationError as e:
        idx = None if e.code in ("malformed", "empty") else e.index
        return (e.code, idx, e.field)


def server_verdict(ledger, body: bytes):
    try:
        return ("valid", [a.id for a in ledger.post_body(body)])
    except rl.RejectedError as e:
        return (e.code, e.index, e.field)


def test_same_verdict_as_the_server(ledger):
    bodies = cases()
    results = [(b, local_verdict(b), server_verdict(ledger, b)) for b in bodies]
    mismatches = [(b[:200], mine, theirs) for b, mine, theirs in results if mine != theirs]
    assert not mismatches, mismatches[:5]
    kinds = {theirs[0] for _, _, theirs in results}
    assert {"valid", "malformed", "wrong_type", "invalid_value", "unknown_field", "missing_field"} <= kinds
