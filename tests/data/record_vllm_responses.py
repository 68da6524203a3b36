"""Record what real `vllm serve` (vLLM 0.32) answers on /v1/responses, as test data for litevllm.responses.

How `tests/data/vllm032_responses.json` was made (vLLM 0.32.0, CPU build, SmolLM2-135M-Instruct), from /work/main:

    .venv/bin/python tests/data/record_vllm_responses.py tests/data/vllm032_responses.json

The script starts `vllm serve` twice with .vllm-venv's python (float32, max-model-len 2048, as record_vllm_bodies.py):
run "plain" with vLLM's defaults (VLLM_ENABLE_RESPONSES_API_STORE unset: `store` is ignored), and run "store_tools" with
VLLM_ENABLE_RESPONSES_API_STORE=1, `--enable-auto-tool-choice --tool-call-parser hermes` and a ChatML chat template that
renders tools (TOOL_TEMPLATE below). Each entry: name, run, method, path, request, status, stream, response (parsed JSON;
for SSE the list of `{"event": ..., "data": ...}` records). Ids and timestamps are kept as vLLM wrote them.
"""
import argparse, json, os, subprocess, sys, tempfile, time
from pathlib import Path
import httpx

MODEL = "SmolLM2-135M-Instruct"
MODEL_DIR = Path.home()/".cache/litevllm/models"/MODEL
PORT = 8149
BASE_FLAGS = ["--host", "127.0.0.1", "--port", str(PORT), "--served-model-name", MODEL, "--dtype", "float32",
              "--max-model-len", "2048", "--gpu-memory-utilization", "0.15", "--seed", "0"]
TOOL_TEMPLATE = r"""{%- if tools %}<|im_start|>system
{% if messages[0].role == 'system' %}{{ messages[0].content }}

{% endif %}You can call functions. The functions are in <tools></tools>:
<tools>
{% for t in tools %}{{ t | tojson }}
{% endfor %}</tools>
To call one, answer with <tool_call>{"name": <name>, "arguments": <arguments>}</tool_call>.<|im_end|>
{% elif messages[0].role != 'system' %}<|im_start|>system
You are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>
{% endif %}
{%- for m in messages %}{% if m.role == 'system' %}{% if not tools %}<|im_start|>system
{{ m.content }}<|im_end|>
{% endif %}{% elif m.role == 'tool' %}<|im_start|>user
<tool_response>
{{ m.content }}
</tool_response><|im_end|>
{% elif m.role == 'assistant' and m.tool_calls %}<|im_start|>assistant
{% if m.content %}{{ m.content }}
{% endif %}{% for tc in m.tool_calls %}<tool_call>{"name": "{{ tc.function.name }}", "arguments": {{ tc.function.arguments }}}</tool_call>
{% endfor %}<|im_end|>
{% else %}<|im_start|>{{ m.role }}
{{ m.content }}<|im_end|>
{% endif %}{% endfor %}
{%- if add_generation_prompt %}<|im_start|>assistant
{% endif %}"""

WEATHER = {"type": "function", "name": "get_weather", "description": "Get the weather in a city.",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}
TIME = {"type": "function", "name": "get_time", "description": "Get the time in a time zone.",
        "parameters": {"type": "object", "properties": {"zone": {"type": "string"}}, "required": ["zone"]}}

def resp(**kw): return {"model": MODEL, "temperature": 0, "max_output_tokens": 8, **kw}

def parse_sse(text):
    "SSE records as [{'event': name, 'data': parsed}]."
    out, event = [], None
    for line in text.splitlines():
        if line.startswith("event:"): event = line[6:].strip()
        elif line.startswith("data:"):
            d = line[5:].strip()
            out.append(dict(event=event, data=d if d == "[DONE]" else json.loads(d))); event = None
    return out

class Recorder:
    def __init__(self, run):
        self.c, self.run, self.entries = httpx.Client(base_url=f"http://127.0.0.1:{PORT}", timeout=600), run, []

    def __call__(self, name, method, path, body=None, params=None):
        t = time.time()
        r = self.c.request(method, path, json=body, params=params)
        stream = "text/event-stream" in r.headers.get("content-type", "")
        data = parse_sse(r.text) if stream else (r.json() if r.text else None)
        self.entries.append(dict(name=name, run=self.run, method=method, path=path, params=params, request=body,
                                 status=r.status_code, stream=stream, response=data))
        print(f"{self.run:12s} {name:36s} {r.status_code} {time.time()-t:5.1f}s {json.dumps(data)[:140]}", flush=True)
        return data

def run_plain(rec):
    R = "/v1/responses"
    rec("text", "POST", R, resp(input="Say hi."))
    rec("text_completed", "POST", R, resp(input="Say hi.", max_output_tokens=200))
    rec("stream_completed", "POST", R, resp(input="Say hi.", max_output_tokens=200, stream=True))
    rec("logprobs", "POST", R, resp(input="Say hi.", max_output_tokens=3, include=["message.output_text.logprobs"], top_logprobs=2))
    rec("text_format_json", "POST", R, resp(input="Give a JSON object with a key a.", max_output_tokens=20,
                                            text={"format": {"type": "json_schema", "name": "obj", "strict": True, "schema": {
                                                "type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}}}))
    rec("items_instructions", "POST", R, resp(input=[{"role": "user", "content": "Say hi."}], instructions="Answer in French."))
    rec("input_text_parts", "POST", R, resp(input=[{"type": "message", "role": "user",
                                                   "content": [{"type": "input_text", "text": "Say hi."}]}]))
    rec("max_output_tokens_2", "POST", R, resp(input="Tell me a long story.", max_output_tokens=2))
    rec("stream", "POST", R, resp(input="Say hi.", stream=True))
    rec("store_default_off", "POST", R, resp(input="Say hi."))
    rec("get_after_store_off", "GET", f"{R}/{rec.entries[-1]['response']['id']}")
    rec("previous_unknown", "POST", R, resp(input="And then?", previous_response_id="resp_nope"))
    rec("get_unknown", "GET", f"{R}/resp_nope")
    rec("cancel_unknown", "POST", f"{R}/resp_nope/cancel")
    rec("delete_unknown", "DELETE", f"{R}/resp_nope")
    rec("no_input", "POST", R, dict(model=MODEL))
    rec("bad_temperature", "POST", R, resp(input="hi", temperature="hot"))
    rec("bad_max_output_tokens", "POST", R, resp(input="hi", max_output_tokens="many"))
    rec("bad_item_type", "POST", R, resp(input=[{"type": "nope", "x": 1}]))
    rec("required_without_tools", "POST", R, resp(input="hi", tool_choice="required"))
    rec("background_store_off", "POST", R, resp(input="hi", background=True))
    rec("background_store_false", "POST", R, resp(input="hi", background=True, store=False))
    rec("unknown_model", "POST", R, resp(input="hi", model="nope"))
    rec("max_output_tokens_5000", "POST", R, resp(input="hi", max_output_tokens=5000))
    rec("tools_no_parser_required", "POST", R, resp(input="Weather in Paris?", tools=[WEATHER], tool_choice="required"))

def run_store_tools(rec):
    R = "/v1/responses"
    first = rec("store_first", "POST", R, resp(input="My name is Ada. Say hi."))
    rec("store_get", "GET", f"{R}/{first['id']}")
    rec("store_cancel_finished", "POST", f"{R}/{first['id']}/cancel")
    rec("store_second", "POST", R, resp(input="What is my name?", previous_response_id=first["id"], instructions="Be brief."))
    rec("store_false", "POST", R, resp(input="hi", store=False))
    rec("store_false_get", "GET", f"{R}/{rec.entries[-1]['response']['id']}")
    st = rec("store_stream", "POST", R, resp(input="Say hi.", stream=True))
    rid = next(e["data"]["response"]["id"] for e in st if e["data"] != "[DONE]" and e["data"]["type"] == "response.created")
    rec("store_stream_get", "GET", f"{R}/{rid}")
    bg = rec("background", "POST", R, resp(input="Say hi.", background=True))
    for _ in range(100):
        got = rec.c.get(f"{R}/{bg['id']}").json()
        if got["status"] not in ("queued", "in_progress"): break
        time.sleep(0.2)
    rec("background_get_done", "GET", f"{R}/{bg['id']}")
    bg2 = rec("background_long", "POST", R, resp(input="Tell me a long story.", background=True, max_output_tokens=1500))
    rec("background_cancel", "POST", f"{R}/{bg2['id']}/cancel")
    rec("background_get_cancelled", "GET", f"{R}/{bg2['id']}")
    rec("tool_required", "POST", R, resp(input="What is the weather in Paris?", tools=[WEATHER, TIME], tool_choice="required",
                                         max_output_tokens=200))
    named = rec("tool_named", "POST", R, resp(input="What is the weather in Paris?", tools=[WEATHER, TIME],
                                              tool_choice={"type": "function", "name": "get_weather"}, max_output_tokens=200))
    rec("tool_named_stream", "POST", R, resp(input="What is the weather in Paris?", tools=[WEATHER, TIME], stream=True,
                                             tool_choice={"type": "function", "name": "get_weather"}, max_output_tokens=200))
    rec("tool_required_stream", "POST", R, resp(input="What is the weather in Paris?", tools=[WEATHER, TIME], stream=True,
                                                tool_choice="required", max_output_tokens=200))
    call = next((o for o in named["output"] if o["type"] == "function_call"),  # a fixed call if the model ran out of tokens
                dict(call_id="call_0", name="get_weather", arguments='{"city": "Paris"}'))
    rec("tool_output_roundtrip", "POST", R, resp(input=[
        {"role": "user", "content": "What is the weather in Paris?"},
        {"type": "function_call", "call_id": call["call_id"], "name": call["name"], "arguments": call["arguments"]},
        {"type": "function_call_output", "call_id": call["call_id"], "output": "Sunny, 21 C"}], tools=[WEATHER],
        max_output_tokens=20))
    rec("tool_output_previous", "POST", R, resp(input=[
        {"type": "function_call_output", "call_id": call["call_id"], "output": "Sunny, 21 C"}], tools=[WEATHER],
        previous_response_id=named["id"], max_output_tokens=20))
    rec("tool_choice_unknown_name", "POST", R, resp(input="hi", tools=[WEATHER], tool_choice={"type": "function", "name": "nope"}))

def serve(run, template):
    from litevllm.bench import vllm_cli, vllm_env
    folder = tempfile.mkdtemp()
    flags = BASE_FLAGS + (["--enable-auto-tool-choice", "--tool-call-parser", "hermes", "--chat-template", template]
                          if run == "store_tools" else [])
    env = {k: v for k, v in vllm_env(2).items() if k != "VLLM_ENABLE_RESPONSES_API_STORE"}
    if run == "store_tools": env["VLLM_ENABLE_RESPONSES_API_STORE"] = "1"
    p = subprocess.Popen([*vllm_cli(".vllm-venv/bin/python", folder), "serve", str(MODEL_DIR), *flags], env=env,
                         stdout=open(f"/tmp/vllm_responses_{run}.log", "w"), stderr=subprocess.STDOUT)
    for _ in range(600):
        try:
            if httpx.get(f"http://127.0.0.1:{PORT}/health", timeout=2).status_code == 200: return p
        except httpx.HTTPError: pass
        if p.poll() is not None: raise RuntimeError(f"vllm serve exited: see /tmp/vllm_responses_{run}.log")
        time.sleep(1)
    p.terminate(); raise RuntimeError("vllm serve did not start")

def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out")
    ap.add_argument("--runs", nargs="+", default=["plain", "store_tools"])
    a = ap.parse_args()
    template = Path(tempfile.mkdtemp())/"tool_chatml.jinja"
    template.write_text(TOOL_TEMPLATE)
    entries = json.load(open(a.out)) if os.path.exists(a.out) else []
    for run in a.runs:
        p = serve(run, str(template))
        try:
            rec = Recorder(run)
            (run_plain if run == "plain" else run_store_tools)(rec)
        finally:
            p.terminate(); p.wait(60)
        entries = [e for e in entries if e["run"] != run] + rec.entries
        with open(a.out, "w") as f: json.dump(entries, f, indent=1, ensure_ascii=False)
    print(f"{len(entries)} entries -> {a.out}")

if __name__ == "__main__": main()
