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
import urllib.parse

import openai
import pytest
import rolloutledger as rl

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

def chat_prompt_ids(engine: str, messages: list[dict], tools: list[dict] | None = None) -> list[int]:
    body = {"messages": messages} | ({"tools": tools} if tools else {})
    prompt = http_json(engine + "/apply-template", body)["prompt"]
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


# --- an agent that calls tools ----------------------------------------------

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Get the current weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}

# A harness that wants a tool call now opens the assistant's answer with the
# call marker (the engine continues a final assistant message) and sets
# tool_choice "required" (the engine then constrains the call to the tools'
# schemas). SmolLM2-135M is too small to choose a tool unprompted; with both,
# it fills in a call the engine parses, as a larger model would on its own.
CALL_NOW = {"role": "assistant", "content": "<tool_call>\n"}


def tool_calls_in(text: str) -> list[tuple[str, object]]:
    """The (name, arguments) of the Hermes-style calls in generated text:
    JSON objects, each closed by </tool_call> (the first opened by the
    prompt's marker, the rest by their own)."""
    calls = []
    for part in text.split("</tool_call>"):
        body = part.split("<tool_call>")[-1].strip()
        if body.startswith("{"):
            call = json.loads(body)
            calls.append((call["name"], call["arguments"]))
    return calls


def tool_conversation(stack, run: str, attempt: str):
    """A two-question agent: each question answered by a tool call the
    engine generates and parses, the harness's tool outputs, then a prose
    answer. Returns each turn's prompt ids (the engine's own), the text the
    client received, the log-probs it received for call turns (None for
    answers), and the calls of each call turn: (call id, arguments, output)."""
    c = client(stack, run, attempt)
    messages = [{"role": "system", "content": "You are a weather assistant. Answer weather questions by calling get_weather."},
                {"role": "user", "content": "What is the weather in London?"}]
    outputs = {"London": "rain, 12 degrees", "Paris": "sunny, 21 degrees"}
    prompts, texts, received = [], [], []
    calls: dict[int, list[tuple[str, str, str]]] = {}
    for follow in ["And in Paris?", None]:
        # The call turn.
        ask = messages + [CALL_NOW]
        prompts.append(chat_prompt_ids(stack.engine, ask, [WEATHER]))
        r = c.chat.completions.create(model=MODEL, messages=ask, tools=[WEATHER], tool_choice="required",
                                      max_tokens=100, temperature=0, logprobs=True, **NO_CACHE)
        ch = r.choices[0]
        assert ch.finish_reason == "tool_calls" and ch.message.tool_calls, f"no tool call: {ch}"
        assert r.usage.prompt_tokens == len(prompts[-1])
        texts.append(ch.message.content or "")
        received.append([e.logprob for e in ch.logprobs.content])
        messages.append(ch.message.model_dump(exclude_none=True))
        mine = calls.setdefault(len(prompts) - 1, [])
        for tc in ch.message.tool_calls:
            assert tc.function.name == "get_weather"
            out = outputs.get(json.loads(tc.function.arguments).get("city"), "unknown city")
            mine.append((tc.id, tc.function.arguments, out))
            messages.append({"role": "tool", "tool_call_id": tc.id, "content": out})
        # The answer turn, with the tool outputs in its prompt.
        prompts.append(chat_prompt_ids(stack.engine, messages, [WEATHER]))
        r = c.chat.completions.create(model=MODEL, messages=messages, tools=[WEATHER], max_tokens=24, temperature=0,
                                      **NO_CACHE)
        ch = r.choices[0]
        assert ch.finish_reason in ("stop", "length") and not ch.message.tool_calls
        assert ch.logprobs is None, "the client asked for no log-probs"
        texts.append(ch.message.content)
        received.append(None)
        messages.append({"role": "assistant", "content": ch.message.content})
        if follow:
            messages.append({"role": "user", "content": follow})
    return prompts, texts, received, calls


def check_tool_turns(stack, run: str, attempt: str, prompts, texts, received, calls) -> list[dict]:
    """The ledger's turns and tool calls of a tool_conversation attempt."""
    turns = [t for t in stack.turns(run) if t["attempt"] == attempt]
    assert [t["turn"] for t in turns] == list(range(len(prompts)))
    for i, t in enumerate(turns):
        where = f"{run}/{attempt} turn {i}"
        assert t.get("tags", []) == [], f"{where}: tags {t.get('tags')}"
        assert t["prompt_tokens"] == len(prompts[i]) and whole_prompt(turns, i) == prompts[i], \
            f"{where}: the prompt rebuilt from the ledger is not the engine's"
        assert t.get("text", "") == texts[i], where
        assert len(t["token_ids"]) == t["completion_tokens"] == len(t["logprobs"]), where
        if received[i] is not None:
            assert t["finish"] == "tool_call", where
            # Constrained by the engine's grammar, so not /completion's
            # unconstrained greedy: the answer's own entries are the truth.
            assert len(received[i]) == len(t["token_ids"]), where
            assert max(abs(a - b) for a, b in zip(t["logprobs"], received[i])) < 1e-5, where
            text = http_json(stack.engine + "/detokenize", {"tokens": t["token_ids"]})["content"]
            got = tool_calls_in(text)
            want = [("get_weather", json.loads(args)) for _, args, _ in calls[i]]
            assert got == want, f"{where}: the ids decode to {got} ({text!r}), the client received {want}"
        else:
            # The engine renders the call it parsed, not the tokens it
            # generated (this template re-serializes the arguments as
            # compact JSON): where they differ, the prompt is a divergence at
            # the first differing index, stored whole; where not, it extends
            # the call turn and only its new tokens are stored.
            before = prompts[i - 1] + turns[i - 1]["token_ids"]
            at = next((k for k, (a, b) in enumerate(zip(before, prompts[i])) if a != b), len(before))
            if at == len(before):
                assert t.get("parent") == i - 1 and t["prefix_tokens"] == len(before) and "diverged" not in t, where
            else:
                assert "parent" not in t and t.get("diverged") == {"turn": i - 1, "at": at}, \
                    f"{where}: rendered history leaves the generated call at {at}, the ledger says {t.get('diverged')}"
            ids, lps = greedy(stack.engine, prompts[i], t["completion_tokens"])
            assert t["token_ids"] == ids, f"{where}: ids {t['token_ids']}, the engine's /completion gives {ids}"
            seen = http_json(stack.engine + "/detokenize", {"tokens": t["observation_token_ids"]})["content"]
            for _, _, out in calls[i - 1]:
                assert out in seen, f"{where}: the tool output {out!r} is not in the observation {seen!r}"

    facts = [f["data"] for f in stack.facts(run) if f["type"] == "tool.called" and f["data"]["attempt"] == attempt]
    recorded = sorted((f["turn"], f["call"], f["call_id"], f["tool"], f["input"], f.get("output")) for f in facts)
    want = sorted((turn, k, tc_id, "get_weather", args, out)
                  for turn, cs in calls.items() for k, (tc_id, args, out) in enumerate(cs))
    assert recorded == want, f"tool.called facts {recorded}, want {want}"
    assert not any(f.get("unanswered") for f in facts)
    return turns


def test_agent_with_tool_calls_trains(tools_stack):
    """Two attempts of one group run the tool-calling agent through the
    proxy while the scheduler and verifier write their facts through the
    Python SDK. Each attempt's turns and tool calls are the engine's (see
    check_tool_turns), the explorer shows them, and batch 1 trains them:
    each sample segment is the sequence rebuilt from the ledger's turns,
    from the first prompt token, trained exactly on the completions with
    the engine's log-probs."""
    stack = tools_stack
    run = "py-tools"
    attempts = ["group-0/attempt-0", "group-0/attempt-1"]
    led = rl.Ledger(stack.ledger, source="py-scheduler")
    led.send(led.event(run, rl.RunStarted(config=rl.RunConfig(group_size=2, batch_groups=1, enforce_admission=False),
                                          model="SmolLM2-135M-Instruct", harness="weather-agent")))
    led.send(led.event(run, rl.TaskRegistered(task="weather-0", source="test", kind="agentic", tier=1)))
    led.send(led.event(run, rl.GroupStarted(group="group-0", task="weather-0", size=2, purpose="train")))
    for a in attempts:
        led.send(led.event(run, rl.AttemptStarted(attempt=a, group="group-0", task="weather-0", engine="llama-server",
                                                  vm="vm-" + a[-1], fork_ms=0)))
    turns = {}
    for a in attempts:
        conv = tool_conversation(stack, run, a)
        turns[a] = check_tool_turns(stack, run, a, *conv)
    for a, passed in zip(attempts, [True, False]):
        led.send(led.event(run, rl.AttemptFinished(attempt=a, outcome="submitted")))
        led.send(led.event(run, rl.RewardComputed(attempt=a, passed=passed, tests_passed=3 if passed else 0,
                                                  tests_total=3, verifier="weather-check")))
    batch = led.next_batch(run, after=0, wait=120)
    assert batch is not None, "batch 1 was not sealed within 120 s"
    samples = led.samples(run, 1).samples
    for a in attempts:
        ts = turns[a]
        # A segment starts at the first turn and at each turn that does not
        # extend the one before it; it ends with its last turn's whole
        # sequence, trained on each of its turns' completions.
        segments, cur = [], []
        for i, t in enumerate(ts):
            if cur and t.get("parent") != cur[-1]:
                segments.append(cur)
                cur = []
            cur.append(i)
        segments.append(cur)
        mine = sorted((s for s in samples if s.attempt == a), key=lambda s: s.segment)
        assert len(mine) == len(segments), f"{a}: {len(mine)} sample segments, want {len(segments)}: {segments}"
        for s, seg in zip(mine, segments):
            last = seg[-1]
            want = whole_prompt(ts, last) + ts[last]["token_ids"]
            mask = [0] * len(want)
            logp = [0.0] * len(want)
            for i in seg:
                at = len(whole_prompt(ts, i))
                for k, lp in enumerate(ts[i]["logprobs"]):
                    mask[at + k], logp[at + k] = 1, lp
            assert s.token_ids.tolist() == want, f"{a} segment {s.segment}: not the sequence of turns {seg}"
            assert s.loss_mask.tolist() == mask, f"{a} segment {s.segment}: trained tokens are not the completions"
            got = s.rollout_logprobs.tolist()
            assert all(abs(got[k] - logp[k]) < 1e-6 for k in range(len(want)) if mask[k]), f"{a} segment {s.segment}"
        # The explorer shows the attempt's turns.
        view = http_json(f"{stack.ledger}/v1/runs/{run}/explore/attempts/{urllib.parse.quote(a, safe='')}")
        assert len(view["turn_list"]) == len(ts), f"{a}: the explorer shows {len(view['turn_list'])} turns"
    led.close()
