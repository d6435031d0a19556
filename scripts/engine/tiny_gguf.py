"""Write a tiny random-weight llama GGUF for tests of the inference proxy.

    python tiny_gguf.py OUT.gguf

Two layers of width 64, float32, a vocabulary of its own (control tokens,
tool-call markers, the 256 byte-fallback tokens of a SentencePiece model and a
few hundred pieces) and a ChatML chat template that renders tools and tool
calls the way Hermes-style templates do (<tool_call>…</tool_call>), so
llama.cpp's server parses tool calls from it. The weights come from NumPy's
legacy RandomState, whose stream is frozen, so the file is byte-identical on
every run. The model says nothing sensible; it exists so that a real engine
samples real token ids, including byte tokens that do not form whole UTF-8
characters.
"""

import sys

import numpy as np
import gguf

SEED = 20240601
N_EMBD = 64
N_LAYER = 2
N_HEAD = 4
N_HEAD_KV = 4
N_FF = 128
N_CTX = 4096

CHAT_TEMPLATE = """\
{%- if tools %}
    {{- '<|im_start|>system\\n' }}
    {%- if messages[0]['role'] == 'system' %}
        {{- messages[0]['content'] + '\\n\\n' }}
    {%- endif %}
    {{- "# Tools\\n\\nYou may call one or more functions to assist with the user query.\\n\\nYou are provided with function signatures within <tools></tools> XML tags:\\n<tools>" }}
    {%- for tool in tools %}
        {{- "\\n" }}
        {{- tool | tojson }}
    {%- endfor %}
    {{- "\\n</tools>\\n\\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\\n<tool_call>\\n{\\"name\\": <function-name>, \\"arguments\\": <args-json-object>}\\n</tool_call><|im_end|>\\n" }}
{%- else %}
    {%- if messages[0]['role'] == 'system' %}
        {{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}
    {%- endif %}
{%- endif %}
{%- for message in messages %}
    {%- if (message.role == "user") or (message.role == "system" and not loop.first) or (message.role == "assistant" and not message.tool_calls) %}
        {{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}
    {%- elif message.role == "assistant" %}
        {{- '<|im_start|>' + message.role }}
        {%- if message.content %}
            {{- '\\n' + message.content }}
        {%- endif %}
        {%- for tool_call in message.tool_calls %}
            {%- if tool_call.function is defined %}
                {%- set tool_call = tool_call.function %}
            {%- endif %}
            {{- '\\n<tool_call>\\n{"name": "' }}
            {{- tool_call.name }}
            {{- '", "arguments": ' }}
            {%- if tool_call.arguments is string %}
                {{- tool_call.arguments }}
            {%- else %}
                {{- tool_call.arguments | tojson }}
            {%- endif %}
            {{- '}\\n</tool_call>' }}
        {%- endfor %}
        {{- '<|im_end|>\\n' }}
    {%- elif message.role == "tool" %}
        {%- if (loop.index0 == 0) or (messages[loop.index0 - 1].role != "tool") %}
            {{- '<|im_start|>user' }}
        {%- endif %}
        {{- '\\n<tool_response>\\n' }}
        {{- message.content }}
        {{- '\\n</tool_response>' }}
        {%- if loop.last or (messages[loop.index0 + 1].role != "tool") %}
            {{- '<|im_end|>\\n' }}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\\n' }}
{%- endif %}
"""

WORDS = """the a an is of to and in it that for on with as be at by this you are
hello world tool call name arguments weather city Paris London Berlin today
temperature sunny rain cloudy degrees answer result query search read write file
ok yes no please thanks user assistant system function get set value number
one two three four five six seven eight nine ten""".split()


def vocabulary():
    """Tokens, scores and types in id order."""
    T = gguf.TokenType
    toks, scores, types = [], [], []

    def add(piece, score, kind):
        toks.append(piece)
        scores.append(score)
        types.append(kind)

    add("<unk>", 0.0, T.UNKNOWN)
    add("<s>", 0.0, T.CONTROL)
    add("</s>", 0.0, T.CONTROL)
    add("<|im_start|>", 0.0, T.CONTROL)
    add("<|im_end|>", 0.0, T.CONTROL)
    add("<tool_call>", 0.0, T.USER_DEFINED)
    add("</tool_call>", 0.0, T.USER_DEFINED)
    for b in range(256):
        add("<0x%02X>" % b, 0.0, T.BYTE)
    # Single characters, then words (with and without the SentencePiece
    # space marker). Longer pieces score higher so the tokenizer prefers them.
    chars = [chr(c) for c in range(0x21, 0x7F)] + ["\u2581", "\n"]
    pieces = []
    for c in chars:
        if c not in pieces:
            pieces.append(c)
    for w in WORDS:
        for p in ("\u2581" + w, w):
            if p not in pieces:
                pieces.append(p)
    for p in pieces:
        add(p, -1000.0 + 10.0 * len(p) - 0.001 * len(toks), T.NORMAL)
    return toks, scores, types


def main(out):
    toks, scores, types = vocabulary()
    n_vocab = len(toks)
    rs = np.random.RandomState(SEED)

    def mat(rows, cols, std=0.5):
        return (rs.standard_normal((rows, cols)) * std).astype(np.float32)

    w = gguf.GGUFWriter(out, "llama")
    w.add_name("rolloutledger tiny random llama")
    w.add_context_length(N_CTX)
    w.add_embedding_length(N_EMBD)
    w.add_block_count(N_LAYER)
    w.add_feed_forward_length(N_FF)
    w.add_head_count(N_HEAD)
    w.add_head_count_kv(N_HEAD_KV)
    w.add_rope_dimension_count(N_EMBD // N_HEAD)
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    w.add_vocab_size(n_vocab)

    w.add_tokenizer_model("llama")
    w.add_token_list(toks)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_bos_token_id(1)
    w.add_eos_token_id(4)  # <|im_end|> ends a turn
    w.add_unk_token_id(0)
    w.add_pad_token_id(2)
    w.add_add_bos_token(False)
    w.add_add_eos_token(False)
    w.add_add_space_prefix(False)
    w.add_chat_template(CHAT_TEMPLATE)

    w.add_tensor("token_embd.weight", mat(n_vocab, N_EMBD))
    for i in range(N_LAYER):
        p = "blk.%d." % i
        w.add_tensor(p + "attn_norm.weight", np.ones(N_EMBD, dtype=np.float32))
        w.add_tensor(p + "attn_q.weight", mat(N_EMBD, N_EMBD, 0.2))
        w.add_tensor(p + "attn_k.weight", mat(N_EMBD * N_HEAD_KV // N_HEAD, N_EMBD, 0.2))
        w.add_tensor(p + "attn_v.weight", mat(N_EMBD * N_HEAD_KV // N_HEAD, N_EMBD, 0.2))
        w.add_tensor(p + "attn_output.weight", mat(N_EMBD, N_EMBD, 0.2))
        w.add_tensor(p + "ffn_norm.weight", np.ones(N_EMBD, dtype=np.float32))
        w.add_tensor(p + "ffn_gate.weight", mat(N_FF, N_EMBD, 0.2))
        w.add_tensor(p + "ffn_up.weight", mat(N_FF, N_EMBD, 0.2))
        w.add_tensor(p + "ffn_down.weight", mat(N_EMBD, N_FF, 0.2))
    w.add_tensor("output_norm.weight", np.ones(N_EMBD, dtype=np.float32))
    w.add_tensor("output.weight", mat(n_vocab, N_EMBD, 0.5))

    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: tiny_gguf.py OUT.gguf")
    main(sys.argv[1])
