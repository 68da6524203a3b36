"""Speculative decoding's metrics (nbs/41a_metrics, 11_engine, 14_async_llm) and flags (40_cli, 42_server): vLLM 0.32's
vllm:spec_decode_* counters (names, HELP texts, labels, values and get_metrics() objects as vLLM's own SpecDecodingProm
gives them on the same steps, tests/data/vllm032_spec_decode_metrics.json), its "SpecDecoding metrics" log line, both
on a real engine with ngram speculation, /metrics of the server, and `--speculative-config` refused before any engine starts."""
import asyncio, json, logging, re, unittest
from pathlib import Path
from unittest import mock
import httpx, pytest
import litevllm.metrics as metrics_mod
from litevllm import LLM, SamplingParams
from litevllm.config import SpeculativeConfig
from litevllm.scheduler import SchedulerStats, SpecDecodingStats
from litevllm.metrics import PrometheusStatLogger, SpecDecodingLogging, Counter, Vector, parse_metrics

REF = json.loads((Path(__file__).parent/"data"/"vllm032_spec_decode_metrics.json").read_text())  # record_vllm_spec_decode_metrics.py
K = 4
SPEC = {"method": "ngram", "num_speculative_tokens": K, "prompt_lookup_max": 4, "prompt_lookup_min": 1}
PROMPT = "Colors: red, green, blue, red, green, blue, red, green,"  # the answer copies the prompt: drafts get accepted
NAME = "SmolLM2-135M-Instruct"
PER_POS = "vllm:spec_decode_num_accepted_tokens_per_pos"


def ref_steps() -> list[SpecDecodingStats]:
    res = []
    for step in REF["steps"]:
        s = SpecDecodingStats.new(REF["k"])
        for d, a in step: s.observe_draft(d, a)
        res.append(s)
    return res


def test_counters_as_vllm_records_them():
    lg = PrometheusStatLogger("m", 4, speculative_config=SpeculativeConfig("ngram", REF["k"], 4, 1))
    for s in ref_steps(): lg.record(SchedulerStats(spec_decoding_stats=s))
    fams = [m for m in lg.registry.collect() if m.name.startswith("vllm:spec_decode")]
    assert {m.name: [m.type, m.documentation, sorted({k for s in m.samples for k in s.labels})] for m in fams} == REF["families"]
    assert [[s.name, s.labels, s.value] for m in fams for s in m.samples] == REF["samples"]  # every position's child, in vLLM's order
    snap = [[type(x).__name__, x.name, x.labels, getattr(x, "values", getattr(x, "value", None))]
            for x in lg.get_metrics_snapshot() if x.name.startswith("vllm:spec_decode")]
    assert snap == REF["snapshot"]


def test_counters_absent_without_speculation():
    lg = PrometheusStatLogger("m", 4)
    lg.record(SchedulerStats(spec_decoding_stats=ref_steps()[0]))
    assert "spec_decode" not in lg.render().decode() and not [x for x in lg.get_metrics_snapshot() if "spec_decode" in x.name]


def test_log_line_as_vllm_logs_it():
    with mock.patch.object(metrics_mod.time, "monotonic", return_value=100.0): sdl = SpecDecodingLogging()
    for s in ref_steps(): sdl.observe(s)
    lines = []
    with mock.patch.object(metrics_mod.time, "monotonic", return_value=102.0): sdl.log(lambda fmt, *a: lines.append(fmt % a))
    assert lines == [REF["log"]]
    sdl.log(lambda fmt, *a: lines.append(fmt % a))
    assert (len(lines) > 1) == REF["log_empty"]


@pytest.fixture(scope="module")
def llm():
    return LLM(speculative_config=SPEC, dtype="float32", max_model_len=1024, kv_cache_memory_bytes=256 * 2**20,
               disable_log_stats=False, log_stats_interval=3600.0)  # the engine core in a process of its own (the stats cross it)


def spec_metrics(llm) -> dict:
    "name -> value (the per-position counters: their values) of the spec-decode entries of LLM.get_metrics()."
    res = {}
    for m in llm.get_metrics():
        if not m.name.startswith("vllm:spec_decode"): continue
        assert m.labels == {"model_name": NAME, "engine": "0"}, m
        assert isinstance(m, Vector if m.name == PER_POS else Counter), m
        res[m.name] = m.values if m.name == PER_POS else m.value
    assert len(res[PER_POS]) == K
    return res


@pytest.fixture(scope="module")
def run(llm):
    "One greedy generate of the copying prompt: its output, the spec-decode counters it added, and the log line logged right after."
    eng = llm.llm_engine
    eng.log_stats_line()  # the lines so far: the next covers this generate's steps only
    before = spec_metrics(llm)
    out = llm.generate([PROMPT], SamplingParams(temperature=0, max_tokens=16, ignore_eos=True), use_tqdm=False)[0].outputs[0]
    after = spec_metrics(llm)
    with unittest.TestCase().assertLogs("litevllm", "INFO") as cm: eng.log_stats_line()
    delta = {k: [a - b for a, b in zip(after[k], before[k])] if k == PER_POS else after[k] - before[k] for k in after}
    return out, delta, [r.getMessage() for r in cm.records]


def test_get_metrics_after_a_copying_generate(run):
    out, m, _ = run
    drafts, draft_tokens, accepted, per_pos = (m[f"vllm:spec_decode_num_{x}"] for x in ("drafts", "draft_tokens", "accepted_tokens", "accepted_tokens_per_pos"))
    assert len(out.token_ids) == 16 and 0 < drafts <= draft_tokens <= K * drafts
    assert 0 < accepted <= draft_tokens and accepted <= len(out.token_ids) - 1  # the first token (prefill) is never a draft
    assert sum(per_pos) == accepted and per_pos == sorted(per_pos, reverse=True) and per_pos[0] <= drafts


def test_log_line(run):
    _, m, msgs = run
    lines = [x for x in msgs if x.startswith("SpecDecoding metrics: ")]
    assert len(lines) == 1 and msgs.index(lines[0]) == 1 and msgs[0].startswith("Running: ")  # after the engine's own line
    got = dict(re.findall(r"(Mean acceptance length|Accepted|Drafted): ([\d.]+)", lines[0]))
    drafts, draft_tokens, accepted, per_pos = (m[f"vllm:spec_decode_num_{x}"] for x in ("drafts", "draft_tokens", "accepted_tokens", "accepted_tokens_per_pos"))
    assert drafts > 0 and (int(got["Accepted"]), int(got["Drafted"])) == (accepted, draft_tokens)
    assert got["Mean acceptance length"] == f"{1 + accepted / drafts:.2f}"
    assert re.search(r"Per-position acceptance rate: ([\d., ]+), Avg", lines[0])[1] == ", ".join(f"{n / drafts:.3f}" for n in per_pos)
    assert lines[0].endswith(f"Avg Draft acceptance rate: {100 * accepted / draft_tokens:.1f}%")


def test_counts_match_the_steps(llm, run, caplog, monkeypatch):
    """Each step gives a request its accepted drafts plus one token: accepted = tokens - steps, one draft run at most per
    step after the first. With log_stats_interval 0 the lines come on their own, one per step after the engine's line."""
    eng, before = llm.llm_engine, spec_metrics(llm)
    monkeypatch.setattr(eng.vllm_config.args, "log_stats_interval", 0.0)
    eng.add_request("steps", PROMPT, SamplingParams(temperature=0, max_tokens=12, ignore_eos=True))
    steps = tokens = 0
    with caplog.at_level(logging.INFO, logger="litevllm"):
        while eng.has_unfinished_requests():
            for o in eng.step():
                steps += 1; tokens = len(o.outputs[0].token_ids)
    m = spec_metrics(llm)
    d = lambda x: m[f"vllm:spec_decode_num_{x}"] - before[f"vllm:spec_decode_num_{x}"]
    assert tokens == 12 and d("accepted_tokens") == tokens - steps > 0 and d("drafts") <= steps - 1
    msgs = [r.getMessage() for r in caplog.records]
    spec = [i for i, x in enumerate(msgs) if x.startswith("SpecDecoding metrics: ")]
    assert spec and all(msgs[i - 1].startswith("Running: ") for i in spec)
    assert sum(int(re.search(r"Accepted: (\d+) tokens", msgs[i])[1]) for i in spec) == d("accepted_tokens")


def test_server_metrics():
    from litevllm.async_llm import AsyncLLM, AsyncEngineArgs
    from litevllm.server import build_app
    eng = AsyncLLM.from_engine_args(AsyncEngineArgs(speculative_config=SPEC, dtype="float32", max_model_len=1024, kv_cache_memory_bytes=256 * 2**20),
                                    served_model_name=NAME, multiprocess_mode=False)  # the engine core in this process (the LLM's has its own)
    try:
        async def go():
            async with httpx.AsyncClient(transport=httpx.ASGITransport(app=build_app(eng, [NAME])), base_url="http://t", timeout=300) as c:
                r = await c.post("/v1/completions", json=dict(model=NAME, prompt=PROMPT, max_tokens=16, temperature=0, ignore_eos=True))
                assert r.status_code == 200, r.text
                for _ in range(100):  # the engine thread records a step's metrics just after delivering its outputs
                    text = (await c.get("/metrics")).text
                    if parse_metrics(text)[f'litevllm:num_unfinished_requests{{engine="0",model_name="{NAME}"}}'] == 0: return text
                    await asyncio.sleep(0.1)
                raise TimeoutError("the request never left the metrics")
        text = asyncio.run(go())
    finally: eng.shutdown()
    m, lab = parse_metrics(text), f'engine="0",model_name="{NAME}"'
    for name, doc in (("drafts", "Number of spec decoding drafts."), ("draft_tokens", "Number of draft tokens."),
                      ("accepted_tokens", "Number of accepted tokens.")):
        assert f"# HELP vllm:spec_decode_num_{name}_total {doc}\n# TYPE vllm:spec_decode_num_{name}_total counter" in text
    drafts, accepted = m[f"vllm:spec_decode_num_drafts_total{{{lab}}}"], m[f"vllm:spec_decode_num_accepted_tokens_total{{{lab}}}"]
    per_pos = [m[f'{PER_POS}_total{{{lab},position="{p}"}}'] for p in range(K)]
    assert drafts > 0 and 0 < accepted <= m[f"vllm:spec_decode_num_draft_tokens_total{{{lab}}}"] and sum(per_pos) == accepted
    assert per_pos == sorted(per_pos, reverse=True) and not any(k.startswith(PER_POS) and f'position="{K}"' in k for k in m)


@pytest.mark.parametrize("args, why", [
    (["--speculative-config", "{bad json"], "argument --speculative-config/-sc: not valid JSON"),
    (["-sc", "[1, 2]"], "argument --speculative-config/-sc: must be a JSON object"),
    (["--speculative-config", '{"method": "eagle", "num_speculative_tokens": 2}'], "(parameter=speculative_config.method, value=eagle)"),
    (["--spec-method", "ngram", "--spec-tokens", "0"], "(parameter=speculative_config.num_speculative_tokens, value=0)"),
    (["-sc", '{"method": "ngram", "num_speculative_tokens": 2}', "--spec-tokens", "3"], "are mutually exclusive"),
    (["-sc", '{"method": "ngram", "num_speculative_tokens": 2, "lookahead": 1}'], "(parameter=speculative_config.lookahead, value=1)"),
])
@pytest.mark.parametrize("command", ["serve", "generate"])
def test_bad_speculative_config_exits_2(command, args, why, capsys, monkeypatch):
    import litevllm.server, litevllm.llm
    from litevllm.cli import main
    def never(*a, **kw): raise AssertionError("an engine was started")
    monkeypatch.setattr(litevllm.server.AsyncLLM, "from_engine_args", never)
    monkeypatch.setattr(litevllm.llm, "LLM", never)
    try: code = main([command, *args])
    except SystemExit as e: code = e.code  # argparse's own refusal
    assert code == 2 and why in capsys.readouterr().err
