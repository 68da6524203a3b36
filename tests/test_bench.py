"`litevllm bench`: the workload is reproducible, both sides count the same tokens, the reports carry the machine; no timing is asserted."
import asyncio, contextlib, json, socket, threading, time
import pytest, torch, uvicorn
from fastapi import FastAPI
from fastapi.responses import StreamingResponse
from litevllm.bench import make_workload, run_hf, run_litevllm, load_hf_model, hf_batches, run_serve_bench, run_async
from litevllm.cli import main
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
