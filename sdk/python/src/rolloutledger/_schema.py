"""The catalogue's rules, read from its JSON Schema.

``catalogue.schema.json`` (package data) is generated from the server's Go
catalogue by ``go generate ./events/...``; events/schema/README.md in the
repository explains it. At import it is compiled into a :class:`Spec` per
object: its fields in check order, each field's kind and keywords, the
object's cross-field rules (x-rolloutledger-rules). Which facts and
versions exist, their fields, bounds, enums, ids, defaults and rules all
come from here, and :mod:`._strict` applies them; a change of the Go
catalogue reaches the SDK by regeneration.

The compiler refuses a schema that uses a keyword it does not implement,
so that a new kind of rule fails loudly instead of being skipped.
"""

from __future__ import annotations

import dataclasses
import json
import re
from dataclasses import dataclass, field as dc_field
from importlib import resources

from . import errors as E
from ._time import parse_at

# The version of the schema's own keywords this module implements.
VOCABULARY = 3

# Field kinds. INT32LE and FLOAT32LE are binary: a base64 string of
# little-endian values (x-rolloutledger-binary); BYTES a base64 string of
# bytes. STRS is an array of strings, each checked by the field's ``elem``.
STR, BOOL, INT, FLOAT, INT32S, FLOAT32S, FLOATS, FMAP, STRUCT, STRUCTS, RAW, INT32LE, FLOAT32LE, BYTES, STRS = range(15)
BINARY = {"int32le": INT32LE, "float32le": FLOAT32LE, "bytes": BYTES}


class SchemaError(RuntimeError):
    """The catalogue schema uses something this SDK does not implement."""


@dataclass(frozen=True)
class Rule:
    """An entry of x-rolloutledger-rules (README: "Rules")."""

    field: str
    code: str = E.INVALID_VALUE
    message: str = ""
    minimum: object = None
    maximum: object = None
    exclusiveMinimum: object = None
    exclusiveMaximum: object = None
    length: object = None
    requiredBy: str | None = None
    propertyNames: re.Pattern | None = None
    interval: tuple | None = None
    enum: tuple | None = None
    format: str | None = None
    minItems: object = None
    maxItems: object = None
    items: str | None = None
    first: object = None
    ascending: bool = False
    from_: int = 0  # "from" in the schema


@dataclass(frozen=True)
class Field:
    """A property and its keywords. For arrays and maps the numeric bounds
    are those of the elements; ``keys`` checks a map's keys."""

    name: str
    kind: int
    optional: bool = False
    bits: int = 64
    minimum: float | None = None
    maximum: float | None = None
    min_length: int = 0
    max_length: int | None = None
    max_bytes: int | None = None
    pattern: re.Pattern | None = None
    enum: tuple | None = None
    what: str = ""  # what the pattern means, for error messages
    keys: "Field | None" = None
    sub: "Spec | None" = None
    default: object = None
    # keep_zero: an optional property whose zero is a value
    # (x-rolloutledger-keepZero); elem: the element of a STRS array.
    keep_zero: bool = False
    elem: "Field | None" = None


@dataclass(frozen=True)
class Spec:
    name: str
    fields: tuple[Field, ...]
    rules: tuple[Rule, ...] = ()
    report_all: bool = False
    by_name: dict = dc_field(default_factory=dict, compare=False)

    def __post_init__(self):
        self.by_name.update({f.name: f for f in self.fields})


# --- compiling the schema ----------------------------------------------------


def _regex(pattern: str) -> re.Pattern:
    """An ECMA-262 pattern as Python reads it: ``$`` ends the text only
    (Python's also matches before a final newline)."""
    if pattern.endswith("$") and not pattern.endswith("\\$"):
        pattern = pattern[:-1] + r"\Z"
    return re.compile(pattern)


_ANNOTATIONS = {"title", "description", "$comment", "default"}
_STRING_KEYS = {"type", "minLength", "maxLength", "pattern", "enum", "x-rolloutledger-maxBytes"}
_NUMBER_KEYS = {"type", "format", "minimum", "maximum"}
_OBJECT_KEYS = {
    "type",
    "additionalProperties",
    "required",
    "properties",
    "x-rolloutledger-order",
    "x-rolloutledger-rules",
    "x-rolloutledger-report",
    # Restates x-rolloutledger-rules for plain validators; the rules decide.
    "allOf",
}
_RULE_KEYS = (set(Rule.__dataclass_fields__) - {"from_"}) | {"from"}
_BINARY_KEYS = {"type", "contentEncoding", "pattern", "x-rolloutledger-binary", "x-rolloutledger-items"}
_BOUNDS = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "length", "minItems", "maxItems", "first")
_ROOT_KEYS = {
    "$schema",
    "$id",
    "$ref",
    "oneOf",
    "$defs",
    "x-rolloutledger-vocabulary",
    "x-rolloutledger-limits",
    "x-rolloutledger-formats",
}


class _Compiler:
    def __init__(self, schema: dict):
        self.schema = schema
        self.defs = schema.get("$defs", {})
        self.specs: dict[str, Spec] = {}
        self.formats = {}
        self._keys(schema, _ROOT_KEYS, "the root")
        self._keys(schema["x-rolloutledger-limits"], {"maxRecordBytes", "maxDepth", "maxTextBytes"}, "the limits")
        for name, f in schema.get("x-rolloutledger-formats", {}).items():
            self._keys(f, {"pattern", "complete"}, f"format {name}")
            if not f["complete"] and name not in _FORMATS:
                raise SchemaError(f"the format {name!r} needs a check this SDK does not have")
            self.formats[name] = (_regex(f["pattern"]), f.get("description", name))

    def _keys(self, node: dict, allowed: set, where: str):
        unknown = set(node) - allowed - _ANNOTATIONS
        if unknown:
            raise SchemaError(
                f"the catalogue schema uses {sorted(unknown)} at {where}, which this SDK does not implement; "
                "upgrade the SDK"
            )

    def _deref(self, node: dict, where: str) -> tuple[dict, str | None]:
        """The schema with its $ref merged in (the siblings win), and the
        name of the definition referred to."""
        ref = node.get("$ref")
        if ref is None:
            return node, None
        if not ref.startswith("#/$defs/") or ref[8:] not in self.defs:
            raise SchemaError(f"{where}: unknown $ref {ref!r}")
        name = ref[8:]
        merged = {**self.defs[name], **{k: v for k, v in node.items() if k != "$ref"}}
        return merged, name

    def spec(self, name: str) -> Spec:
        if name not in self.specs:
            self.specs[name] = self._object(name, self.defs[name])
        return self.specs[name]

    def _object(self, name: str, node: dict) -> Spec:
        self._keys(node, _OBJECT_KEYS, name)
        if node.get("type") != "object" or node.get("additionalProperties") is not False:
            raise SchemaError(f"{name}: want a closed object schema")
        props = node.get("properties", {})
        order = node.get("x-rolloutledger-order", [])
        if sorted(order) != sorted(props):
            raise SchemaError(f"{name}: x-rolloutledger-order does not list the properties")
        required = set(node.get("required", ()))
        fields = tuple(self._field(p, props[p], p not in required, f"{name}.{p}") for p in order)
        rules = tuple(self._rule(r, props, f"{name} rule {i}") for i, r in enumerate(node.get("x-rolloutledger-rules", ())))
        report = node.get("x-rolloutledger-report", "first")
        if report not in ("first", "all"):
            raise SchemaError(f"{name}: unknown x-rolloutledger-report {report!r}")
        return Spec(name, fields, rules, report == "all")

    def _field(self, name: str, node: dict, optional: bool, where: str) -> Field:
        node, ref = self._deref(node, where)
        if "x-rolloutledger-keepZero" in node:
            if node["x-rolloutledger-keepZero"] is not True or not optional:
                raise SchemaError(f"{where}: x-rolloutledger-keepZero is true on an optional property")
            node = {k: x for k, x in node.items() if k != "x-rolloutledger-keepZero"}
            f = self._field(name, node, optional, where)
            if f.kind not in (INT, FLOAT, STR, BOOL):
                raise SchemaError(f"{where}: x-rolloutledger-keepZero on a non-scalar")
            return dataclasses.replace(f, keep_zero=True)
        default = node.get("default")
        typ = node.get("type")
        if typ == "object" and "properties" in node:
            return Field(name, STRUCT, optional, sub=self.spec(ref), default=default)
        if typ is None:
            self._keys(node, set(), where)
            return Field(name, RAW, optional)
        if typ == "string" and "x-rolloutledger-binary" in node:
            self._keys(node, _BINARY_KEYS, where)
            fmt = node["x-rolloutledger-binary"]
            if fmt not in BINARY or node.get("contentEncoding") != "base64":
                raise SchemaError(f"{where}: binary {fmt!r} is not implemented")
            if fmt == "bytes":
                if "x-rolloutledger-items" in node:
                    raise SchemaError(f"{where}: bytes have no x-rolloutledger-items")
                return Field(name, BYTES, optional)
            items = node["x-rolloutledger-items"]
            kind, bits = self._number(items, where + "[]")
            if (kind, bits) != {"int32le": (INT, 32), "float32le": (FLOAT, 32)}[fmt]:
                raise SchemaError(f"{where}: {fmt} values of format {items.get('format')!r}")
            return Field(name, BINARY[fmt], optional, bits=32, minimum=items.get("minimum"), maximum=items.get("maximum"))
        if typ == "string":
            return self._string(name, node, optional, where, ref)
        if typ == "boolean":
            self._keys(node, {"type"}, where)
            return Field(name, BOOL, optional, default=default)
        if typ in ("integer", "number"):
            kind, bits = self._number(node, where)
            return Field(name, kind, optional, bits=bits, minimum=node.get("minimum"), maximum=node.get("maximum"), default=default)
        if typ == "array":
            self._keys(node, {"type", "items"}, where)
            items, iref = self._deref(node["items"], where + "[]")
            if items.get("type") == "object":
                return Field(name, STRUCTS, optional, sub=self.spec(iref), default=default)
            if items.get("type") == "string":
                return Field(name, STRS, optional, elem=self._string("", items, False, where + "[]", iref), default=default)
            kind, bits = self._number(items, where + "[]")
            kinds = {(INT, 32): INT32S, (FLOAT, 32): FLOAT32S, (FLOAT, 64): FLOATS}
            if (kind, bits) not in kinds:
                raise SchemaError(f"{where}: arrays of {items.get('format')} are not implemented")
            return Field(
                name, kinds[kind, bits], optional, bits=bits,
                minimum=items.get("minimum"), maximum=items.get("maximum"), default=default,
            )
        if typ == "object":
            self._keys(node, {"type", "propertyNames", "additionalProperties"}, where)
            values = node["additionalProperties"]
            kind, bits = self._number(values, where + ".*")
            if (kind, bits) != (FLOAT, 64):
                raise SchemaError(f"{where}: maps of {values.get('format')} are not implemented")
            keys = self._string("", {"type": "string", **node.get("propertyNames", {})}, False, where + " keys", None)
            return Field(name, FMAP, optional, minimum=values.get("minimum"), maximum=values.get("maximum"), keys=keys, default=default)
        raise SchemaError(f"{where}: type {typ!r} is not implemented")

    def _string(self, name, node, optional, where, ref) -> Field:
        self._keys(node, _STRING_KEYS, where)
        enum = node.get("enum")
        return Field(
            name, STR, optional,
            min_length=node.get("minLength", 0),
            max_length=node.get("maxLength"),
            max_bytes=node.get("x-rolloutledger-maxBytes"),
            pattern=_regex(node["pattern"]) if "pattern" in node else None,
            enum=tuple(enum) if enum is not None else None,
            what=ref or "",
            default=node.get("default"),
        )

    def _number(self, node: dict, where: str) -> tuple[int, int]:
        self._keys(node, _NUMBER_KEYS, where)
        formats = {("integer", "int64"): (INT, 64), ("integer", "int32"): (INT, 32), ("number", "double"): (FLOAT, 64), ("number", "float"): (FLOAT, 32)}
        key = (node.get("type"), node.get("format"))
        if key not in formats:
            raise SchemaError(f"{where}: {key[0]} of format {key[1]!r} is not implemented")
        return formats[key]

    def _rule(self, node: dict, props: dict, where: str) -> Rule:
        self._keys(node, _RULE_KEYS, where)
        for name in [node["field"], node.get("requiredBy")] + [
            b["field"] for k in _BOUNDS if isinstance(b := node.get(k), dict)
        ]:
            if name is not None and name not in props:
                raise SchemaError(f"{where}: {name!r} is not a property")
        for k in _BOUNDS:
            if isinstance(node.get(k), dict):
                self._keys(node[k], {"field", "scale", "offset", "minus"}, f"{where} {k}")
                if "minus" in node[k] and node[k]["minus"] not in props:
                    raise SchemaError(f"{where}: {node[k]['minus']!r} is not a property")
        if "items" in node:
            items, ref = self._deref(props[node["field"]], where)
            if items.get("type") == "object":
                member_of = items  # one object: the rule checks its member
            else:
                member_of, _ = self._deref(items.get("items", {}), where)
            if items.get("type") not in ("array", "object") or node["items"] not in member_of.get("properties", {}):
                raise SchemaError(f"{where}: {node['items']!r} is not a member of the objects of {node['field']!r}")
        elif node.get("ascending"):
            items, _ = self._deref(props[node["field"]], where)
            elem, _ = self._deref(items.get("items", {}), where)
            if items.get("type") != "array" or elem.get("type") not in ("string", "integer", "number"):
                raise SchemaError(f"{where}: ascending without items needs an array of strings or numbers")
            if any(k in node for k in ("first", "from")):
                raise SchemaError(f"{where}: first and from need items")
        elif any(k in node for k in ("first", "ascending", "from")):
            raise SchemaError(f"{where}: first, ascending and from need items")
        if node.get("code", E.INVALID_VALUE) not in E.CODES:
            raise SchemaError(f"{where}: unknown code {node['code']!r}")
        if node.get("format") is not None and node["format"] not in self.formats:
            raise SchemaError(f"{where}: unknown format {node['format']!r}")
        kw = dict(node)
        if "from" in kw:
            kw["from_"] = kw.pop("from")
        if "propertyNames" in kw:
            self._keys(kw["propertyNames"], {"pattern"}, f"{where} propertyNames")
            kw["propertyNames"] = _regex(kw["propertyNames"]["pattern"])
        for k in ("interval", "enum"):
            if k in kw:
                kw[k] = tuple(kw[k])
        return Rule(**kw)

    def catalogue(self) -> dict[str, dict[int, Spec]]:
        out: dict[str, dict[int, Spec]] = {}
        for i, branch in enumerate(self.schema["oneOf"]):
            self._keys(branch, {"properties"}, f"oneOf[{i}]")
            p = branch["properties"]
            ref = p["data"]["$ref"]
            out.setdefault(p["type"]["const"], {})[p["v"]["const"]] = self.spec(ref[len("#/$defs/"):])
        return out


def _load(text: str) -> dict:
    schema = json.loads(text)
    if schema.get("x-rolloutledger-vocabulary") != VOCABULARY:
        raise SchemaError(
            f"the catalogue schema's vocabulary is {schema.get('x-rolloutledger-vocabulary')!r}; "
            f"this SDK implements {VOCABULARY}"
        )
    return schema


# Formats whose pattern does not decide alone: name -> check returning why
# the string is refused, or "".
_FORMATS = {
    "date-time": lambda s: "" if parse_at(s) is not None else "not a real time in years 0000-9999 (in UTC)",
}

SCHEMA = _load(resources.files(__package__).joinpath("catalogue.schema.json").read_text("utf-8"))
_compiler = _Compiler(SCHEMA)
ENVELOPE = _compiler.spec("envelope")
CATALOGUE = _compiler.catalogue()
FACTS: dict[str, Spec] = {t: versions[max(versions)] for t, versions in CATALOGUE.items()}
RUN_CONFIG = FACTS["run.started"].by_name["config"].sub
FORMATS = _compiler.formats

_limits = SCHEMA["x-rolloutledger-limits"]
MAX_RECORD_BYTES = _limits["maxRecordBytes"]
MAX_DEPTH = _limits["maxDepth"]
MAX_TEXT_BYTES = _limits["maxTextBytes"]

_ENTITY_ID_FIELD = _compiler._string("", _compiler.defs["entity-id"], False, "entity-id", "entity-id")
_ENTITY_ID = _ENTITY_ID_FIELD.pattern
_RUN_ID = FORMATS["run-id"][0]


def format_check(name: str, s: str) -> str:
    """Why s is not of the format, beyond its pattern; "" when it is."""
    check = _FORMATS.get(name)
    return check(s) if check is not None else ""


def current_version(fact_type: str) -> int:
    return max(CATALOGUE.get(fact_type, {0: None}))


def version_for(fact_type: str, limit: int | None) -> int:
    """The newest schema version of fact_type that is at most limit (any,
    when limit is None); 0 for a type outside the catalogue."""
    versions = [v for v in CATALOGUE.get(fact_type, ()) if limit is None or v <= limit]
    return max(versions, default=0)


def valid_entity_id(s: str) -> bool:
    """Whether s may name a task, group, attempt, engine, vm or source."""
    f = _ENTITY_ID_FIELD
    if len(s) < f.min_length or (f.max_length is not None and len(s) > f.max_length):
        return False
    return _ENTITY_ID.match(s) is not None


def valid_run_id(s: str) -> bool:
    """Whether s may name a run."""
    return _RUN_ID.match(s) is not None


