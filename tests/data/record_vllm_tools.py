"""Record what real `vllm serve` 0.32 answers to tool-calling and reasoning requests (issue 28), as test data.

How `tests/data/vllm032_tools.json` was made (vLLM 0.32.0, CPU build, SmolLM2-135M-Instruct, float32), from /work/main:

    .vllm-venv/bin/python tests/data/record_vllm_tools.py --model-dir MODEL_DIR tests/data/vllm032_tools.json

It starts `vllm serve` twice on a free port (run T: `--enable-auto-tool-choice --tool-call-parser hermes --chat-template
litevllm/chat_templates/tool_chat_template_chatml.jinja`), sends each request, and writes entries
{name, run, request, status, stream, response} (SSE answers as the list of parsed chunks).
"""
import argparse, json, os, socket, subprocess, sys, time
from pathlib import Path
import httpx

MODEL = "SmolLM2-135M-Instruct"
ROOT = Path(__file__).resolve().parents[2]
TEMPLATE = str(ROOT / "litevllm" / "chat_templates" / "tool_chat_template_chatml.jinja")
WEATHER = {"type": "function", "function": {"name": "get_weather", "description": "Current weather in a city",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}, "unit": {"type": "string", "enum": ["C", "F"]}},
                          "required": ["city", "unit"], "additionalProperties": False}}}
TIME = {"type": "function", "function": {"name": "get_time", "description": "The time in a time zone",
        "parameters": {"type": "object", "properties": {"tz": {"type": "string"}}, "required": ["tz"], "additionalProperties": False}}}
ASK = [{"role": "user", "content": "What is the weather in Paris, in Celsius?"}]
CALL = {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris", "unit": "C"}'}}
TURNS = ASK + [{"role": "assistant", "content": None, "tool_calls": [CALL]},
               {"role": "tool", "tool_call_id": "call_1", "content": '{"temperature": 21}'}]
NAMED = {"type": "function", "function": {"name": "get_weather"}}

def chat(**kw): return dict(model=MODEL, messages=ASK, temperature=0, max_tokens=60) | kw

RUNS = {
    "T": (["--enable-auto-tool-choice", "--tool-call-parser", "hermes", "--chat-template", TEMPLATE], [
        ("required", chat(tools=[WEATHER, TIME], tool_choice="required")),
        ("required_stream", chat(tools=[WEATHER, TIME], tool_choice="required", stream=True)),
        ("required_one", chat(tools=[WEATHER, TIME], tool_choice="required", parallel_tool_calls=False)),
        ("named", chat(tools=[WEATHER, TIME], tool_choice=NAMED)),
        ("named_stream", chat(tools=[WEATHER, TIME], tool_choice=NAMED, stream=True)),
        ("auto", chat(tools=[WEATHER, TIME], max_tokens=40)),
        ("auto_stream", chat(tools=[WEATHER, TIME], max_tokens=40, stream=True)),
        ("none", chat(tools=[WEATHER], tool_choice="none", max_tokens=8)),
        ("turns", chat(messages=TURNS, tools=[WEATHER], max_tokens=12)),
        ("turns_stream", chat(messages=TURNS, tools=[WEATHER], max_tokens=12, stream=True)),
        ("err_empty_tools", chat(tools=[])),
        ("err_choice_without_tools", chat(tool_choice="required")),
        ("err_bad_choice", chat(tools=[WEATHER], tool_choice="sometimes")),
        ("err_unknown_name", chat(tools=[WEATHER], tool_choice={"type": "function", "function": {"name": "nope"}})),
        ("err_choice_no_function", chat(tools=[WEATHER], tool_choice={"type": "function"})),
        ("err_params_not_dict", chat(tools=[{"type": "function", "function": {"name": "f", "parameters": "x"}}])),
        ("err_no_name", chat(tools=[{"type": "function", "function": {"parameters": {"type": "object"}}}])),
        ("dup_names", chat(tools=[WEATHER, WEATHER], max_tokens=4)),
        ("params_type_string", chat(tools=[{"type": "function", "function": {"name": "f", "parameters": {"type": "string"}}}],
                                    tool_choice="required", max_tokens=8)),
        ("so_and_named", chat(tools=[WEATHER], tool_choice=NAMED, structured_outputs={"regex": "a+"})),
    ]),
    # run R cannot be recorded on the default model: vLLM 0.32's deepseek_r1 parser refuses to start on a tokenizer without
    # <think> / </think> tokens ("could not locate think start/end tokens"); litevllm's works there (20_reasoning), and
    # tests/data/vllm032_reasoning.json holds vLLM's parser-level answers with those tokens added.
    "R": (["--reasoning-parser", "deepseek_r1"], [
        ("reasoning", chat(max_tokens=12)),
        ("reasoning_stream", chat(max_tokens=12, stream=True)),
        ("reasoning_hidden", chat(max_tokens=12, include_reasoning=False)),
        ("reasoning_json", chat(max_tokens=20, response_format={"type": "json_object"})),
    ]),
}

def free_port():
    with socket.socket() as s: s.bind(("127.0.0.1", 0)); return s.getsockname()[1]

def parse_body(r):
    if "text/event-stream" in r.headers.get("content-type", ""):
        out = []
        for line in r.text.splitlines():
            if line.startswith("data:"):
                d = line[5:].strip(); out.append(d if d == "[DONE]" else json.loads(d))
        return True, out
    try: return False, r.json()
    except ValueError: return False, r.text

def main():
    ap = argparse.ArgumentParser(); ap.add_argument("out"); ap.add_argument("--model-dir", required=True); ap.add_argument("--runs", default="T")
    a = ap.parse_args()
    sys.path.insert(0, str(ROOT))
    entries = json.loads(Path(a.out).read_text()) if Path(a.out).exists() else []
    for run in a.runs:
        flags, reqs = RUNS[run]
        port = free_port()
        env = dict(os.environ, VLLM_CPU_OMP_THREADS_BIND="0-1", VLLM_CPU_NUM_OF_RESERVED_CPU="0", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
        cli = subprocess.run([str(ROOT / ".venv/bin/python"), "-c", "import json; from litevllm.bench import vllm_cli; print(json.dumps(vllm_cli('"
                              + str(ROOT / ".vllm-venv/bin/python") + "', '/tmp/rec_tools')))"], capture_output=True, text=True, check=True).stdout.strip()
        cmd = [*json.loads(cli), "serve", a.model_dir, "--host", "127.0.0.1", "--port", str(port), "--served-model-name", MODEL,
               "--dtype", "float32", "--max-model-len", "2048", "--gpu-memory-utilization", "0.15", "--seed", "0", *flags]
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=open(f"/tmp/rec_tools_{run}.log", "w"))
        base = f"http://127.0.0.1:{port}"
        try:
            for _ in range(600):
                try:
                    if httpx.get(f"{base}/health", timeout=1).status_code == 200: break
                except httpx.HTTPError: pass
                if proc.poll() is not None: raise SystemExit(f"vllm exited: see /tmp/rec_tools_{run}.log")
                time.sleep(1)
            entries = [e for e in entries if e["run"] != run]
            for name, body in reqs:
                r = httpx.post(f"{base}/v1/chat/completions", json=body, timeout=600)
                stream, resp = parse_body(r)
                entries.append(dict(name=name, run=run, server_flags=[f for f in flags if f != TEMPLATE], request=body,
                                    status=r.status_code, stream=stream, response=resp))
                print(run, name, r.status_code, flush=True)
        finally:
            proc.terminate(); proc.wait(60)
    Path(a.out).write_text(json.dumps(entries, indent=1) + "\n")

if __name__ == "__main__": main()
