"""Record what real `vllm serve` (vLLM 0.32) answers to a fixed list of requests, as test data for litevllm's server.

How `tests/data/vllm032_bodies.json` was made (vLLM 0.32.0, CPU build, SmolLM2-135M-Instruct), from /work/main:

    .venv/bin/python -c "from litevllm.bench import vllm_cli; print(vllm_cli('.vllm-venv/bin/python', '/tmp/h'))"
    VLLM_CPU_OMP_THREADS_BIND=0-1 VLLM_CPU_NUM_OF_RESERVED_CPU=0 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 \
      .vllm-venv/bin/python /tmp/h/vllm_cli.py serve MODEL_DIR --port 8147 RUN_A_FLAGS  # see RUN_FLAGS below
    .vllm-venv/bin/python tests/data/record_vllm_bodies.py --run A --base-url http://127.0.0.1:8147 \
      --metrics-out tests/data/vllm032_metrics.txt tests/data/vllm032_bodies.json
    # restart the server with RUN_FLAGS["B"], then
    .vllm-venv/bin/python tests/data/record_vllm_bodies.py --run B --base-url http://127.0.0.1:8147 \
      --model-dir MODEL_DIR tests/data/vllm032_bodies.json

Each entry: name, server_flags (the flags after MODEL_DIR), method, path, request (JSON body or null), status, stream
(whether the answer was an SSE stream), content_type, response (parsed JSON; for SSE the list of parsed `data:` chunks,
"[DONE]" kept as that string; other text as a string; an empty body as null). Lists/dicts longer than 100 items
(vocabulary-sized logprobs) are replaced by {"__len__": N}. A run's entries replace those of the same run in OUT.
"""
import argparse, base64, io, json, os, sys, threading, time
import httpx

MODEL = "SmolLM2-135M-Instruct"
BASE_FLAGS = ["--host", "127.0.0.1", "--port", "8147", "--served-model-name", MODEL, "--dtype", "float32",
              "--max-model-len", "2048", "--gpu-memory-utilization", "0.15", "--seed", "0"]
RUN_FLAGS = dict(A=BASE_FLAGS, B=BASE_FLAGS + [
    "--enable-prompt-tokens-details", "--enable-force-include-usage", "--enable-tokenizer-info-endpoint",
    "--enable-server-load-tracking", "--enable-prompt-embeds", "--max-logprobs", "-1"])
P = "The capital of France is"
CH = [{"role": "user", "content": "Say hi."}]
YN = [{"role": "user", "content": "Reply with one word: yes or no?"}]
TOOL = {"type": "function", "function": {"name": "get_weather", "description": "Get the weather in a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
CONT = [{"role": "user", "content": "What is the capital of France?"},
        {"role": "assistant", "content": "The capital of France is"}]
# ~300 tokens, for prefix caching (usage.prompt_tokens_details.cached_tokens)
LONG = " ".join(f"Item {i}: the quick brown fox jumps over the lazy dog number {i}." for i in range(20))

def cmpl(**kw): return dict(model=MODEL, prompt=P, max_tokens=8, temperature=0, **kw)
def chat(messages=CH, **kw): return dict(model=MODEL, messages=messages, **{"max_tokens": 8, "temperature": 0, **kw})

def shrink(x, limit=100):
    "Replace vocabulary-sized lists/dicts inside `x` by {'__len__': N}."
    if isinstance(x, (list, dict)) and len(x) > limit: return {"__len__": len(x)}
    if isinstance(x, list): return [shrink(v, limit) for v in x]
    if isinstance(x, dict): return {k: shrink(v, limit) for k, v in x.items()}
    return x

def parse_body(text, ctype):
    "Parse a response body: SSE chunks, JSON, text or None."
    if "text/event-stream" in ctype:
        out = []
        for line in text.splitlines():
            if not line.startswith("data:"): continue
            d = line[5:].strip()
            out.append(d if d == "[DONE]" else json.loads(d))
        return True, out
    if not text: return False, None
    try: return False, json.loads(text)
    except ValueError: return False, text

class Recorder:
    def __init__(self, base_url, run):
        self.c, self.run, self.entries = httpx.Client(base_url=base_url, timeout=600), run, []

    def __call__(self, name, method, path, body=None, post=None, raw=None):
        "Send one request and keep its entry; `post` may rewrite the parsed response; `raw`: send these bytes as is."
        assert name not in {e["name"] for e in self.entries}, name
        t = time.time()
        if raw is not None:
            r = self.c.request(method, path, content=raw, headers={"content-type": "application/json"})
            body = raw.decode()
        else: r = self.c.request(method, path, json=body) if body is not None else self.c.request(method, path)
        ctype = r.headers.get("content-type", "")
        stream, resp = parse_body(r.text, ctype)
        resp = shrink(resp)
        if post: resp = post(resp)
        e = dict(name=name, server_flags=RUN_FLAGS[self.run], method=method, path=path, request=body,
                 status=r.status_code, stream=stream, content_type=ctype, response=resp)
        self.entries.append(e)
        print(f"{name:40s} {r.status_code} {time.time()-t:5.1f}s {json.dumps(resp)[:150]}", flush=True)
        return r

def run_a(rec, metrics_out=None):
    G, Po = "GET", "POST"
    # 1. models, routes, version, health
    rec("models", G, "/v1/models")
    rec("model_card", G, f"/v1/models/{MODEL}")
    rec("model_card_missing", G, "/v1/models/nope")
    rec("unknown_route", G, "/v1/nope")
    rec("completions_wrong_method", G, "/v1/completions")
    rec("version", G, "/version")
    rec("health", G, "/health")
    # 2. completions
    C = "/v1/completions"
    rec("cmpl_plain", Po, C, cmpl())
    rec("cmpl_logprobs_2", Po, C, cmpl(logprobs=2))
    rec("cmpl_logprobs_2_token_ids", Po, C, cmpl(logprobs=2, return_tokens_as_token_ids=True))
    rec("cmpl_echo", Po, C, cmpl(echo=True))
    rec("cmpl_return_token_ids", Po, C, cmpl(return_token_ids=True))
    rec("cmpl_n2_t1_seed1", Po, C, {**cmpl(n=2, seed=1), "temperature": 1})
    rec("cmpl_stream", Po, C, cmpl(stream=True))
    rec("cmpl_stream_options_empty", Po, C, cmpl(stream=True, stream_options={}))
    rec("cmpl_stream_include_usage", Po, C, cmpl(stream=True, stream_options={"include_usage": True}))
    rec("cmpl_stream_usage_continuous", Po, C,
        cmpl(stream=True, stream_options={"include_usage": True, "continuous_usage_stats": True}))
    rec("cmpl_stream_continuous_only", Po, C, cmpl(stream=True, stream_options={"continuous_usage_stats": True}))
    rec("cmpl_truncate_prompt_tokens_3", Po, C, cmpl(truncate_prompt_tokens=3))
    rec("cmpl_beam_n2", Po, C, cmpl(use_beam_search=True, n=2))
    rec("cmpl_max_tokens_5000", Po, C, {**cmpl(), "max_tokens": 5000})
    rec("cmpl_logprobs_minus1", Po, C, cmpl(logprobs=-1))
    rec("cmpl_prompt_logprobs_minus1", Po, C, cmpl(prompt_logprobs=-1))
    rec("cmpl_lax_strings", Po, C, dict(model=MODEL, prompt=P, logprobs="true", max_tokens="8", echo="true",
                                        temperature="0"))
    rec("cmpl_lax_logprobs_str", Po, C, cmpl(logprobs="true"))
    rec("cmpl_lax_max_tokens_str", Po, C, {**cmpl(), "max_tokens": "8"})
    rec("cmpl_lax_echo_str", Po, C, cmpl(echo="true"))
    rec("cmpl_lax_temperature_str", Po, C, {**cmpl(), "temperature": "0"})
    rec("cmpl_seed_2e70", Po, C, cmpl(seed=2**70))
    rec("cmpl_seed_minus1", Po, C, cmpl(seed=-1))
    rec("cmpl_logit_bias_oov", Po, C, cmpl(logit_bias={"999999": 1}))
    rec("cmpl_logit_bias_abc", Po, C, cmpl(logit_bias={"abc": 1}))
    rec("cmpl_logit_bias_negative", Po, C, cmpl(logit_bias={"-5": 1}))
    rec("cmpl_prompt_oov_ids", Po, C, {**cmpl(), "prompt": [999999, 1]})
    rec("cmpl_prompt_embeds_no_flag", Po, C, dict(model=MODEL, prompt_embeds="xx", max_tokens=4))
    rec("cmpl_no_prompt", Po, C, dict(model=MODEL, max_tokens=4))
    rec("cmpl_temperature_hot", Po, C, {**cmpl(), "temperature": "hot"})
    rec("cmpl_unknown_field", Po, C, cmpl(foo=1))
    rec("cmpl_suffix", Po, C, cmpl(suffix="x"))
    rec("cmpl_bad_words", Po, C, cmpl(bad_words=["a"]))
    rec("cmpl_stop_token_ids", Po, C, cmpl(stop_token_ids=[2]))
    rec("cmpl_allowed_token_ids", Po, C, cmpl(allowed_token_ids=[1, 2, 3]))
    # extra (not in the brief's list): more validation errors litevllm should answer alike
    rec("x_cmpl_logprobs_numeric_str", Po, C, cmpl(logprobs="2"))
    rec("x_cmpl_logprobs_bool", Po, C, cmpl(logprobs=True))
    rec("x_cmpl_max_tokens_float", Po, C, {**cmpl(), "max_tokens": 8.0})
    rec("x_cmpl_max_tokens_float_frac", Po, C, {**cmpl(), "max_tokens": 8.5})
    rec("x_cmpl_stream_str", Po, C, cmpl(stream="true"))
    rec("x_cmpl_model_nope", Po, C, {**cmpl(), "model": "nope"})
    rec("x_cmpl_no_model", Po, C, {k: v for k, v in cmpl().items() if k != "model"})
    rec("x_cmpl_max_tokens_0", Po, C, {**cmpl(), "max_tokens": 0})
    rec("x_cmpl_max_tokens_minus1", Po, C, {**cmpl(), "max_tokens": -1})
    rec("x_cmpl_n_0", Po, C, cmpl(n=0))
    rec("x_cmpl_temperature_minus1", Po, C, {**cmpl(), "temperature": -1})
    rec("x_cmpl_top_p_0", Po, C, cmpl(top_p=0))
    rec("x_cmpl_top_k_minus2", Po, C, cmpl(top_k=-2))
    rec("x_cmpl_prompt_empty", Po, C, {**cmpl(), "prompt": ""})
    rec("x_cmpl_prompt_too_long", Po, C, {**cmpl(), "prompt": [1] * 2100})
    rec("x_cmpl_prompt_fills_context", Po, C, {**cmpl(), "prompt": [1] * 2045})
    rec("x_cmpl_prompt_list_of_2", Po, C, {**cmpl(), "prompt": [P, "Hello"]})
    rec("x_cmpl_bad_json", Po, C, raw=b'{"model": "x", "prompt": ')
    rec("x_cmpl_body_is_list", Po, C, [1, 2])
    # 3. chat completions
    H = "/v1/chat/completions"
    rec("chat_plain", Po, H, chat())
    rec("chat_eos", Po, H, chat(YN, max_tokens=64))
    rec("chat_eos_stream", Po, H, chat(YN, max_tokens=64, stream=True))
    rec("chat_stream_stop_dot", Po, H, chat(YN, max_tokens=64, stream=True, stop=["."]))
    rec("chat_stream_return_token_ids", Po, H, chat(stream=True, return_token_ids=True))
    rec("chat_stream_include_usage", Po, H, chat(stream=True, stream_options={"include_usage": True}))
    rec("chat_logprobs_top2", Po, H, chat(logprobs=True, top_logprobs=2))
    rec("chat_logprobs_top2_token_ids", Po, H, chat(logprobs=True, top_logprobs=2, return_tokens_as_token_ids=True))
    rec("chat_top_logprobs_minus1", Po, H, chat(logprobs=True, top_logprobs=-1))
    rec("chat_truncate_prompt_tokens_5", Po, H, chat(truncate_prompt_tokens=5))
    rec("chat_beam_n2", Po, H, chat(use_beam_search=True, n=2))
    rec("chat_lax_logprobs_str", Po, H, chat(logprobs="true"))
    rec("chat_tools_choice_none", Po, H, chat(tools=[TOOL], tool_choice="none"))
    rec("chat_seed_2e70", Po, H, chat(seed=2**70))
    rec("chat_continue_final_message", Po, H, chat(CONT, continue_final_message=True, add_generation_prompt=False))
    rec("x_chat_model_nope", Po, H, {**chat(), "model": "nope"})
    rec("x_chat_empty_messages", Po, H, chat([]))
    rec("x_chat_top_logprobs_no_logprobs", Po, H, chat(top_logprobs=2))
    rec("x_chat_top_logprobs_21", Po, H, chat(logprobs=True, top_logprobs=21))
    rec("x_chat_max_completion_tokens", Po, H, {**chat(), "max_completion_tokens": 3})
    rec("x_chat_n2_stream", Po, H, {**chat(n=2, seed=1, stream=True), "temperature": 1})
    rec("x_chat_bad_role", Po, H, chat([{"role": "robot", "content": "hi"}]))
    # 4. tokenize / detokenize
    T = "/tokenize"
    rec("tokenize_prompt", Po, T, dict(model=MODEL, prompt="Hello world"))
    rec("tokenize_no_special", Po, T, dict(model=MODEL, prompt="Hello world", add_special_tokens=False))
    rec("tokenize_token_strs", Po, T, dict(model=MODEL, prompt="Hello world", return_token_strs=True))
    rec("tokenize_messages", Po, T, dict(model=MODEL, messages=CH))
    rec("tokenize_messages_no_gen_prompt", Po, T, dict(model=MODEL, messages=CH, add_generation_prompt=False))
    rec("tokenize_messages_continue", Po, T, dict(model=MODEL, messages=CONT, continue_final_message=True,
                                                  add_generation_prompt=False))
    rec("tokenize_messages_tools", Po, T, dict(model=MODEL, messages=CH, tools=[TOOL]))
    rec("tokenize_truncate_2", Po, T, dict(model=MODEL, prompt="Hello world, how are you?", truncate_prompt_tokens=2))
    rec("detokenize", Po, "/detokenize", dict(model=MODEL, tokens=[1, 2, 3]))
    rec("detokenize_oov", Po, "/detokenize", dict(model=MODEL, tokens=[999999]))
    # 5. invocations, optional endpoints, metrics
    rec("invocations_completion", Po, "/invocations", cmpl())
    rec("invocations_chat", Po, "/invocations", chat())
    rec("invocations_unknown", Po, "/invocations", dict(foo=1))
    rec("tokenizer_info_no_flag", G, "/tokenizer_info")
    rec("load_no_flag", G, "/load")
    def families(text):
        if metrics_out:
            with open(metrics_out, "w") as f: f.write(text)
        return dict(__text_file__=os.path.basename(metrics_out) if metrics_out else None,
                    type_lines=[l for l in text.splitlines() if l.startswith("# TYPE")])
    rec("metrics", G, "/metrics", post=families)

def prompt_embeds_b64(model_dir, token_ids, shape=None, dtype="float32"):
    "base64 of a torch.save'd float32 tensor: the model's input embeddings of `token_ids` (or zeros of `shape`)."
    import torch
    if shape is not None: t = torch.zeros(shape, dtype=getattr(torch, dtype))
    else:
        from safetensors import safe_open
        with safe_open(os.path.join(model_dir, "model.safetensors"), "pt") as f:
            t = f.get_tensor("model.embed_tokens.weight")[torch.tensor(token_ids)].to(torch.float32).contiguous()
    buf = io.BytesIO(); torch.save(t, buf)
    return base64.b64encode(buf.getvalue()).decode()

def run_b(rec, model_dir):
    G, Po, C, H = "GET", "POST", "/v1/completions", "/v1/chat/completions"
    rec("B_load_idle", G, "/load")
    rec("B_tokenizer_info", G, "/tokenizer_info")
    rec("B_cmpl_cache_1", Po, C, dict(model=MODEL, prompt=LONG, max_tokens=4, temperature=0))
    rec("B_cmpl_cache_2", Po, C, dict(model=MODEL, prompt=LONG, max_tokens=4, temperature=0))
    rec("B_chat_cache_1", Po, H, chat([{"role": "user", "content": LONG}], max_tokens=4))
    rec("B_chat_cache_2", Po, H, chat([{"role": "user", "content": LONG}], max_tokens=4))
    rec("B_cmpl_stream_forced_usage", Po, C, cmpl(stream=True))
    rec("B_chat_stream_forced_usage", Po, H, chat(stream=True))
    rec("B_cmpl_stream_include_usage_false", Po, C, cmpl(stream=True, stream_options={"include_usage": False}))
    rec("B_chat_stream_include_usage_false", Po, H, chat(stream=True, stream_options={"include_usage": False}))
    rec("B_cmpl_logprobs_minus1", Po, C, {**cmpl(logprobs=-1), "max_tokens": 1})
    rec("B_cmpl_prompt_logprobs_minus1", Po, C, {**cmpl(prompt_logprobs=-1), "max_tokens": 1})
    rec("B_chat_top_logprobs_minus1", Po, H, chat(logprobs=True, top_logprobs=-1, max_tokens=1))
    ids = [504, 3575, 282, 4649, 314]  # "The capital of France is" in SmolLM2's tokenizer
    emb = prompt_embeds_b64(model_dir, ids)
    rec("B_prompt_embeds", Po, C, dict(model=MODEL, prompt_embeds=emb, max_tokens=6, temperature=0))
    rec("B_prompt_embeds_same_ids", Po, C, dict(model=MODEL, prompt=ids, max_tokens=6, temperature=0))
    rec("B_prompt_embeds_stream", Po, C, dict(model=MODEL, prompt_embeds=emb, max_tokens=6, temperature=0,
                                              stream=True))
    rec("B_prompt_embeds_logprobs_echo", Po, C, dict(model=MODEL, prompt_embeds=emb, max_tokens=2, temperature=0,
                                                     logprobs=1, echo=True))
    rec("B_prompt_embeds_logprobs", Po, C, dict(model=MODEL, prompt_embeds=emb, max_tokens=2, temperature=0,
                                                logprobs=1, return_token_ids=True))
    rec("B_prompt_embeds_wrong_dim", Po, C, dict(model=MODEL, prompt_embeds=prompt_embeds_b64(None, None, (5, 100)),
                                                 max_tokens=6, temperature=0))
    rec("B_prompt_embeds_1d", Po, C, dict(model=MODEL, prompt_embeds=prompt_embeds_b64(None, None, (576,)),
                                          max_tokens=6, temperature=0))
    rec("B_prompt_embeds_bad_b64", Po, C, dict(model=MODEL, prompt_embeds="xx", max_tokens=4))
    # a different text prompt, so the order of the two choices shows which comes first
    rec("B_prompt_and_embeds", Po, C, dict(model=MODEL, prompt="Hello", prompt_embeds=emb, max_tokens=6,
                                           temperature=0))
    rec("B_prompt_embeds_list_of_2", Po, C, dict(model=MODEL, prompt_embeds=[emb, emb], max_tokens=2, temperature=0))
    rec("B_prompt_embeds_3d", Po, C, dict(model=MODEL, prompt_embeds=prompt_embeds_b64(None, None, (1, 5, 576)),
                                          max_tokens=2, temperature=0))
    rec("B_prompt_embeds_int_dtype", Po, C, dict(model=MODEL, prompt_embeds=prompt_embeds_b64(None, None, (5, 576),
                                                 dtype="int64"), max_tokens=2, temperature=0))
    rec("B_prompt_embeds_not_tensor", Po, C, dict(model=MODEL, prompt_embeds=base64.b64encode(b"hello").decode(),
                                                  max_tokens=2))
    rec("B_prompt_embeds_prompt_logprobs", Po, C, dict(model=MODEL, prompt_embeds=emb, max_tokens=2,
                                                       prompt_logprobs=1))
    # extra (not in the brief's list); these do not depend on run B's flags
    rec("B_cmpl_truncate_minus1", Po, C, cmpl(truncate_prompt_tokens=-1, return_token_ids=True))
    rec("B_cmpl_truncate_3_right", Po, C, cmpl(truncate_prompt_tokens=3, truncation_side="right",
                                               return_token_ids=True))
    rec("B_cmpl_truncate_3_default", Po, C, cmpl(truncate_prompt_tokens=3, return_token_ids=True))
    rec("B_cmpl_truncate_5000", Po, C, cmpl(truncate_prompt_tokens=5000))
    rec("B_chat_truncate_5000", Po, H, chat(truncate_prompt_tokens=5000))
    rec("B_cmpl_truncate_minus2", Po, C, cmpl(truncate_prompt_tokens=-2))
    rec("B_invocations_unmatched", Po, "/invocations", dict(prompt={"a": 1}))
    rec("B_invocations_bad_json", Po, "/invocations", raw=b'{"prompt": ')
    rec("B_ping", G, "/ping")
    rec("B_tokenize_prompt_logprobs_field", Po, "/tokenize", dict(model=MODEL, prompt="Hello", foo=1))
    rec("B_detokenize_negative", Po, "/detokenize", dict(model=MODEL, tokens=[-1]))
    rec("B_chat_stream_continuous_usage", Po, H, chat(stream=True, stream_options={"include_usage": True,
                                                                                   "continuous_usage_stats": True}))
    # /load while a request runs
    t = threading.Thread(target=lambda: httpx.post(rec.c.base_url.join(C), timeout=600,
                                                   json=dict(model=MODEL, prompt=P, max_tokens=200, temperature=0,
                                                             ignore_eos=True)))
    t.start(); time.sleep(1.5)
    rec("B_load_busy", G, "/load")
    t.join()
    rec("B_load_after", G, "/load")

def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out")
    ap.add_argument("--base-url", default="http://127.0.0.1:8147")
    ap.add_argument("--run", choices=["A", "B"], default="A")
    ap.add_argument("--model-dir", help="model folder (run B: prompt embeddings from its embed_tokens weights)")
    ap.add_argument("--metrics-out", help="run A: where to write the whole /metrics text")
    a = ap.parse_args()
    rec = Recorder(a.base_url, a.run)
    if a.run == "A": run_a(rec, a.metrics_out)
    else: run_b(rec, a.model_dir)
    old = json.load(open(a.out)) if os.path.exists(a.out) else []
    keep = [e for e in old if e["server_flags"] != RUN_FLAGS[a.run]]
    with open(a.out, "w") as f: json.dump(keep + rec.entries, f, indent=1, ensure_ascii=False)
    print(f"{len(rec.entries)} entries (run {a.run}) -> {a.out}")

if __name__ == "__main__": main()
