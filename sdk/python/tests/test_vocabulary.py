"""rolloutledger.vocabulary: an engine's vocabulary as vocabulary.registered
chunks, from a Hugging Face tokenizer or a list of pieces, sent with the
client under the ids the recording proxy gives them."""

from __future__ import annotations

import pytest

import rolloutledger as rl
from rolloutledger import vocabulary as V
from rolloutledger import _schema as S


class FakeTokenizer:
    """What pieces_from_tokenizer uses of a Hugging Face tokenizer."""

    def __init__(self, tokens, special=(), decoded=None):
        self.tokens = tokens
        self.all_special_tokens = list(special)
        self.decoded = decoded or {}

    def __len__(self):
        return len(self.tokens)

    def convert_ids_to_tokens(self, ids):
        return [self.tokens[i] for i in ids]

    def decode(self, ids):
        return "".join(self.decoded.get(i, self.tokens[i]) for i in ids)


def assemble(chunks):
    """The pieces the chunks hold, token by token."""
    out = []
    for c in chunks:
        start = 0
        for end in c.offsets:
            out.append(c.pieces[start:end])
            start = end
    return out


@pytest.mark.parametrize(
    "name,tokenizer,want",
    [
        (
            # GPT-2's alphabet (SmolLM2, Qwen, Llama 3): "Ġ" is a space, "Â"
            # byte C2, "µ" byte B5 (the two halves of the character µ).
            "byte_level",
            FakeTokenizer(["<|endoftext|>", "Ġthe", "am", "ble", "Â", "µ", "<|im_end|>", "Ċ"], special=["<|endoftext|>", "<|im_end|>"]),
            [b"<|endoftext|>", b" the", b"am", b"ble", b"\xc2", b"\xb5", b"<|im_end|>", b"\n"],
        ),
        (
            # SentencePiece (Llama 2, Mistral): "▁" a space, "<0xNN>" a byte.
            "sentencepiece",
            FakeTokenizer(["<unk>", "<s>", "</s>", "▁The", "<0xC2>", "<0xB5>", "é"], special=["<unk>", "<s>", "</s>"]),
            [b"<unk>", b"<s>", b"</s>", b" The", b"\xc2", b"\xb5", "é".encode()],
        ),
        (
            # Neither: each id decoded alone.
            "decode",
            FakeTokenizer(["[CLS]", "中", "##s"], special=["[CLS]"], decoded={2: "s"}),
            [b"[CLS]", "中".encode(), b"s"],
        ),
    ],
)
def test_pieces_from_tokenizer(name, tokenizer, want):
    assert V._mode(tokenizer.convert_ids_to_tokens(range(len(tokenizer)))) == name
    got = V.pieces_from_tokenizer(tokenizer)
    assert got == want
    assert V.pieces_from_tokenizer(tokenizer, mode=name) == want


def test_padded_vocabulary_and_missing_tokens():
    tok = FakeTokenizer(["a", None, "b"])
    assert V.pieces_from_tokenizer(tok, size=5) == [b"a", b"", b"b", b"", b""]
    with pytest.raises(ValueError, match="size 2 is smaller than the tokenizer's 3"):
        V.pieces_from_tokenizer(tok, size=2)
    with pytest.raises(ValueError, match="mode 'bpe'"):
        V.pieces_from_tokenizer(tok, mode="bpe")


@pytest.mark.parametrize(
    "name,pieces,want_chunks",
    [
        ("one token", [b"a"], 1),
        ("exactly one chunk of tokens", [b"ab"] * V.CHUNK_TOKENS, 1),
        ("one token over", [b"ab"] * (V.CHUNK_TOKENS + 1), 2),
        ("cut by bytes", [b"x" * 1000] * 1000, 4),
        ("text, bytes and none", ["é", b"\x00", None, b"<|im_end|>"], 1),
    ],
)
def test_chunks(name, pieces, want_chunks):
    cs = V.chunks(pieces, engine="vllm", model="org/model")
    assert len(cs) == want_chunks
    first = 0
    for i, c in enumerate(cs):
        assert (c.chunk, c.chunks, c.size, c.first) == (i, len(cs), len(pieces), first)
        assert len(c.offsets) <= V.CHUNK_TOKENS and len(c.pieces) <= V.CHUNK_BYTES
        c.validate()
        ev = rl.Event("run-1", c, source="pytest")
        assert len(ev.encode()) < S.MAX_RECORD_BYTES
        first += len(c.offsets)
    assert first == len(pieces)
    want = [p.encode() if isinstance(p, str) else (p or b"") for p in pieces]
    assert assemble(cs) == want


def test_bad_input():
    with pytest.raises(ValueError, match="at least one token"):
        V.chunks([], engine="vllm", model="m")
    with pytest.raises(ValueError, match="engine and model"):
        V.chunks([b"a"], engine="vllm", model="")
    with pytest.raises(TypeError, match="piece 1 is int"):
        V.chunks([b"a", 7], engine="vllm", model="m")


def test_ids_are_the_proxys():
    """The same (run, engine, model, chunk) gives the id the Go proxy gives
    (services/proxy vocabID), so either registering is a duplicate of the
    other."""
    assert V.fact_id("run-1", "llamacpp", "tiny.gguf", 2) == "d87e4665-1073-52dd-9fe7-2287622acfb5"
    evs = V.events("run-1", [b"a", b"b"], engine="llamacpp", model="tiny.gguf", source="pytest")
    assert [e.id for e in evs] == [V.fact_id("run-1", "llamacpp", "tiny.gguf", 0)]
    assert rl.vocabulary is V


def test_register_with_the_client(ledger, run_id):
    """The ledger takes every chunk; registering again sends the same ids,
    so readers see one vocabulary (duplicates by id count once)."""
    pieces = V.pieces_from_tokenizer(FakeTokenizer(["<|endoftext|>"] + [f"Ġt{i}" for i in range(V.CHUNK_TOKENS + 10)], special=["<|endoftext|>"]))
    acks = V.register(ledger, run_id, pieces, engine="vllm", model="org/model")
    want = [V.fact_id(run_id, "vllm", "org/model", i) for i in range(2)]
    assert [a.id for a in acks] == want
    again = V.register(ledger, run_id, pieces, engine="vllm", model="org/model")
    assert [a.id for a in again] == want
