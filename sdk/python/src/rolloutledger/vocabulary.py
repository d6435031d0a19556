"""Register an engine's vocabulary (docs/design.md §18.10), so tools such
as the explorer can show the tokens a run's turns carry.

A recording proxy in front of llama.cpp registers it by itself. For vLLM
and SGLang, whose HTTP routes give no token's bytes, register it from the
Hugging Face tokenizer the engine loads, once per run::

    from transformers import AutoTokenizer
    import rolloutledger as rl
    from rolloutledger import vocabulary

    tok = AutoTokenizer.from_pretrained("Qwen/Qwen3-8B")
    with rl.Ledger(url, source="my-trainer") as led:
        vocabulary.register(led, "run-7", vocabulary.pieces_from_tokenizer(tok),
                            engine="vllm", model="Qwen/Qwen3-8B")

or from a plain list of pieces (``bytes``, or ``str`` taken as UTF-8).

The facts' ids are a pure function of run, engine, model and chunk number
(the ones the proxy uses), so registering again is a duplicate the ledger
drops.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from .facts import Event, VocabularyRegistered

if TYPE_CHECKING:
    from .client import Ack, Ledger

__all__ = [
    "CHUNK_BYTES",
    "CHUNK_TOKENS",
    "chunks",
    "events",
    "fact_id",
    "pieces_from_tokenizer",
    "register",
]

#: A chunk holds at most this many tokens, and this many bytes of pieces:
#: its record stays far below the ledger's 1 MiB, in base64.
CHUNK_TOKENS = 8192
CHUNK_BYTES = 256 << 10

# The namespace of the fact ids the recording proxy gives (UUIDv5).
_NAMESPACE = uuid.UUID("3b0f7a52-96c4-5d1e-8a27-c1f4e9d06b83")


def fact_id(run: str, engine: str, model: str, chunk: int) -> str:
    """The id of a vocabulary chunk: the same the proxy gives it."""
    return str(uuid.uuid5(_NAMESPACE, f"{run}\x00vocabulary.registered\x00{engine}\x00{model}\x00{chunk}"))


def _as_bytes(i: int, p: Any) -> bytes:
    if isinstance(p, (bytes, bytearray, memoryview)):
        return bytes(p)
    if isinstance(p, str):
        return p.encode("utf-8")
    if p is None:
        return b""
    raise TypeError(f"piece {i} is {type(p).__name__}, want bytes or str")


def chunks(pieces: Sequence[bytes | str | None], *, engine: str, model: str) -> list[VocabularyRegistered]:
    """The vocabulary cut into ``vocabulary.registered`` facts, in order,
    each within :data:`CHUNK_TOKENS` and :data:`CHUNK_BYTES`. ``pieces[i]``
    is token ``i``'s piece: bytes, ``str`` (UTF-8) or None (no piece)."""
    if not pieces:
        raise ValueError("a vocabulary needs at least one token")
    if not engine or not model:
        raise ValueError("engine and model are required: the engine's id (vllm, sglang, llamacpp) and the model's name")
    size = len(pieces)
    cuts: list[tuple[int, bytes, list[int]]] = []
    first = 0
    while first < size:
        buf = bytearray()
        offsets: list[int] = []
        while first + len(offsets) < size and len(offsets) < CHUNK_TOKENS:
            p = _as_bytes(first + len(offsets), pieces[first + len(offsets)])
            if offsets and len(buf) + len(p) > CHUNK_BYTES:
                break
            buf += p
            offsets.append(len(buf))
        cuts.append((first, bytes(buf), offsets))
        first += len(offsets)
    return [
        VocabularyRegistered(engine=engine, model=model, size=size, chunk=i, chunks=len(cuts), first=first, pieces=buf, offsets=offsets)
        for i, (first, buf, offsets) in enumerate(cuts)
    ]


def events(run: str, pieces: Sequence[bytes | str | None], *, engine: str, model: str, source: str) -> list[Event]:
    """The chunks of :func:`chunks` as events of ``run``, under the ids of
    :func:`fact_id`."""
    return [Event(run, c, source=source, id=fact_id(run, engine, model, c.chunk)) for c in chunks(pieces, engine=engine, model=model)]


def register(ledger: "Ledger", run: str, pieces: Sequence[bytes | str | None], *, engine: str, model: str) -> list["Ack"]:
    """Sends the vocabulary of ``run`` with ``ledger`` and waits for the
    acknowledgments. Sending it again is harmless (the same ids)."""
    return ledger.post(events(run, pieces, engine=engine, model=model, source=ledger.source))


# --- from a Hugging Face tokenizer -----------------------------------------------


def _byte_level_table() -> dict[str, int]:
    """GPT-2's byte-level alphabet: the character standing for each byte."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAC + 1)) + list(range(0xAE, 0xFF + 1))
    chars = printable[:]
    n = 0
    for b in range(256):
        if b not in printable:
            printable.append(b)
            chars.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(printable, chars)}


_BYTE_LEVEL = _byte_level_table()
_SP_BYTE = re.compile(r"^<0x([0-9A-Fa-f]{2})>$")
_SP_SPACE = "\u2581"


def _mode(tokens: list[str | None]) -> str:
    """How a tokenizer writes its tokens: ``sentencepiece`` ("▁" for a
    space, "<0xNN>" for a byte), ``byte_level`` (GPT-2's alphabet, one
    character per byte), or ``decode`` (neither: decode each id)."""
    seen = [t for t in tokens if t]
    if any(_SP_SPACE in t or _SP_BYTE.match(t) for t in seen):
        return "sentencepiece"
    if seen and all(ch in _BYTE_LEVEL for t in seen for ch in t):
        return "byte_level"
    return "decode"


def pieces_from_tokenizer(tokenizer: Any, *, size: int | None = None, mode: str = "auto") -> list[bytes]:
    """Each token's piece, as bytes, from a Hugging Face tokenizer (or any
    object with ``convert_ids_to_tokens`` and ``len``): what the engine
    decodes each id to, byte tokens as their byte.

    ``mode`` is ``auto`` (found from the tokens), ``byte_level`` (GPT-2,
    Llama 3, Qwen, SmolLM2), ``sentencepiece`` (Llama 2, Mistral: "▁" a
    space, "<0xNN>" a byte) or ``decode`` (``tokenizer.decode([id])``,
    UTF-8: a byte token that is part of a character decodes to U+FFFD
    there, so it is approximate). Special and added tokens are their text.
    ``size`` is the model's token count when it exceeds the tokenizer's
    (padded embeddings): the ids past the tokenizer have empty pieces."""
    if mode not in ("auto", "byte_level", "sentencepiece", "decode"):
        raise ValueError(f"mode {mode!r}: want auto, byte_level, sentencepiece or decode")
    n = len(tokenizer)
    if size is None:
        size = n
    if size < n:
        raise ValueError(f"size {size} is smaller than the tokenizer's {n} tokens")
    tokens = list(tokenizer.convert_ids_to_tokens(list(range(n))))
    if mode == "auto":
        mode = _mode(tokens)
    special = set(getattr(tokenizer, "all_special_tokens", None) or [])
    added = getattr(tokenizer, "added_tokens_decoder", None) or {}
    special.update(str(getattr(t, "content", t)) for t in added.values())
    out: list[bytes] = []
    for i, t in enumerate(tokens):
        if t is None:
            out.append(b"")
        elif t in special:
            out.append(t.encode("utf-8"))
        elif mode == "byte_level":
            try:
                out.append(bytes(_BYTE_LEVEL[ch] for ch in t))
            except KeyError as e:
                raise ValueError(f"token {i} {t!r} is not in the byte-level alphabet ({e}); pass mode='decode'") from None
        elif mode == "sentencepiece":
            m = _SP_BYTE.match(t)
            out.append(bytes([int(m.group(1), 16)]) if m else t.replace(_SP_SPACE, " ").encode("utf-8"))
        else:
            out.append(tokenizer.decode([i]).encode("utf-8"))
    out.extend(b"" for _ in range(size - n))
    return out
