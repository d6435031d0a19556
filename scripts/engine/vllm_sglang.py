"""Write vLLM and SGLang answers in those engines' documented shapes.

    python3 scripts/engine/vllm_sglang.py FACTS.json services/proxy/testdata

FACTS.json comes from record_fixtures.py --facts: the ids, log-probs and text
SmolLM2-135M-Instruct produced through llama-server. Neither vLLM nor SGLang
runs on these CPUs, so their answers are built here field by field as their
serving code builds them (the source files and commits are named in each
directory's README), filled with those real values, so that ids, log-probs,
text and usage agree with each other as they would from a real engine.
Deterministic: fixed ids and times, no randomness.

Standard library only.
"""

import json
import os
import sys

MODEL = "HuggingFaceTB/SmolLM2-135M-Instruct"
CREATED = 1764806400
SYSTEM = "You are a helpful assistant."
USER = "What is the capital of France? Answer in one short sentence."


def write_json(path, obj):
    with open(path, "w", encoding="utf-8") as f:
        json.dump(obj, f, indent=1, ensure_ascii=False)
        f.write("\n")


def write_sse(path, events):
    with open(path, "w", encoding="utf-8") as f:
        for e in events:
            if e == "[DONE]":
                f.write("data: [DONE]\n\n")
            else:
                f.write("data: " + json.dumps(e, ensure_ascii=False, separators=(",", ":")) + "\n\n")


def tokens_of(facts):
    """(ids, texts, logprobs, text) of the greedy SmolLM2 turn."""
    native = facts["native"]
    ids = native["tokens"]
    probs = native["completion_probabilities"]
    if len(probs) != len(ids):
        sys.exit("the recorded SmolLM2 turn has merged log-prob entries; pick another prompt")
    texts = [p["token"] for p in probs]
    lps = [p["logprob"] for p in probs]
    if "".join(texts) != native["content"]:
        sys.exit("the recorded token texts do not add up to the content")
    return ids, texts, lps, native["content"]


def eos_end(facts):
    """Whether the turn ended on the end-of-turn token (then it is the last id)."""
    return facts["native"].get("stop_type") == "eos"


EOS_TEXT = "<|im_end|>"  # SmolLM2's end-of-turn token, id 2


def vllm_finish(facts):
    return "stop" if eos_end(facts) else "length"


def sglang_finish(facts, ids, n):
    if eos_end(facts):
        return {"type": "stop", "matched": ids[-1]}
    return {"type": "length", "length": n}


def usage(p, c):
    return {"prompt_tokens": p, "total_tokens": p + c, "completion_tokens": c, "prompt_tokens_details": None}


def vllm_chat_lp(tok, lp):
    return {"token": tok, "logprob": lp, "bytes": list(tok.encode("utf-8")), "top_logprobs": []}


def write_vllm(facts, out):
    d = os.path.join(out, "vllm")
    os.makedirs(d, exist_ok=True)
    prompt = facts["chat_prompt_ids"]
    ids, texts, lps, text = tokens_of(facts)
    n, p = len(ids), len(prompt)
    if eos_end(facts):
        texts = texts[:-1] + [EOS_TEXT]
    fin = vllm_finish(facts)
    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": USER}]
    req = {"model": MODEL, "messages": messages, "temperature": 0, "max_tokens": n,
           "logprobs": True, "top_logprobs": 0, "return_token_ids": True}
    write_json(os.path.join(d, "chat.request.json"), req)
    write_json(os.path.join(d, "chat.response.json"), {
        "id": "chatcmpl-7f3c2a9e5b1d4c8e9a0b1c2d3e4f5a6b", "object": "chat.completion",
        "created": CREATED, "model": MODEL,
        "choices": [{
            "index": 0,
            "message": {"role": "assistant", "content": text, "refusal": None, "annotations": None,
                        "audio": None, "function_call": None, "reasoning": None},
            "logprobs": {"content": [vllm_chat_lp(t, l) for t, l in zip(texts, lps)]},
            "finish_reason": fin, "stop_reason": None, "token_ids": ids, "routed_experts": None,
        }],
        "service_tier": None, "system_fingerprint": None, "usage": usage(p, n),
        "prompt_logprobs": None, "prompt_token_ids": prompt, "prompt_text": None,
        "kv_transfer_params": None, "ec_transfer_params": None, "metrics": None,
    })

    # Streaming: exclude_unset serialization; the first chunk carries the
    # role and prompt_token_ids, each later one a token's delta with its id.
    sreq = dict(req, stream=True, stream_options={"include_usage": True})
    write_json(os.path.join(d, "chat_stream.request.json"), sreq)
    cid = "chatcmpl-0a1b2c3d4e5f60718293a4b5c6d7e8f9"
    head = {"id": cid, "object": "chat.completion.chunk", "created": CREATED, "model": MODEL}
    events = [dict(head, choices=[{"index": 0, "delta": {"role": "assistant", "content": ""},
                                   "logprobs": None, "finish_reason": None}],
                   prompt_token_ids=prompt)]
    for i, (tid, t, l) in enumerate(zip(ids, texts, lps)):
        last = i == n - 1
        delta = {"content": t} if not (last and eos_end(facts)) else {}
        events.append(dict(head, choices=[{"index": 0, "delta": delta,
                                           "logprobs": {"content": [vllm_chat_lp(t, l)]},
                                           "finish_reason": fin if last else None,
                                           **({"stop_reason": None} if last else {}),
                                           "token_ids": [tid]}]))
    u = usage(p, n)
    del u["prompt_tokens_details"]
    events.append(dict(head, choices=[], usage=u))
    events.append("[DONE]")
    write_sse(os.path.join(d, "chat_stream.sse"), events)

    # A tool call, as vLLM's hermes parser returns it (content None).
    tc = facts.get("tool_call")
    if tc:
        msg = tc["choices"][0]["message"]
        call = msg["tool_calls"][0]["function"]
        tc_lp = tc["choices"][0].get("logprobs") or {"content": []}
        tc_ids = [e["id"] for e in tc_lp["content"]]
        treq = {"model": MODEL, "messages": [{"role": "user", "content": "What is the weather in Paris?"}],
                "tools": [{"type": "function", "function": {"name": "get_weather",
                                                            "description": "Get the current weather in a city",
                                                            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}],
                "tool_choice": "auto", "temperature": 0, "logprobs": True, "top_logprobs": 0,
                "return_token_ids": True}
        write_json(os.path.join(d, "chat_tool_call.request.json"), treq)
        write_json(os.path.join(d, "chat_tool_call.response.json"), {
            "id": "chatcmpl-5e6f7a8b9c0d1e2f3a4b5c6d7e8f9a0b", "object": "chat.completion",
            "created": CREATED, "model": MODEL,
            "choices": [{
                "index": 0,
                "message": {"role": "assistant", "content": None, "refusal": None, "annotations": None,
                            "audio": None, "function_call": None,
                            "tool_calls": [{"id": "chatcmpl-tool-9f8e7d6c5b4a39281706f5e4d3c2b1a0",
                                            "type": "function",
                                            "function": {"name": call["name"], "arguments": call["arguments"]}}],
                            "reasoning": None},
                "logprobs": {"content": [vllm_chat_lp(e["token"], e["logprob"]) for e in tc_lp["content"]]},
                "finish_reason": "tool_calls", "stop_reason": None, "token_ids": tc_ids, "routed_experts": None,
            }],
            "service_tier": None, "system_fingerprint": None,
            "usage": usage(tc["usage"]["prompt_tokens"], len(tc_ids)),
            "prompt_logprobs": None, "prompt_token_ids": facts.get("tool_prompt_ids"), "prompt_text": None,
            "kv_transfer_params": None, "ec_transfer_params": None, "metrics": None,
        })

    # /v1/completions with a token-id prompt: ids per choice.
    creq = {"model": MODEL, "prompt": prompt, "max_tokens": n, "temperature": 0, "logprobs": 0,
            "return_token_ids": True}
    write_json(os.path.join(d, "completions.request.json"), creq)
    offsets, off = [], 0
    ctexts = texts[:-1] + [""] if eos_end(facts) else texts
    for t in ctexts:
        offsets.append(off)
        off += len(t)
    write_json(os.path.join(d, "completions.response.json"), {
        "id": "cmpl-3c4d5e6f7a8b9c0d1e2f3a4b5c6d7e8f", "object": "text_completion", "created": CREATED,
        "model": MODEL,
        "choices": [{
            "index": 0, "text": text,
            "logprobs": {"text_offset": offsets, "token_logprobs": lps, "tokens": texts,
                         "top_logprobs": [{t: l} for t, l in zip(texts, lps)]},
            "finish_reason": fin, "stop_reason": None, "token_ids": ids, "prompt_logprobs": None,
            "prompt_token_ids": prompt, "routed_experts": None,
        }],
        "service_tier": None, "system_fingerprint": None, "usage": usage(p, n),
        "kv_transfer_params": None, "ec_transfer_params": None, "metrics": None,
    })
    write_json(os.path.join(d, "completions_stream.request.json"),
               dict(creq, stream=True, stream_options={"include_usage": True}))
    head = {"id": "cmpl-8e9f0a1b2c3d4e5f60718293a4b5c6d7", "object": "text_completion",
            "created": CREATED, "model": MODEL}
    events = []
    for i, (tid, t, l) in enumerate(zip(ids, texts, lps)):
        ch = {"index": 0, "text": ctexts[i],
              "logprobs": {"text_offset": [offsets[i]], "token_logprobs": [l], "tokens": [t],
                           "top_logprobs": [{t: l}]},
              "finish_reason": fin if i == n - 1 else None,
              "stop_reason": None, "token_ids": [tid]}
        if i == 0:
            ch["prompt_token_ids"] = prompt
        events.append(dict(head, choices=[ch]))
    u = usage(p, n)
    del u["prompt_tokens_details"]
    events.append(dict(head, choices=[], usage=u))
    events.append("[DONE]")
    write_sse(os.path.join(d, "completions_stream.sse"), events)

    # Token-in /inference/v1/generate.
    greq = {"model": MODEL, "token_ids": prompt,
            "sampling_params": {"max_tokens": n, "temperature": 0, "logprobs": 0}, "stream": False}
    write_json(os.path.join(d, "generate.request.json"), greq)

    def gen_lp(tid, l):
        t = "token_id:%d" % tid
        return {"token": t, "logprob": l, "bytes": None,
                "top_logprobs": [{"token": t, "logprob": l, "bytes": None}]}

    write_json(os.path.join(d, "generate.response.json"), {
        "request_id": "2d6f1b0e-8c5a-4e7b-9f3d-1a2b3c4d5e6f",
        "choices": [{"index": 0, "logprobs": {"content": [gen_lp(t, l) for t, l in zip(ids, lps)]},
                     "finish_reason": fin, "token_ids": ids, "routed_experts": None}],
        "prompt_logprobs": None, "kv_transfer_params": None,
    })
    write_json(os.path.join(d, "generate_stream.request.json"),
               dict(greq, stream=True, stream_options={"include_usage": True}))
    rid = "generate-tokens-6b7c8d9e-0f1a-4b2c-8d3e-4f5a6b7c8d9e"
    events = []
    for i, (tid, l) in enumerate(zip(ids, lps)):
        events.append({"request_id": rid, "choices": [{
            "index": 0, "logprobs": {"content": [gen_lp(tid, l)]},
            "finish_reason": fin if i == n - 1 else None, "token_ids": [tid],
            "routed_experts": None}], "usage": None})
    events.append({"request_id": rid, "choices": [],
                   "usage": {"prompt_tokens": p, "total_tokens": p + n, "completion_tokens": n}})
    events.append("[DONE]")
    write_sse(os.path.join(d, "generate_stream.sse"), events)


def write_sglang(facts, out):
    d = os.path.join(out, "sglang")
    os.makedirs(d, exist_ok=True)
    prompt = facts["chat_prompt_ids"]
    ids, texts, lps, text = tokens_of(facts)
    n, p = len(ids), len(prompt)
    req = {"input_ids": prompt, "sampling_params": {"max_new_tokens": n, "temperature": 0},
           "return_logprob": True, "stream": False}
    write_json(os.path.join(d, "generate.request.json"), req)

    def meta(k, finish, spans, latency):
        m = {"id": "5f0c3e2a9b8d4c7e8f1a2b3c4d5e6f70", "finish_reason": finish, "prompt_tokens": p,
             "weight_version": spans[-1]["version"], "weight_versions": spans,
             "input_token_logprobs": [],
             "output_token_logprobs": [[l, t, None] for t, l in zip(ids[:k], lps[:k])],
             "reasoning_tokens": 0, "completion_tokens": k, "cached_tokens": 0}
        if latency is not None:
            m["e2e_latency"] = latency
        return m

    fin = sglang_finish(facts, ids, n)
    one = [{"version": "7", "start": 0, "end": n}]
    write_json(os.path.join(d, "generate.response.json"), {
        "text": text, "output_ids": ids, "meta_info": meta(n, fin, one, 0.412)})

    # Streaming, default (non-incremental): each chunk is cumulative.
    write_json(os.path.join(d, "generate_stream.request.json"), dict(req, stream=True))
    events = []
    for k in range(1, n + 1):
        events.append({"text": "".join(texts[:k]), "output_ids": ids[:k],
                       "meta_info": meta(k, fin if k == n else None, [{"version": "7", "start": 0, "end": k}],
                                         0.412 if k == n else None)})
    events.append("[DONE]")
    write_sse(os.path.join(d, "generate_stream.sse"), events)

    # A weight update landed mid-request: two spans.
    cut = n // 2
    two = [{"version": "7", "start": 0, "end": cut}, {"version": "8", "start": cut, "end": n}]
    write_json(os.path.join(d, "generate_weight_update.response.json"), {
        "text": text, "output_ids": ids, "meta_info": meta(n, fin, two, 0.871)})

    # An update that aborts in-flight requests: partial output, abort reason.
    write_json(os.path.join(d, "generate_abort.response.json"), {
        "text": "".join(texts[:cut]), "output_ids": ids[:cut],
        "meta_info": meta(cut, {"type": "abort", "message": "Abort in the middle of a weight update.",
                                "status_code": None, "err_type": None},
                          [{"version": "7", "start": 0, "end": cut}], 0.233)})
    # The continuation, token-in from the partial output, under the new version.
    cont = prompt + ids[:cut]
    write_json(os.path.join(d, "generate_continue.request.json"),
               {"input_ids": cont, "sampling_params": {"max_new_tokens": n - cut, "temperature": 0},
                "return_logprob": True, "stream": False})
    rest = ids[cut:]
    write_json(os.path.join(d, "generate_continue.response.json"), {
        "text": "".join(texts[cut:]), "output_ids": rest,
        "meta_info": {"id": "8a9b0c1d2e3f405162738495a6b7c8d9",
                      "finish_reason": fin if eos_end(facts) else {"type": "length", "length": n - cut},
                      "prompt_tokens": len(cont), "weight_version": "8",
                      "weight_versions": [{"version": "8", "start": 0, "end": n - cut}],
                      "input_token_logprobs": [],
                      "output_token_logprobs": [[l, t, None] for t, l in zip(rest, lps[cut:])],
                      "reasoning_tokens": 0, "completion_tokens": n - cut, "cached_tokens": len(cont) - 1,
                      "e2e_latency": 0.305}})


def facts_from_recording(d):
    """The same facts, read back from recorded llama.cpp answers."""
    def load(name):
        with open(os.path.join(d, name), encoding="utf-8") as f:
            return json.load(f)
    facts = {"chat_prompt_ids": load("tokenize_chat_prompt.response.json")["tokens"],
             "native": load("completion.response.json")}
    for choice in ("auto", "required"):
        path = os.path.join(d, "chat_tools_%s.response.json" % choice)
        if os.path.exists(path):
            ans = load(os.path.basename(path))
            if ans["choices"][0]["message"].get("tool_calls"):
                facts["tool_call"] = ans
                facts["tool_prompt_ids"] = load("tokenize_tools_prompt_%s.response.json" % choice)["tokens"]
                break
    return facts


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: vllm_sglang.py FACTS.json|LLAMACPP_DIR OUT")
    if os.path.isdir(sys.argv[1]):
        facts = facts_from_recording(sys.argv[1])
    else:
        with open(sys.argv[1], encoding="utf-8") as f:
            facts = json.load(f)
    write_vllm(facts, sys.argv[2])
    write_sglang(facts, sys.argv[2])


if __name__ == "__main__":
    main()
