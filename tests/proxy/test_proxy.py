"""A harness captured by a base-URL change: the real `openai` client (and
curl) talk to `rolloutledger proxy` in front of llama-server as they would
to the engine, get answers shaped as the engine gives them (no log-probs
unless asked), and the ledger then holds each turn with the engine's own
token ids: the same as llama-server's native /completion generates from the
same prompt ids at temperature 0, the prompt ids being the engine's own
template and tokenizer's."""

from __future__ import annotations

import json
import math
import subprocess

import openai
import pytest

from conftest import http_json

MODEL = "smollm2"  # llama-server serves one model whatever the name

# llama-server's answers depend on what its slot had cached: reusing a cached
# prefix splits the prompt's evaluation differently, which moves log-probs by
# up to 0.26 and can flip a greedy token (measured on SmolLM2 Q4_1). The
# engine's /completion is the test's truth only when both evaluate the whole
# prompt, so every request here turns the cache off (a llama.cpp field the
# proxy passes through like any other).
NO_CACHE = {"extra_body": {"cache_prompt": False}}


def client(stack, run: str, attempt: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=stack.base_url(run, attempt), api_key="the-proxy-needs-none", max_retries=0)


# --- the engine's own answers, the test's source of truth -------------------

def chat_prompt_ids(engine: str, messages: list[dict]) -> list[int]:
    prompt = http_json(engine + "/apply-template", {"messages": messages})["prompt"]
    return http_json(engine + "/tokenize", {"content": prompt, "add_special": True, "parse_special": True})["tokens"]


def text_prompt_ids(engine: str, prompt: str) -> list[int]:
    return http_json(engine + "/tokenize", {"content": prompt, "add_special": True, "parse_special": True})["tokens"]


def greedy(engine: str, prompt: list[int], n: int) -> tuple[list[int], list[float]]:
    """What the native route generates from prompt ids at temperature 0."""
    ans = http_json(engine + "/completion", {"prompt": prompt, "n_predict": n, "temperature": 0,
                                             "return_tokens": True, "n_probs": 1, "cache_prompt": False})
    return ans["tokens"], [p["logprob"] for p in ans.get("completion_probabilities", [])]


# --- the ledger's side ------------------------------------------------------

def whole_prompt(turns: list[dict], i: int) -> list[int]:
    """A turn's prompt rebuilt from the ledger alone: its parent's prompt
    and completion up to prefix_tokens, then its new (observation) tokens."""
    t = turns[i]
    prompt: list[int] = []
    if t.get("parent") is not None:
        p = turns[t["parent"]]
        prompt = (whole_prompt(turns, t["parent"]) + p["token_ids"])[: t["prefix_tokens"]]
    return prompt + t["observation_token_ids"]


def check_ledger(stack, run: str, attempt: str, prompts: list[list[int]], texts: list[str]) -> list[dict]:
    turns = [t for t in stack.turns(run) if t["attempt"] == attempt]
    assert [t["turn"] for t in turns] == list(range(len(prompts))), "one turn per request, numbered in order"
    for i, (t, prompt, text) in enumerate(zip(turns, prompts, texts)):
        where = f"{run}/{attempt} turn {i}"
        assert t["v"] == 3, where
        assert t.get("tags", []) == [], f"{where}: tags {t.get('tags')}"
        assert t["engine"]["name"] == "llamacpp" and t["engine"].get("version"), f"{where}: engine {t.get('engine')}"
        assert t["prompt_tokens"] == len(prompt) and t.get("prompt_ids_from") == "tokenize", where
        assert whole_prompt(turns, i) == prompt, f"{where}: the prompt rebuilt from the ledger is not the engine's"
        assert t["text"] == text, f"{where}: the ledger's text is not what the client received"
        assert len(t["token_ids"]) == t["completion_tokens"] == len(t["logprobs"]), where
        ids, lps = greedy(stack.engine, prompt, t["completion_tokens"])
        assert t["token_ids"] == ids, f"{where}: ids {t['token_ids']}, the engine's /completion gives {ids}"
        if len(lps) == len(ids):  # fewer when a character is split over byte tokens
            worst = max((abs(a - b) for a, b in zip(t["logprobs"], lps)), default=0)
            assert worst < 1e-3, f"{where}: log-probs {t['logprobs']}, /completion's {lps}"
        assert all(lp <= 0 and not math.isnan(lp) for lp in t["logprobs"]), where
    return turns


# --- the tests --------------------------------------------------------------

def test_chat_conversation_not_streamed(stack):
    run, attempt = "py-chat", "group-0/attempt-0"
    c = client(stack, run, attempt)
    messages = [{"role": "system", "content": "You are a terse assistant."},
                {"role": "user", "content": "Name three prime numbers."}]
    prompts, texts = [], []
    for follow in ["And two more.", "Which of them is the largest?", None]:
        prompts.append(chat_prompt_ids(stack.engine, messages))
        r = c.chat.completions.create(model=MODEL, messages=messages, max_tokens=16, temperature=0, **NO_CACHE)
        assert r.object == "chat.completion" and len(r.choices) == 1
        ch = r.choices[0]
        assert ch.message.role == "assistant" and isinstance(ch.message.content, str)
        assert ch.finish_reason in ("stop", "length")
        assert ch.logprobs is None, "the client asked for no log-probs"
        assert r.usage.prompt_tokens == len(prompts[-1]) and r.usage.completion_tokens >= 1
        texts.append(ch.message.content)
        if follow is None:
            break
        messages += [{"role": "assistant", "content": ch.message.content}, {"role": "user", "content": follow}]
    turns = check_ledger(stack, run, attempt, prompts, texts)
    assert turns[0].get("parent") is None and len(turns[0]["observation_token_ids"]) == turns[0]["prompt_tokens"]
    for t in turns[1:]:
        assert t.get("parent") is not None or t.get("diverged") is not None, f"turn {t['turn']}: unrelated to the previous"


def test_chat_conversation_streamed(stack):
    run, attempt = "py-stream", "group-0/attempt-0"
    c = client(stack, run, attempt)
    messages = [{"role": "user", "content": "Write one sentence about the sea."}]
    prompts, texts = [], []
    for turn, follow in enumerate(["Now one about mountains.", None]):
        prompts.append(chat_prompt_ids(stack.engine, messages))
        asked = turn == 1  # the second turn asks for log-probs itself
        extra = {"logprobs": True} if asked else {}
        stream = c.chat.completions.create(model=MODEL, messages=messages, max_tokens=24, temperature=0, stream=True,
                                           **extra, **NO_CACHE)
        text, chunks, finish, entries = "", 0, None, 0
        for chunk in stream:
            assert chunk.object == "chat.completion.chunk"
            assert chunk.choices, "a usage-only chunk the client did not ask for"
            for ch in chunk.choices:
                text += ch.delta.content or ""
                finish = ch.finish_reason or finish
                if asked:
                    entries += len(ch.logprobs.content) if ch.logprobs and ch.logprobs.content else 0
                else:
                    assert ch.logprobs is None, "the client asked for no log-probs"
            chunks += 1
        assert chunks >= 3, "the answer came in one piece, not chunk by chunk"
        assert finish in ("stop", "length")
        if asked:
            assert entries >= 1, "the client asked for log-probs and got none"
        texts.append(text)
        if follow is None:
            break
        messages += [{"role": "assistant", "content": text}, {"role": "user", "content": follow}]
    check_ledger(stack, run, attempt, prompts, texts)


def test_completion(stack):
    run, attempt = "py-completion", "a-0"
    prompt = "The capital of France is"
    r = client(stack, run, attempt).completions.create(model=MODEL, prompt=prompt, max_tokens=8, temperature=0,
                                                                  **NO_CACHE)
    assert r.object == "text_completion" and len(r.choices) == 1
    assert isinstance(r.choices[0].text, str) and r.choices[0].finish_reason in ("stop", "length")
    assert r.choices[0].logprobs is None, "the client asked for no log-probs"
    check_ledger(stack, run, attempt, [text_prompt_ids(stack.engine, prompt)], [r.choices[0].text])


def test_curl_with_identity_headers(stack):
    """A plain HTTP user: curl, the identity in headers instead of the path."""
    messages = [{"role": "user", "content": "Say hello."}]
    body = json.dumps({"messages": messages, "max_tokens": 8, "temperature": 0, "cache_prompt": False})
    out = subprocess.run(["curl", "-sS", "--fail-with-body", stack.proxy + "/v1/chat/completions",
                          "-H", "Content-Type: application/json",
                          "-H", "X-Rolloutledger-Run: py-curl", "-H", "X-Rolloutledger-Attempt: a-0",
                          "-d", body], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr + out.stdout
    ans = json.loads(out.stdout)
    assert ans["object"] == "chat.completion"
    content = ans["choices"][0]["message"]["content"]
    assert ans["choices"][0].get("logprobs") is None
    check_ledger(stack, "py-curl", "a-0", [chat_prompt_ids(stack.engine, messages)], [content])


def test_bad_request_never_reaches_the_engine(stack):
    """Malformed JSON gets the proxy's own 400 naming the problem (the
    engine would answer 500), and no turn."""
    with pytest.raises(openai.BadRequestError) as e:
        client(stack, "py-bad", "a-0").chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "x"}],
                                                               n=2, max_tokens=1)
    assert "n=2" in str(e.value)
    out = subprocess.run(["curl", "-sS", "-o", "/dev/stdout", "-w", "\n%{http_code}",
                          stack.base_url("py-bad", "a-0") + "/chat/completions",
                          "-H", "Content-Type: application/json", "-d", "{not json"],
                         capture_output=True, text=True, timeout=60)
    body, code = out.stdout.rsplit("\n", 1)
    assert code == "400", out.stdout
    assert "JSON" in json.loads(body)["error"]["message"]
