"""Record real llama-server answers as test fixtures for the inference proxy.

    python3 scripts/engine/record_fixtures.py --smol URL --tiny URL --out services/proxy/testdata

Both servers run the way internal/testenv starts them (`-c 4096 -np 2 -t 2
--jinja`, SmolLM2 with `--no-repack`). Every exchange is written as
NAME.request.json beside NAME.response.json (JSON answers) or NAME.sse (the
raw event stream, byte for byte), and listed in llamacpp/index.json with its
method, path, status, content type and model. Generation is greedy
(temperature 0) where it can be, so a second recording gives the same ids;
answers still carry their own creation times and random ids.

The vLLM and SGLang fixtures cannot be recorded here (neither runs on these
CPUs); vllm_sglang.py writes them in those engines' documented shapes from
the ids and log-probs recorded here (see their READMEs).

Standard library only.
"""

import argparse
import http.client
import json
import os
import sys
import urllib.parse

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "description": "The city name"}},
            "required": ["city"],
        },
    },
}

SYSTEM = "You are a helpful assistant."
USER = "What is the capital of France? Answer in one short sentence."


class Recorder:
    def __init__(self, out, scrub=None):
        self.out = out
        # The models' directory is this machine's; answers name it as MODELS.
        self.scrub = scrub.rstrip("/").encode() if scrub else None
        self.index = []
        os.makedirs(out, exist_ok=True)

    def call(self, base, method, path, body=None, raw=None, model="", note=""):
        """Send one request; return (status, content_type, bytes)."""
        u = urllib.parse.urlparse(base)
        conn = http.client.HTTPConnection(u.hostname, u.port, timeout=600)
        data = None
        headers = {}
        if raw is not None:
            data = raw
            headers["Content-Type"] = "application/json"
        elif body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        conn.request(method, path, body=data, headers=headers)
        resp = conn.getresponse()
        payload = resp.read()
        if self.scrub:
            payload = payload.replace(self.scrub, b"MODELS")
        ctype = resp.getheader("Content-Type", "")
        conn.close()
        return resp.status, ctype, payload

    def record(self, name, base, method, path, body=None, raw=None, model="", note=""):
        status, ctype, payload = self.call(base, method, path, body=body, raw=raw)
        entry = {"name": name, "model": model, "method": method, "path": path,
                 "status": status, "content_type": ctype}
        if raw is not None:
            req_file = name + ".request.txt"
            with open(os.path.join(self.out, req_file), "wb") as f:
                f.write(raw)
            entry["request"] = req_file
        elif body is not None:
            req_file = name + ".request.json"
            write_json(os.path.join(self.out, req_file), body)
            entry["request"] = req_file
        if ctype.startswith("text/event-stream"):
            resp_file = name + ".sse"
            with open(os.path.join(self.out, resp_file), "wb") as f:
                f.write(payload)
            parsed = parse_sse(payload)
        else:
            resp_file = name + ".response.json"
            try:
                parsed = json.loads(payload)
                write_json(os.path.join(self.out, resp_file), parsed)
            except ValueError:
                resp_file = name + ".response.txt"
                with open(os.path.join(self.out, resp_file), "wb") as f:
                    f.write(payload)
                parsed = payload.decode("utf-8", "replace")
        entry["response"] = resp_file
        if note:
            entry["note"] = note
        self.index.append(entry)
        print("recorded %-40s %s %s -> %d" % (name, method, path, status), file=sys.stderr)
        return status, parsed

    def finish(self, extra):
        write_json(os.path.join(self.out, "index.json"), {"recorded_with": extra, "exchanges": self.index})


def write_json(path, obj):
    with open(path, "w", encoding="utf-8") as f:
        json.dump(obj, f, indent=1, ensure_ascii=False)
        f.write("\n")


def parse_sse(payload):
    """The JSON objects of data: lines, [DONE] kept as the string."""
    events = []
    for line in payload.decode("utf-8").split("\n"):
        if line.startswith("data: "):
            d = line[len("data: "):]
            events.append(d if d == "[DONE]" else json.loads(d))
    return events


def chat_body(**kw):
    body = {"model": "smollm2", "messages": [{"role": "system", "content": SYSTEM},
                                             {"role": "user", "content": USER}],
            "temperature": 0, "max_tokens": 24, "seed": 42}
    body.update(kw)
    return body


def record_smol(rec, url, facts):
    m = "SmolLM2-135M-Instruct.Q4_1"
    rec.record("health", url, "GET", "/health", model=m)
    rec.record("v1_models", url, "GET", "/v1/models", model=m)
    _, props = rec.record("props", url, "GET", "/props", model=m)
    facts["build_info"] = props.get("build_info")

    # Prompt ids of the chat request, the way the chat route makes them.
    _, tmpl = rec.record("apply_template", url, "POST", "/apply-template", chat_body(), model=m)
    _, tok = rec.record("tokenize_chat_prompt", url, "POST", "/tokenize",
                        {"content": tmpl["prompt"], "add_special": True, "parse_special": True}, model=m)
    prompt_ids = tok["tokens"]
    facts["chat_prompt_ids"] = prompt_ids
    rec.record("tokenize_with_pieces", url, "POST", "/tokenize",
               {"content": "Bamble- café", "with_pieces": True}, model=m)
    rec.record("detokenize", url, "POST", "/detokenize", {"tokens": [332, 854, 29]}, model=m,
               note="re-tokenization drift: same text as [40480, 29]")
    rec.record("detokenize_merged", url, "POST", "/detokenize", {"tokens": [40480, 29]}, model=m)
    rec.record("apply_template_tools", url, "POST", "/apply-template",
               chat_body(tools=[WEATHER_TOOL]), model=m)

    _, chat = rec.record("chat", url, "POST", "/v1/chat/completions",
                         chat_body(logprobs=True, top_logprobs=1), model=m)
    facts["chat"] = chat
    rec.record("chat_stream", url, "POST", "/v1/chat/completions",
               chat_body(logprobs=True, top_logprobs=1, stream=True,
                         stream_options={"include_usage": True}), model=m)
    rec.record("chat_top_logprobs_0", url, "POST", "/v1/chat/completions",
               chat_body(logprobs=True, top_logprobs=0), model=m,
               note="top_logprobs 0 gives no logprobs at all (n_probs = 0)")
    rec.record("chat_no_logprobs", url, "POST", "/v1/chat/completions", chat_body(), model=m)
    rec.record("chat_return_tokens_verbose", url, "POST", "/v1/chat/completions",
               chat_body(return_tokens=True, verbose=True, logprobs=True, top_logprobs=1), model=m,
               note="__verbose.tokens holds every sampled id")

    # Tool calls.
    for choice in ("auto", "required"):
        st, ans = rec.record("chat_tools_" + choice, url, "POST", "/v1/chat/completions",
                             chat_body(messages=[{"role": "user", "content": "What is the weather in Paris?"}],
                                       tools=[WEATHER_TOOL], tool_choice=choice, max_tokens=64,
                                       logprobs=True, top_logprobs=1), model=m)
        if st == 200 and ans["choices"][0]["message"].get("tool_calls") and "tool_call" not in facts:
            facts["tool_call"] = ans
            _, tt = rec.record("apply_template_tools_" + choice, url, "POST", "/apply-template",
                               chat_body(messages=[{"role": "user", "content": "What is the weather in Paris?"}],
                                         tools=[WEATHER_TOOL], tool_choice=choice), model=m)
            _, tk = rec.record("tokenize_tools_prompt_" + choice, url, "POST", "/tokenize",
                               {"content": tt["prompt"], "add_special": True, "parse_special": True}, model=m)
            facts["tool_prompt_ids"] = tk["tokens"]
    rec.record("chat_tools_stream", url, "POST", "/v1/chat/completions",
               chat_body(messages=[{"role": "user", "content": "What is the weather in Paris?"}],
                         tools=[WEATHER_TOOL], tool_choice="required", max_tokens=64, stream=True,
                         stream_options={"include_usage": True}), model=m)
    rec.record("chat_tools_stream_logprobs", url, "POST", "/v1/chat/completions",
               chat_body(messages=[{"role": "user", "content": "What is the weather in Paris?"}],
                         tools=[WEATHER_TOOL], tool_choice="required", max_tokens=64, stream=True,
                         logprobs=True, top_logprobs=1), model=m,
               note="refused by llama-server: logprobs with tools and stream")
    tc = facts.get("tool_call")
    if tc:
        call = tc["choices"][0]["message"]["tool_calls"][0]
        follow = [{"role": "user", "content": "What is the weather in Paris?"},
                  {"role": "assistant", "content": None, "tool_calls": [call]},
                  {"role": "tool", "tool_call_id": call.get("id", ""), "content": "{\"temperature_c\": 18, \"sky\": \"sunny\"}"}]
        rec.record("chat_tool_result", url, "POST", "/v1/chat/completions",
                   chat_body(messages=follow, tools=[WEATHER_TOOL], logprobs=True, top_logprobs=1, max_tokens=32),
                   model=m)
        rec.record("apply_template_tool_result", url, "POST", "/apply-template",
                   chat_body(messages=follow, tools=[WEATHER_TOOL]), model=m)

    # Completions, OpenAI and native.
    cbody = {"model": "smollm2", "prompt": "The capital of France is", "max_tokens": 12,
             "temperature": 0, "logprobs": 1, "seed": 42}
    rec.record("completions", url, "POST", "/v1/completions", cbody, model=m)
    rec.record("completions_stream", url, "POST", "/v1/completions",
               dict(cbody, stream=True, stream_options={"include_usage": True}), model=m)
    nbody = {"prompt": prompt_ids, "n_predict": 24, "temperature": 0, "return_tokens": True,
             "n_probs": 1, "cache_prompt": True, "seed": 42}
    _, native = rec.record("completion", url, "POST", "/completion", nbody, model=m,
                           note="prompt = the chat request's ids; same ids as the chat answer at temperature 0")
    facts["native"] = native
    rec.record("completion_stream", url, "POST", "/completion", dict(nbody, stream=True), model=m)

    # Errors.
    rec.record("error_bad_json", url, "POST", "/v1/chat/completions",
               raw=b'{"model": "smollm2", "messages": [', model=m)
    rec.record("error_top_logprobs_without_logprobs", url, "POST", "/v1/chat/completions",
               chat_body(top_logprobs=2), model=m)
    rec.record("error_prompt_too_long", url, "POST", "/completion",
               {"prompt": [1] * 3000, "n_predict": 4}, model=m,
               note="-c 4096 with -np 2: 2048 tokens per slot")


def record_tiny(rec, url, facts):
    m = "tiny random llama (scripts/engine/tiny_gguf.py)"
    rec.record("tiny_props", url, "GET", "/props", model=m)
    # Find a seed whose sampled bytes split UTF-8 characters in the middle of
    # the turn: fewer log-prob entries than generated tokens, and the last
    # entry is the last token (so the loss is not only at the end).
    base = {"model": "tiny", "messages": [{"role": "user", "content": "hello world"}],
            "max_tokens": 12, "temperature": 1.0, "logprobs": True, "top_logprobs": 1,
            "ignore_eos": True}
    found = None
    for seed in range(1, 200):
        st, _, payload = rec.call(url, "POST", "/v1/chat/completions",
                                  dict(base, seed=seed, return_tokens=True, verbose=True))
        ans = json.loads(payload)
        entries = [e["id"] for e in ans["choices"][0]["logprobs"]["content"]]
        tokens = ans["__verbose"]["tokens"]
        if len(entries) < len(tokens) and entries and entries[-1] == tokens[-1]:
            found = seed
            break
    if found is None:
        print("no merged-byte case in 200 seeds", file=sys.stderr)
        return
    facts["merged_seed"] = found
    body = dict(base, seed=found)
    rec.record("tiny_chat_merged_bytes", url, "POST", "/v1/chat/completions", body, model=m,
               note="len(logprobs.content) < usage.completion_tokens: partial UTF-8 byte tokens merged")
    rec.record("tiny_chat_merged_bytes_tokens", url, "POST", "/v1/chat/completions",
               dict(body, return_tokens=True, verbose=True), model=m,
               note="__verbose.tokens has every id; logprobs.content fewer")
    rec.record("tiny_chat_merged_bytes_stream", url, "POST", "/v1/chat/completions",
               dict(body, stream=True, stream_options={"include_usage": True}), model=m)
    _, tmpl = rec.record("tiny_apply_template", url, "POST", "/apply-template", body, model=m)
    _, tok = rec.record("tiny_tokenize", url, "POST", "/tokenize",
                        {"content": tmpl["prompt"], "add_special": True, "parse_special": True,
                         "with_pieces": True}, model=m)
    ids = [t["id"] for t in tok["tokens"]]
    nbody = {"prompt": ids, "n_predict": 12, "temperature": 1.0, "seed": found, "ignore_eos": True,
             "return_tokens": True, "n_probs": 1}
    rec.record("tiny_completion_merged_bytes", url, "POST", "/completion", nbody, model=m)
    rec.record("tiny_completion_merged_bytes_stream", url, "POST", "/completion",
               dict(nbody, stream=True), model=m)
    rec.record("tiny_chat_tools_required", url, "POST", "/v1/chat/completions",
               {"model": "tiny", "messages": [{"role": "user", "content": "weather in Paris"}],
                "tools": [WEATHER_TOOL], "tool_choice": "required", "max_tokens": 96,
                "temperature": 0, "logprobs": True, "top_logprobs": 1}, model=m,
               note="grammar-forced tool call from random weights")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--smol", required=True)
    ap.add_argument("--tiny", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--facts", help="write what vllm_sglang.py needs here")
    ap.add_argument("--scrub", help="directory of the models, written as MODELS in the answers")
    a = ap.parse_args()
    rec = Recorder(os.path.join(a.out, "llamacpp"), a.scrub)
    facts = {}
    record_smol(rec, a.smol, facts)
    record_tiny(rec, a.tiny, facts)
    rec.finish({"build_info": facts.get("build_info"), "merged_bytes_seed": facts.get("merged_seed")})
    if a.facts:
        write_json(a.facts, facts)


if __name__ == "__main__":
    main()
