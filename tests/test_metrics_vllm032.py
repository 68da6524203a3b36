"""vLLM 0.32's newer Prometheus families: vllm:num_requests_waiting_by_reason, vllm:prompt_tokens_by_source,
vllm:prompt_tokens_cached_by_source, vllm:request_num_preemptions and vllm:admission_rejections. Their names, HELP texts,
types, labels and buckets are read from vLLM's own source (.vllm-venv, when there is one); their values are checked
after real runs, with the engine core in this process (VLLM_ENABLE_V1_MULTIPROCESSING=0) and in a process of its own
(the stats then travel in EngineCoreOutputs.scheduler_stats, through msgspec)."""
import ast, threading
from pathlib import Path
import pytest
from litevllm.config import EngineArgs
from litevllm.engine import LLMEngine
from litevllm.core_client import InprocClient, SyncMPClient
from litevllm.sampling_params import SamplingParams, StructuredOutputsParams
import litevllm.structured_output as so_mod
from litevllm.metrics import PrometheusStatLogger, parse_metrics, metric_value

NEW = ["vllm:num_requests_waiting_by_reason", "vllm:prompt_tokens_by_source", "vllm:prompt_tokens_cached_by_source",
       "vllm:request_num_preemptions", "vllm:admission_rejections"]
VLLM = Path(__file__).resolve().parents[1]/".vllm-venv"
ENGINE = 'engine="0",model_name="SmolLM2-135M-Instruct"'


def vllm_source(rel:str) -> ast.Module:
    hits = sorted(VLLM.glob(f"lib/python3*/site-packages/vllm/{rel}"))
    if not hits: pytest.skip("no vLLM venv (make vllm-baseline)")
    return ast.parse(hits[0].read_text())


def constants(tree:ast.Module) -> dict:
    "Every NAME = literal in `tree` (module level and class bodies), evaluated."
    res = {}
    for node in ast.walk(tree):
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
            for t in (node.targets if isinstance(node, ast.Assign) else [node.target]):
                if isinstance(t, ast.Name):
                    try: res[t.id] = ast.literal_eval(node.value)
                    except ValueError: pass
    return res


def vllm_families() -> dict:
    "name -> (type, HELP, label names, buckets variable) of the NEW families as vLLM's PrometheusStatLogger declares them."
    def labels(e):
        if isinstance(e, ast.Name): assert e.id == "labelnames"; return ["model_name", "engine"]
        if isinstance(e, ast.BinOp): return labels(e.left) + labels(e.right)
        return ast.literal_eval(e)
    res = {}
    for node in ast.walk(vllm_source("v1/metrics/loggers.py")):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in ("_gauge_cls", "_counter_cls", "_histogram_cls"):
            kw = {k.arg: k.value for k in node.keywords}
            if isinstance(kw.get("name"), ast.Constant) and kw["name"].value in NEW:
                b = kw.get("buckets")
                res[kw["name"].value] = (node.func.attr[1:-4], ast.literal_eval(kw["documentation"]), labels(kw["labelnames"]),
                                         b.id if isinstance(b, ast.Name) else None)
    return res


def test_families_as_vllm_declares_them():
    fams, consts = vllm_families(), constants(vllm_source("v1/metrics/loggers.py"))
    consts |= constants(vllm_source("v1/metrics/buckets.py")) | constants(vllm_source("v1/metrics/stats.py"))
    tiers = constants(vllm_source("v1/metrics/cache_hit_source.py"))
    values = dict(reason=[consts["WAITING_REASON_CAPACITY"], consts["WAITING_REASON_DEFERRED"]], source=list(consts["ALL_SOURCES"]))
    expected_values = {"vllm:num_requests_waiting_by_reason": values["reason"], "vllm:prompt_tokens_by_source": values["source"],
                       "vllm:prompt_tokens_cached_by_source": [v for k, v in tiers.items() if k.isupper()],
                       "vllm:admission_rejections": list(consts["ADMISSION_REASONS"])}
    ours = {m.name: m for m in PrometheusStatLogger("m", 4).registry.collect()}
    for name in NEW:
        kind, doc, labs, buckets = fams[name]
        m = ours[name]
        assert (m.type, m.documentation) == (kind, doc), name
        samples = [s for s in m.samples if s.name in (name, name + "_total", name + "_bucket")]
        assert {tuple(sorted(set(s.labels) - {"le"})) for s in samples} == {tuple(sorted(labs))}, name
        if name in expected_values:  # every label value vLLM creates up front, in its order
            assert [s.labels[labs[-1]] for s in samples] == expected_values[name], name
    assert fams["vllm:request_num_preemptions"][3] == "request_num_preemptions_buckets"  # histogram_buckets("request_num_preemptions")
    les = [float(s.labels["le"]) for s in ours["vllm:request_num_preemptions"].samples if s.name.endswith("_bucket")]
    assert les == [*map(float, consts["REQUEST_NUM_PREEMPTIONS_BUCKETS"]), float("inf")]


@pytest.fixture(scope="module", params=["inproc", "mp"])
def engine(request):
    "A pool of 4 blocks of 16 tokens: four 14-token prompts fill it, and as they grow they preempt each other."
    with pytest.MonkeyPatch.context() as m:
        m.setenv("VLLM_ENABLE_V1_MULTIPROCESSING", "0" if request.param == "inproc" else "1")
        eng = LLMEngine.from_engine_args(EngineArgs(max_model_len=64, block_size=16, num_gpu_blocks_override=4, disable_log_stats=False))
    assert isinstance(eng.engine_core, InprocClient if request.param == "inproc" else SyncMPClient)
    yield eng
    eng.shutdown()


def run(eng, prompts:dict, sp:SamplingParams, watch=None) -> dict:
    "Add the prompts (id -> token ids), step to the end; the finished RequestOutputs by id. `watch(metrics)` after each step."
    for rid, ids in prompts.items(): eng.add_request(rid, {"prompt_token_ids": ids}, sp)
    done = {}
    while eng.has_unfinished_requests():
        done |= {o.request_id: o for o in eng.step() if o.finished}
        if watch: watch(parse_metrics(eng.stat_logger.render().decode()))
    return done


def series(m:dict, name:str, label:str) -> dict: return {k.split(f'{label}="')[1].split('"')[0]: v for k, v in m.items() if k.startswith(name + "{")}


def test_preemptions_and_waiting_by_reason(engine):
    seen = []
    def watch(m):
        w = series(m, "vllm:num_requests_waiting_by_reason", "reason")
        assert set(w) == {"capacity", "deferred"} and sum(w.values()) == m[f"vllm:num_requests_waiting{{{ENGINE}}}"]
        seen.append((w["capacity"], w["deferred"], m[f"vllm:kv_cache_usage_perc{{{ENGINE}}}"]))
    prompts = {f"p{i}": list(range(1000 + 100 * i, 1014 + 100 * i)) for i in range(4)}
    outs = run(engine, prompts, SamplingParams(temperature=0, max_tokens=20, ignore_eos=True), watch)
    assert sorted(outs) == sorted(prompts) and all(len(o.outputs[0].token_ids) == 20 for o in outs.values())
    # requests waited for blocks while the pool was full; nothing was deferred (no grammar)
    assert any(c >= 1 and usage == 1.0 for c, _, usage in seen)
    assert all(d == 0 for _, d, _ in seen) and seen[-1][:2] == (0, 0)
    m = parse_metrics(engine.stat_logger.render().decode())
    per_request = [o.metrics.num_preemptions for o in outs.values()]  # each request's count, as its RequestStateStats saw it
    total = m[f"vllm:num_preemptions_total{{{ENGINE}}}"]
    assert sum(per_request) == total > 0 and max(per_request) >= 1
    h = lambda s: m[f'vllm:request_num_preemptions_{s}{{{ENGINE}}}']
    assert (h("count"), h("sum")) == (4, total)
    for le in (1, 2, 3, 4, 5, 10, 20):
        assert m[f'vllm:request_num_preemptions_bucket{{engine="0",le="{le:.1f}",model_name="SmolLM2-135M-Instruct"}}'] == \
            sum(n <= le for n in per_request)


def test_waiting_for_a_grammar_is_deferred(engine, monkeypatch):
    if engine.engine_core.multiprocess: pytest.skip("the compile is held by patching it in this process (05/10a check the rest)")
    release, started = threading.Event(), threading.Event()
    real = so_mod.XgrammarBackend.compile_grammar
    def slow(self, *a, **kw):
        started.set(); assert release.wait(60); return real(self, *a, **kw)
    monkeypatch.setattr(so_mod.XgrammarBackend, "compile_grammar", slow)
    try:
        engine.add_request("free", {"prompt_token_ids": list(range(7000, 7006))}, SamplingParams(temperature=0, max_tokens=3))
        engine.add_request("choice", {"prompt_token_ids": list(range(7100, 7106))},
                           SamplingParams(temperature=0, max_tokens=3, structured_outputs=StructuredOutputsParams(choice=["yes", "no"])))
        assert started.wait(30)
        engine.step()
        m = parse_metrics(engine.stat_logger.render().decode())
        w = series(m, "vllm:num_requests_waiting_by_reason", "reason")
        assert (w["capacity"], w["deferred"], m[f"vllm:num_requests_waiting{{{ENGINE}}}"], m[f"vllm:num_requests_running{{{ENGINE}}}"]) == (0, 1, 1, 1)
    finally: release.set()
    assert sorted(run(engine, {}, SamplingParams())) == ["choice", "free"]
    w = series(parse_metrics(engine.stat_logger.render().decode()), "vllm:num_requests_waiting_by_reason", "reason")
    assert w == {"capacity": 0, "deferred": 0}


def test_repeated_prompt_is_a_local_cache_hit(engine):
    def snap():
        m = parse_metrics(engine.stat_logger.render().decode())
        return (series(m, "vllm:prompt_tokens_by_source_total", "source"), series(m, "vllm:prompt_tokens_cached_by_source_total", "source"),
                m[f"vllm:prefix_cache_hits_total{{{ENGINE}}}"], m[f"vllm:prompt_tokens_total{{{ENGINE}}}"])
    ids, sp = list(range(5000, 5040)), SamplingParams(temperature=0, max_tokens=2)
    src0, tier0, hits0, prompt0 = snap()
    first = run(engine, {"first": ids}, sp)["first"]
    src1, tier1, hits1, _ = snap()
    assert first.num_cached_tokens == 0 and src1["local_compute"] - src0["local_compute"] == 40 and src1["local_cache_hit"] == src0["local_cache_hit"]
    again = run(engine, {"again": ids}, sp)["again"]
    src2, tier2, hits2, prompt2 = snap()
    assert again.num_cached_tokens == 32  # two full blocks of 16; the last (partial) block is computed
    assert (src2["local_cache_hit"] - src1["local_cache_hit"], src2["local_compute"] - src1["local_compute"]) == (32, 8)
    assert src2["external_kv_transfer"] == 0 and sum(src2.values()) - sum(src0.values()) == prompt2 - prompt0 == 80
    assert tier2["device"] - tier1["device"] == hits2 - hits1 == 32 and tier2["device"] == hits2
    assert list(tier2) == ["device", "host", "p2p", "disk", "external_unspecified"] and sum(tier2.values()) == tier2["device"]


def test_admission_rejections(engine):
    m = parse_metrics(engine.stat_logger.render().decode())
    rej = {k: v for k, v in m.items() if k.startswith("vllm:admission_rejections")}
    assert rej == {'vllm:admission_rejections_total{model_name="SmolLM2-135M-Instruct",reason="max_num_queued_reqs"}': 0,
                   'vllm:admission_rejections_total{model_name="SmolLM2-135M-Instruct",reason="max_num_queued_tokens"}': 0}
    engine.stat_logger.record_admission_rejection("max_num_queued_tokens")
    m = parse_metrics(engine.stat_logger.render().decode())
    assert metric_value(m, "vllm:admission_rejections_total") == 1 and \
        m['vllm:admission_rejections_total{model_name="SmolLM2-135M-Instruct",reason="max_num_queued_tokens"}'] == 1
