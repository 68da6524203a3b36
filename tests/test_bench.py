"`litevllm bench`: the workload is reproducible, both sides count the same tokens, the reports carry the machine; no timing is asserted."
import asyncio, contextlib, json, os, socket, sys, threading, time
from pathlib import Path
import pytest, torch, uvicorn
from fastapi import FastAPI
from fastapi.responses import StreamingResponse
from litevllm.bench import make_workload, run_hf, run_litevllm, load_hf_model, hf_batches, run_serve_bench, run_async
from litevllm.bench import (add_ratios, parse_vllm_bench_output, serve_argvs, server_process, free_port, port_in_use, format_table,
                            COMPARE_COLS, vllm_bench_argv)
from litevllm.cli import main, make_parser
from litevllm.config import platform_dtypes
from litevllm.models.llama import save_random_model

ARGS = ["--workload", "custom", "--num-requests", "4", "--input-len-range", "4", "24", "--output-len-range", "3", "9", "--max-model-len", "64"]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory): return save_random_model(tmp_path_factory.mktemp("tiny"), "llama")


def test_workload_reproducible():
    a, b = make_workload("cpu-small"), make_workload("cpu-small")
    assert a.prompt_token_ids == b.prompt_token_ids and a.max_tokens == b.max_tokens
    assert make_workload("custom", seed=3, num_requests=5).max_tokens == make_workload("custom", seed=3, num_requests=5).max_tokens
    assert make_workload("custom", seed=3).max_tokens != a.max_tokens
    assert (a.num_requests, a.temperature, len(make_workload("nano").max_tokens)) == (32, 0.6, 256)
    assert all(64 <= len(p) <= 512 for p in a.prompt_token_ids) and all(32 <= m <= 256 for m in a.max_tokens)


def test_same_token_counts_both_sides(tiny):
    from litevllm import LLM
    wl = make_workload("custom", num_requests=5, input_len_range=(4, 20), output_len_range=(2, 9), seed=1)
    lv = run_litevllm(LLM(str(tiny), max_model_len=64, max_num_seqs=2), wl)
    hf = run_hf(load_hf_model(tiny, torch.float32), wl, batch_size=3)
    assert lv["per_request_tokens"] == hf["per_request_tokens"] == wl.max_tokens
    assert hf["generated_tokens"] == sum(len(b) * max(wl.max_tokens[i] for i in b) for b in hf_batches(wl, 3))
    assert lv["batch"] == 2 and hf["batch"] == 3


def test_cli_throughput_json(tiny, tmp_path, capsys):
    out = tmp_path/"t.json"
    assert main(["bench", "throughput", "--model", str(tiny), *ARGS, "--baseline", "hf", "--hf-batch", "2", "4", "--breakdown",
                 "--output-json", str(out)]) == 0
    rep = json.loads(out.read_text())
    assert [r["engine"] for r in rep["results"]] == ["transformers", "transformers", "litevllm"]
    assert len({r["output_tokens"] for r in rep["results"]}) == 1
    assert all(r["litevllm_speedup"] > 0 for r in rep["results"][:2])
    assert {"platform", "cpu_model", "cpu_isa", "cpu_count", "python", "torch", "transformers", "litevllm", "date"} <= set(rep["machine"])
    from litevllm.config import cpu_info
    assert rep["machine"]["cpu_isa"] == cpu_info().isa and all(r["cpu"] == cpu_info().isa for r in rep["results"])
    # dtype "auto": the platform's preferred dtype for this float32 checkpoint (float32 where the CPU emulates bf16)
    assert rep["dtype"] == str(platform_dtypes(torch.device("cpu"))[0]) and rep["device"] == "cpu" and rep["settings"]["hf_batch"] == [2, 4]
    assert {r["phase"] for r in rep["breakdown_all"]} >= {"schedule", "prepare", "forward", "sample", "update", "output"}
    printed = capsys.readouterr().out
    assert "litevllm_speedup" in printed and f"CPU: {cpu_info()}" in printed


def test_cli_latency(tiny, tmp_path):
    out = tmp_path/"l.json"
    assert main(["bench", "latency", "--model", str(tiny), "--prompt-lens", "4", "12", "--batch-sizes", "1", "2", "--output-len", "3",
                 "--max-model-len", "64", "--output-json", str(out)]) == 0
    rows = json.loads(out.read_text())["results"]
    assert [(r["batch"], r["prompt_len"]) for r in rows] == [(1, 4), (1, 12), (2, 4), (2, 12)]
    assert all(r["ttft_ms"] > 0 and r["tpot_ms"] > 0 for r in rows)
    # one request against the bandwidth limit: only the batch-1 rows, from the measured bandwidth and the tiny model's bytes
    report = json.loads(out.read_text())["settings"]
    assert report["read_bandwidth_gbs"] > 0.5 and report["decode_weight_bytes"] > 0
    assert [("of_bw_limit" in r) for r in rows] == [True, True, False, False]
    assert all(abs(r["of_bw_limit"] - r["decode_tok_s"] / r["bw_limit_tok_s"]) < 1e-9 for r in rows[:2])


def test_cli_kernels_without_cuda(capsys):
    if torch.cuda.is_available(): pytest.skip("has CUDA")
    assert main(["bench", "kernels"]) == 2
    assert "no CUDA" in capsys.readouterr().err


@contextlib.contextmanager
def fake_server(delay=0.001):
    "An OpenAI-style streaming /v1/completions on 127.0.0.1 in a thread: one SSE chunk per requested token, then usage."
    app = FastAPI()
    seen = []
    @app.get("/v1/models")
    def models(): return {"object": "list", "data": [{"id": "fake", "object": "model"}]}
    @app.post("/v1/completions")
    async def completions(body: dict):
        seen.append(body)
        async def events():
            for i in range(body["max_tokens"]):
                await asyncio.sleep(delay)
                yield f"data: {json.dumps({'choices': [{'index': 0, 'text': f' w{i}', 'finish_reason': None}]})}\n\n"
            yield f"data: {json.dumps({'choices': [], 'usage': {'prompt_tokens': 3, 'completion_tokens': body['max_tokens']}})}\n\n"
            yield "data: [DONE]\n\n"
        return StreamingResponse(events(), media_type="text/event-stream")
    sock = socket.socket(); sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app, log_level="error"))
    th = threading.Thread(target=server.run, kwargs=dict(sockets=[sock]), daemon=True); th.start()
    while not server.started: time.sleep(0.01)
    try: yield f"http://127.0.0.1:{sock.getsockname()[1]}", seen
    finally: server.should_exit = True; th.join(5); sock.close()


def test_serve_bench_fake_server():
    with fake_server() as (url, seen):
        s = run_async(run_serve_bench(url, ["a b"] * 5, [2, 3, 4, 5, 6], "fake", request_rate=100, use_tqdm=False))
        c = run_async(run_serve_bench(url, ["a b"] * 4, [3] * 4, "fake", max_concurrency=1, use_tqdm=False))
    assert (s["completed"], s["failed"], s["output_tokens"]) == (5, 0, 20) and (c["completed"], c["output_tokens"]) == (4, 12)
    assert all(b["stream"] and b["ignore_eos"] and b["model"] == "fake" for b in seen)
    for k in ("ttft_ms", "tpot_ms", "e2e_ms"):
        assert s[f"{k}_p50"] <= s[f"{k}_p90"] <= s[f"{k}_p99"]


def test_cli_serve(tiny, tmp_path):
    out = tmp_path/"s.json"
    with fake_server() as (url, seen):
        assert main(["bench", "serve", "--base-url", url, "--model", str(tiny), "--num-requests", "3", "--input-len-range", "4", "8",
                     "--output-len-range", "2", "4", "--request-rate", "50", "--no-tqdm", "--output-json", str(out)]) == 0
    rep = json.loads(out.read_text())
    assert rep["model"] == "fake" and rep["results"][0]["completed"] == 3
    assert [b["max_tokens"] for b in seen] == make_workload("custom", num_requests=3, input_len_range=(4, 8), output_len_range=(2, 4)).max_tokens


# --- `litevllm bench serve --baseline`: the servers started here, one at a time ---------------------------------------------

VLLM_PYTHON = Path(__file__).resolve().parents[1]/".vllm-venv/bin/python"
needs_vllm = pytest.mark.skipif(not VLLM_PYTHON.exists(), reason="no vLLM venv (make vllm-baseline)")

# printed by `vllm bench serve` (vLLM 0.32.0, from .vllm-venv) against `litevllm serve` with the default model, float32,
# on a 2-core AMD EPYC: 4 prompts of 32 tokens, 8 out, concurrency 2 (a functional run on a busy machine, not a measurement)
VLLM_BENCH_OUTPUT = """\
Starting main benchmark run...
Traffic request rate: inf
Burstiness factor: 1.0 (Poisson process)
Maximum request concurrency: 2
tip: install termplotlib and gnuplot to plot the metrics
============ Serving Benchmark Result ============
Successful requests:                     4         
Failed requests:                         0         
Maximum request concurrency:             2         
Benchmark duration (s):                  0.48      
Total input tokens:                      128       
Total generated tokens:                  32        
Request throughput (req/s):              8.29      
Output token throughput (tok/s):         66.30     
Peak output token throughput (tok/s):    32.00     
Peak concurrent requests:                4.00      
Total token throughput (tok/s):          331.51    
---------------Time to First Token----------------
Mean TTFT (ms):                          63.41     
Median TTFT (ms):                        65.28     
P50 TTFT (ms):                           65.28     
P99 TTFT (ms):                           78.63     
-----Time per Output Token (excl. 1st token)------
Mean TPOT (ms):                          24.30     
Median TPOT (ms):                        24.29     
P50 TPOT (ms):                           24.29     
P99 TPOT (ms):                           25.23     
---------------Inter-token Latency----------------
Mean ITL (ms):                           24.30     
Median ITL (ms):                         23.77     
P50 ITL (ms):                            23.77     
P99 ITL (ms):                            34.34     
----------------End-to-end Latency----------------
Mean E2EL (ms):                          233.52    
Median E2EL (ms):                        233.15    
P50 E2EL (ms):                           233.15    
P99 E2EL (ms):                           246.61    
==================================================
"""


def test_serve_compare_args():
    ns = make_parser().parse_args(["bench", "serve", "--baseline", "vllm", "--max-concurrency", "1", "16", "64", "--client", "litevllm", "vllm"])
    assert (ns.baseline, ns.max_concurrency, ns.client, ns.vllm_python) == ("vllm", [1, 16, 64], ["litevllm", "vllm"], ".vllm-venv/bin/python")
    assert (ns.random_input_len, ns.random_output_len, ns.num_prompts, ns.num_warmups, ns.dtype, ns.port) == (256, 64, None, 2, "float32", None)
    assert ns.health_interval == 0.05 and ns.seed == 0
    plain = make_parser().parse_args(["bench", "serve", "--max-concurrency", "4"])
    assert (plain.baseline, plain.max_concurrency, plain.client, plain.base_url) == (None, [4], ["litevllm"], "http://127.0.0.1:8000")
    with pytest.raises(SystemExit): make_parser().parse_args(["bench", "serve", "--baseline", "sglang"])


def test_serve_compare_refusals(capsys):
    assert main(["bench", "serve", "--client", "vllm"]) == 2  # vLLM's client only against the servers started here
    assert "--baseline" in capsys.readouterr().err
    assert main(["bench", "serve", "--steady", "--max-concurrency", "1", "2"]) == 2
    assert main(["bench", "serve", "--baseline", "none", "--random-input-len", "9000"]) == 2  # does not fit max_model_len
    assert main(["bench", "serve", "--baseline", "vllm", "--vllm-python", "/nonexistent/python"]) == 2
    assert "make vllm-baseline" in capsys.readouterr().err


def test_serve_argvs_same_settings():
    kw = dict(dtype="float32", max_model_len=512, seed=0, max_num_seqs=256, gpu_memory_utilization=0.9, kv_cache_memory_bytes=2**31,
              max_num_batched_tokens=1024)
    av = serve_argvs("/m", 8123, "m", kw, cli=["py", "vllm_cli.py"])
    assert list(av) == ["vllm", "litevllm"]  # vLLM first
    for a in av.values():
        s = " ".join(a)
        for part in ("/m --host 127.0.0.1 --port 8123", "--served-model-name m", "--dtype float32", "--max-model-len 512",
                     "--kv-cache-memory-bytes 2147483648", "--max-num-batched-tokens 1024"):
            assert part in s, (part, s)
    assert av["litevllm"][:4] == [sys.executable, "-m", "litevllm.cli", "serve"] and av["vllm"][:3] == ["py", "vllm_cli.py", "serve"]
    assert list(serve_argvs("/m", 1, "m", kw)) == ["litevllm"]


def test_ratios_and_table():
    rows = [dict(engine="litevllm", client="litevllm", max_concurrency=16, output_tok_s=50.0, ttft_ms_mean=300.0, tpot_ms_mean=20.0),
            dict(engine="vllm 0.32.0", client="litevllm", max_concurrency=16, output_tok_s=100.0, ttft_ms_mean=200.0, tpot_ms_mean=10.0),
            dict(engine="litevllm", client="litevllm", max_concurrency=1, output_tok_s=10.0, ttft_ms_mean=50.0, tpot_ms_mean=5.0),
            dict(engine="vllm 0.32.0", client="litevllm", max_concurrency=1, output_tok_s=8.0, ttft_ms_mean=100.0, tpot_ms_mean=0.0)]
    rs = add_ratios(rows)
    assert [(r["max_concurrency"], r["engine"]) for r in rs] == [(1, "vllm 0.32.0"), (1, "litevllm"), (16, "vllm 0.32.0"), (16, "litevllm")]
    assert (rs[1]["tok_s_ratio"], rs[1]["ttft_ratio"], rs[1]["tpot_ratio"]) == (1.25, 0.5, None)  # vLLM's TPOT 0: no ratio
    assert (rs[3]["tok_s_ratio"], rs[3]["ttft_ratio"], rs[3]["tpot_ratio"]) == (0.5, 1.5, 2.0)
    assert "tok_s_ratio" not in rs[0]
    table = format_table(rs, COMPARE_COLS)
    assert table.splitlines()[0].split() == COMPARE_COLS and "1.25" in table


def test_parse_vllm_bench_output():
    v = parse_vllm_bench_output(VLLM_BENCH_OUTPUT)
    assert (v["completed"], v["failed"], v["max_concurrency"], v["input_tokens"], v["output_tokens"]) == (4, 0, 2, 128, 32)
    assert (v["output_tok_s"], v["ttft_ms_mean"], v["ttft_ms_p99"], v["tpot_ms_mean"], v["tpot_ms_p99"]) == (66.30, 63.41, 78.63, 24.30, 25.23)
    assert (v["ttft_ms_p50"], v["itl_ms_p99"], v["e2e_ms_mean"], v["mean_input_tokens"], v["mean_output_tokens"]) == (65.28, 34.34, 233.52, 32.0, 8.0)
    with pytest.raises(ValueError, match="Serving Benchmark Result"): parse_vllm_bench_output("Traceback (most recent call last): ...")
    argv = " ".join(vllm_bench_argv("http://127.0.0.1:9", "m", "/tok", 256, 64, 16, 64))
    for part in ("bench serve --backend openai --base-url http://127.0.0.1:9", "--dataset-name random --random-input-len 256 --random-output-len 64",
                 "--num-prompts 64 --max-concurrency 16", "--ignore-eos", "--tokenizer /tok", "--temperature 0.0"):
        assert part in argv, part


def test_server_process_stops_the_group(tmp_path):
    "A server whose child would outlive a plain kill of its parent: the whole group goes, the port is free again."
    app = tmp_path/"srv.py"
    app.write_text("import http.server, subprocess, sys\n"
                   "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'])\n"
                   "class H(http.server.BaseHTTPRequestHandler):\n"
                   "    def do_GET(self): self.send_response(200); self.end_headers()\n"
                   "    def log_message(self, *a): pass\n"
                   "http.server.HTTPServer(('127.0.0.1', int(sys.argv[1])), H).serve_forever()\n")
    port = free_port()
    with pytest.raises(KeyboardInterrupt):  # an interrupted run stops the server too
        with server_process([sys.executable, str(app), str(port)], f"http://127.0.0.1:{port}", log=tmp_path/"log") as proc:
            pgid = os.getpgid(proc.pid)
            assert pgid != os.getpgid(0) and port_in_use(port)
            raise KeyboardInterrupt
    with pytest.raises(ProcessLookupError): os.killpg(pgid, 0)
    assert not port_in_use(port)
    with pytest.raises(RuntimeError, match="no such flag"):
        with server_process([sys.executable, "-c", "print('no such flag'); raise SystemExit(2)"], f"http://127.0.0.1:{free_port()}", log=tmp_path/"l2"): pass


def _serve_rows(tiny, tmp_path, *extra):
    out = tmp_path/"serve.json"
    assert main(["bench", "serve", "--baseline", "none", "--model", str(tiny), "--num-prompts", "4", "--random-input-len", "32",
                 "--random-output-len", "8", "--max-model-len", "64", "--kv-cache-memory-bytes", str(2**22), "--no-tqdm",
                 "--output-json", str(out), *extra]) == 0
    return json.loads(out.read_text())


def test_cli_serve_baseline_none(tiny, tmp_path, capsys):
    "The whole command against `litevllm serve` alone: started, driven at concurrency 1 and 2, stopped."
    rep = _serve_rows(tiny, tmp_path, "--max-concurrency", "1", "2")
    rows = rep["results"]
    assert [(r["max_concurrency"], r["engine"], r["client"], r["num_prompts"]) for r in rows] == [(1, "litevllm", "litevllm", 4), (2, "litevllm", "litevllm", 4)]
    for r in rows:
        assert (r["completed"], r["failed"], r["output_tokens"], r["mean_input_tokens"], r["mean_output_tokens"]) == (4, 0, 32, 32.0, 8.0)
        assert 0 < r["ttft_ms_mean"] <= r["ttft_ms_p99"] and 0 < r["tpot_ms_mean"] <= r["tpot_ms_p99"] and r["output_tok_s"] > 0
        assert r["health_probes"] > 0 and r["health_failed"] == 0 and 0 < r["health_p99_ms"] < 5000
        assert "tok_s_ratio" not in r  # no vLLM row to divide by
    assert rep["bench"] == "serve-compare" and rep["dtype"] == "float32" and rep["max_model_len"] == 64
    assert {"cpu_model", "cpu_isa", "cpu_count", "torch", "litevllm"} <= set(rep["machine"])
    assert "--kv-cache-memory-bytes 4194304" in " ".join(rep["servers"]["litevllm"])
    printed = capsys.readouterr().out
    assert "health_p99_ms" in printed and "litevllm ready after" in printed
    port = rep["settings"]["port"]
    assert not port_in_use(port)  # the server is gone


@needs_vllm
def test_cli_serve_vllm_client(tiny, tmp_path):
    "vLLM's own `vllm bench serve` against `litevllm serve`, beside our client, on the same server."
    rows = _serve_rows(tiny, tmp_path, "--max-concurrency", "2", "--client", "litevllm", "vllm", "--vllm-python", str(VLLM_PYTHON))["results"]
    assert [(r["client"], r["engine"]) for r in rows] == [("litevllm", "litevllm"), ("vllm", "litevllm")]
    ours, theirs = rows
    assert theirs["completed"] == 4 and theirs["failed"] == 0 and theirs["output_tokens"] == 32 and theirs["output_tok_s"] > 0
    assert theirs["ttft_ms_mean"] > 0 and theirs["tpot_ms_p99"] > 0 and theirs["health_probes"] > 0
    assert ours["output_tokens"] == theirs["output_tokens"]


# --- speculative decoding: the copy workload, `bench latency --workload`, `bench spec-decode` (issue 29)

def test_cli_spec_flags():
    p = make_parser()
    ns = p.parse_args(["bench", "latency", "--workload", "copy", "--speculative-config", '{"method": "ngram", "num_speculative_tokens": 4}'])
    assert (ns.workload, ns.speculative_config, ns.output_len) == ("copy", {"method": "ngram", "num_speculative_tokens": 4}, None)
    ns = p.parse_args(["bench", "spec-decode"])
    assert (ns.methods, ns.workloads, ns.concurrency, ns.num_speculative_tokens, ns.prompt_lookup_min, ns.prompt_lookup_max) == (
        ["none", "ngram", "draft_model"], ["random", "copy"], [1, 8], 4, 1, 4)
    assert (ns.baseline, ns.dtype, ns.draft_model, ns.vllm_preload_iomp) == ("none", "float32", None, True)
    for bad in (["latency", "--workload", "lorem"], ["spec-decode", "--methods", "eagle"], ["spec-decode", "--workloads", "nano"]):
        with pytest.raises(SystemExit): p.parse_args(["bench", *bad])


def test_copy_prompts_and_configs():
    from litevllm.bench import COPY_PROMPTS, copy_prompts, spec_configs, spec_workloads
    from litevllm.config import default_model_path
    from litevllm.inputs import get_tokenizer
    tok = get_tokenizer(default_model_path())
    ps = copy_prompts(tok)
    assert len(COPY_PROMPTS) == len(ps) == 8 and all(150 <= len(p) <= 400 for p in ps), [len(p) for p in ps]
    for p, text in zip(ps, COPY_PROMPTS.values()):  # the user turn, whole, inside the model's chat template
        s = tok.decode(p)
        assert s.count("<|im_start|>") == 3 and text.splitlines()[-1] in s and s.rstrip().endswith("<|im_start|>assistant")
    assert copy_prompts(tok, 9)[8] == ps[0]
    c = spec_configs(num_speculative_tokens=3, prompt_lookup_max=5, prompt_lookup_min=2, draft_model="/d")
    assert c == dict(none=None, ngram=dict(method="ngram", num_speculative_tokens=3, prompt_lookup_max=5, prompt_lookup_min=2),
                     draft_model=dict(method="draft_model", model="/d", num_speculative_tokens=3))
    with pytest.raises(ValueError, match="draft_model"): spec_configs(["none", "draft_model"])
    w = spec_workloads(tok, ["copy", "random"], num_prompts=3, random_prompt_len=7)
    assert list(w) == ["copy", "random"] and w["copy"]["prompts"] == ps[:3] and [len(p) for p in w["random"]["prompts"]] == [7] * 3
    assert (w["copy"]["ignore_eos"], w["random"]["ignore_eos"]) == (False, True)


def test_spec_decode_rows(tiny):
    from litevllm.bench import run_spec_decode, add_spec_ratios, spec_configs, spec_workloads, engine_core_in_process, SPEC_COLS
    from litevllm.inputs import get_tokenizer
    wl = spec_workloads(get_tokenizer(tiny), num_prompts=1, random_prompt_len=8, random_output_len=4, copy_output_len=4)
    with engine_core_in_process():
        rows = add_spec_ratios(run_spec_decode(str(tiny), dict(max_model_len=512, kv_cache_memory_bytes=2**24), wl,
                                               spec_configs(draft_model=tiny), concurrency=[1]))
    assert [(r["method"], r["workload"], r["concurrency"]) for r in rows] == [(m, w, 1) for m in ("none", "ngram", "draft_model") for w in ("random", "copy")]
    assert all(set(SPEC_COLS) <= set(r) for r in rows)
    assert all(r["same_output"] and r["tpot_speedup"] > 0 and r["output_tokens"] >= 1 for r in rows)  # greedy: no token changed
    assert [r["tokens"] for r in rows if r["workload"] == "random"] == [[4]] * 3  # ignore_eos
    assert all(r["acceptance_length"] is None for r in rows if r["method"] == "none")
    dm = [r for r in rows if r["method"] == "draft_model" and r["num_drafts"]]
    assert dm and all(r["acceptance_rate"] == 1.0 for r in dm)  # the target as its own draft: every draft accepted


def test_cli_spec_decode_vllm_failure(tiny, tmp_path, capsys, monkeypatch):
    "A vLLM run that fails (here: an 'interpreter' that exits 1) is a row with its error, said in the output, exit 1; litevllm's rows stand."
    monkeypatch.setenv("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # litevllm's engine cores in this process: quicker to start
    out = tmp_path/"sd.json"
    rc = main(["bench", "spec-decode", "--model", str(tiny), "--methods", "none", "ngram", "--workloads", "random", "--concurrency", "1",
               "--num-prompts", "1", "--random-prompt-len", "6", "--random-output-len", "2", "--max-model-len", "128",
               "--kv-cache-memory-bytes", str(2**24), "--baseline", "vllm", "--vllm-python", "/bin/false", "--output-json", str(out)])
    assert rc == 1
    rep = json.loads(out.read_text())
    assert [(r["engine"], r["method"], bool(r.get("error"))) for r in rep["results"]] == [
        ("litevllm", "none", False), ("litevllm", "ngram", False), ("vllm", "none", True), ("vllm", "ngram", True)]
    assert set(rep["vllm_failed"]) == {"none", "ngram"} and rep["settings"]["methods"]["ngram"]["num_speculative_tokens"] == 4
    printed = capsys.readouterr().out
    assert "vLLM, ngram: FAILED" in printed and "CPU:" in printed and "tpot_speedup" in printed


# --- the package (issue 40): `litevllm.bench` was one module, bench.py; every name it offered still imports from it ---------

OLD_NAMES = ["WORKLOADS", "VLLM_WORKER", "STEP_PARTS", "THROUGHPUT_COLS", "COPY_PROMPTS", "LATENCY_WORKLOADS", "LATENCY_COLS",
             "SERVE_COLS", "LOAD_COLS", "VLLM_CLI", "VLLM_SHARED", "COMPARE_COLS", "SPEC_METHODS", "SPEC_COLS",
             "VLLM_SPEC_WORKER", "Workload", "make_workload", "cpu_model", "machine_info", "format_table", "write_report",
             "engine_core_in_process", "run_litevllm", "load_hf_model", "hf_batches", "left_pad", "run_hf", "run_vllm_worker",
             "run_vllm", "measure_ttft", "breakdown_table", "breakdown_by_batch", "add_workload_args", "workload_from_args",
             "cmd_throughput", "run_lora_mix", "collect_spec_stats", "spec_summary", "latency_summary", "measure_latency",
             "copy_prompts", "bench_latency", "cmd_latency", "run_async", "run_serve_bench", "process_rss_mb",
             "server_blocks_in_use", "run_load", "cmd_serve", "cmd_serve_load", "add_load_args", "random_token_prompts",
             "probe_health", "with_health_probe", "vllm_cli", "vllm_env", "engine_flags", "serve_argvs", "free_port",
             "port_in_use", "stop_process_group", "server_process", "parse_vllm_bench_output", "vllm_bench_argv", "run_process",
             "run_vllm_client", "add_ratios", "serve_level", "compare_run", "cmd_serve_compare", "add_compare_args",
             "spec_configs", "spec_workloads", "run_spec_decode", "add_spec_ratios", "run_vllm_spec", "cmd_spec_decode",
             "add_spec_decode_args", "cmd_kernels", "add_cli", "plot_throughput_report", "plot_sweep", "vllm_ratio_rows",
             "plot_vllm_ratios"]


def test_package_keeps_the_old_names():
    import litevllm.bench as b
    assert [n for n in OLD_NAMES if not hasattr(b, n)] == [] and set(OLD_NAMES) <= set(b.__all__)
    star = {}
    exec("from litevllm.bench import *", star)
    assert set(OLD_NAMES) <= set(star)


def test_vllm_scripts_are_files_without_litevllm():
    "The scripts real vLLM runs are files of the package, run by path with vLLM's python: none imports litevllm (vLLM's venv has none)."
    import ast
    from litevllm.bench import SCRIPTS, VLLM_WORKER, VLLM_SPEC_WORKER, VLLM_CLI
    for f in (VLLM_WORKER, VLLM_SPEC_WORKER, VLLM_CLI):
        assert f.parent == SCRIPTS and f.is_file(), f
        tree = ast.parse(f.read_text())
        mods = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        mods |= {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
        assert not any(m.split(".")[0] == "litevllm" for m in mods), (f.name, mods)
        assert 'if __name__ == "__main__":' in f.read_text()  # vLLM's engine core, a spawned process, imports the script again


def test_llamacpp_rows_with_a_stand_in_build(tmp_path, monkeypatch):
    "--baseline llamacpp's path without llama.cpp: stand-in llama-quantize (copies) and llama-bench (llama-bench's JSON shape)."
    import json, stat, torch
    from litevllm.bench.latency import llamacpp_rows
    from litevllm.config import cache_dir
    b = tmp_path/"bin"; b.mkdir()
    answer = [{"n_threads": 2, "n_prompt": 512, "n_gen": 0, "avg_ts": 1000.0}, {"n_threads": 2, "n_prompt": 0, "n_gen": 128, "avg_ts": 100.0}]
    (b/"llama-bench").write_text(f"#!/bin/sh\necho '{json.dumps(answer)}'\n")
    (b/"llama-quantize").write_text('#!/bin/sh\ncp "$2" "$3"\n')
    for f in b.iterdir(): f.chmod(f.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("LITEVLLM_LLAMACPP", str(tmp_path))
    monkeypatch.setenv("LITEVLLM_CACHE", str(tmp_path/"cache"))  # the requantized file goes there
    rows = [dict(batch=1, prompt_len=32, decode_tok_s=80.0, ttft_ms=20.0), dict(batch=1, prompt_len=512, decode_tok_s=60.0, ttft_ms=256.0)]
    out = llamacpp_rows(rows, torch.float32, gguf_format="Q4_1")  # the shipped file: no quantize step
    assert [(r["test"], r["tok_s"], r["litevllm_tok_s"], r["litevllm_vs_llamacpp"]) for r in out] == [("pp512", 1000.0, 2000.0, 2.0), ("tg128", 100.0, 80.0, 0.8)]
    llamacpp_rows(rows, torch.float32)  # float32: the F32 file, made once with llama-quantize
    assert (tmp_path/"cache"/"gguf"/"SmolLM2-135M-Instruct.F32.gguf").is_file()


def test_folder_gguf_with_a_stand_in_converter(tmp_path, monkeypatch):
    "`bench latency --model FOLDER --baseline llamacpp`'s file: llama.cpp's converter (a stand-in here) run once per folder and type, llama-quantize for the rest; its failure said."
    import stat, sys
    from litevllm.bench.baseline import folder_gguf
    build, src, folder = tmp_path/"build", tmp_path/"src", tmp_path/"model"
    for d in (build/"bin", src, folder): d.mkdir(parents=True)
    (folder/"config.json").write_text("{}"); (folder/"model.safetensors").write_bytes(b"weights")
    (src/"convert_hf_to_gguf.py").write_text(
        "import sys, pathlib\na = sys.argv\nif 'broken' in a[1]: sys.exit('cannot read that tokenizer')\n"
        "pathlib.Path(a[a.index('--outfile') + 1]).write_text(a[a.index('--outtype') + 1])\n")
    (build/"bin"/"llama-quantize").write_text('#!/bin/sh\n(cat "$1"; echo " -> $3") > "$2"\n')
    (build/"bin"/"llama-quantize").chmod(0o755)
    monkeypatch.setenv("LITEVLLM_LLAMACPP", str(build)); monkeypatch.setenv("LITEVLLM_CACHE", str(tmp_path/"cache"))
    bf16 = folder_gguf(folder, "bf16")
    assert bf16.name.endswith(".BF16.gguf") and bf16.read_text() == "bf16"
    assert folder_gguf(folder, "BF16") == bf16  # made once
    q4k = folder_gguf(folder, "Q4_K")
    assert q4k.name.endswith(".Q4_K.gguf") and q4k.read_text().strip() == "bf16 -> Q4_K" and not list(q4k.parent.glob("*.tmp"))
    broken = tmp_path/"broken"; broken.mkdir()
    with pytest.raises(RuntimeError, match="cannot read that tokenizer"): folder_gguf(broken, "F32")
