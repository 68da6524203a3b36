"Time real vLLM's decoding (with or without speculation) as litevllm's measure_latency does: the job as JSON on stdin, one result line on stdout."
import json, os, sys, time

_COUNTERS = {"vllm:spec_decode_num_drafts": "num_drafts", "vllm:spec_decode_num_draft_tokens": "num_draft_tokens",
             "vllm:spec_decode_num_accepted_tokens": "num_accepted_tokens",
             "vllm:spec_decode_num_accepted_tokens_per_pos": "num_accepted_tokens_per_pos"}

def spec_counters(llm) -> dict:
    "vLLM's speculative-decoding counters now, summed over engines, by SpecDecodingStats' names."
    out = {}
    for m in llm.get_metrics():
        k = _COUNTERS.get(m.name)
        if k is None: continue
        v = getattr(m, "values", None)
        if v is None: out[k] = out.get(k, 0) + m.value
        else: out[k] = [a + b for a, b in zip(out.get(k, [0] * len(v)), v)]
    return out

def run_group(engine, prompts, sp, ids):
    "Add `prompts` together and step until they finish: (start, end, each request's token ids, each token's arrival)."
    from vllm.inputs import TokensPrompt
    rids = [f"bench-spec-{next(ids)}" for _ in prompts]
    toks, stamps = {r: [] for r in rids}, {r: [] for r in rids}
    t0 = time.perf_counter()
    for rid, p in zip(rids, prompts): engine.add_request(rid, TokensPrompt(prompt_token_ids=p), sp)
    while engine.has_unfinished_requests():
        outs = engine.step()
        now = time.perf_counter()
        for o in outs:
            if o.request_id not in toks: continue
            new = [t for c in o.outputs for t in c.token_ids]
            toks[o.request_id] += new; stamps[o.request_id] += [now] * len(new)
    return t0, time.perf_counter(), list(toks.values()), list(stamps.values())

def make_llm(job):
    "vLLM's engine with the job's settings and speculative_config, its stats on (the drafts are counted from them)."
    from vllm import LLM
    return LLM(model=job["model"], dtype=job["dtype"], max_model_len=job["max_model_len"], seed=job["seed"], max_num_seqs=job["max_num_seqs"],
               kv_cache_memory_bytes=job["kv_cache_memory_bytes"], speculative_config=job["speculative_config"], disable_log_stats=False)

def run_level(llm, prompts, sp, c, ids):
    "`prompts` `c` at a time, group after group: each request's TTFT and TPOT (s), tokens, the time, and the drafts counted meanwhile."
    before = spec_counters(llm)
    gs = [run_group(llm.llm_engine, prompts[i:i + c], sp, ids) for i in range(0, len(prompts), c)]
    after = spec_counters(llm)
    llm.reset_prefix_cache()
    spec = {k: [a - b for a, b in zip(v, before.get(k, [0] * len(v)))] if isinstance(v, list) else v - before.get(k, 0) for k, v in after.items()}
    return dict(ttft=[s[0] - g[0] for g in gs for s in g[3] if s],
                tpot=[(s[-1] - s[0]) / (len(s) - 1) for g in gs for s in g[3] if len(s) > 1],
                token_ids=[t for g in gs for t in g[2]], seconds=sum(g[1] - g[0] for g in gs), spec=spec)

def main():
    import itertools
    job = json.load(sys.stdin)
    import vllm
    from vllm import SamplingParams
    from vllm.sampling_params import RequestOutputKind
    llm = make_llm(job)
    engine, ids = llm.llm_engine, itertools.count()
    kind = RequestOutputKind.DELTA
    run_group(engine, [job["warmup_prompt"]], SamplingParams(max_tokens=4, ignore_eos=True, output_kind=kind), ids)  # warm-up, as litevllm's
    llm.reset_prefix_cache()
    rows = []
    for name, w in job["workloads"].items():
        sp = SamplingParams(temperature=0.0, max_tokens=w["max_tokens"], ignore_eos=w["ignore_eos"], output_kind=kind)
        for c in job["concurrency"]:
            c = min(c, len(w["prompts"]))
            rows.append(dict(workload=name, concurrency=c, num_prompts=len(w["prompts"])) | run_level(llm, w["prompts"], sp, c, ids))
    dtype = str(llm.llm_engine.model_config.dtype).removeprefix("torch.")
    print("LITEVLLM_RESULT " + json.dumps(dict(version=vllm.__version__, dtype=dtype, rows=rows)), flush=True)

if __name__ == "__main__":  # vLLM's engine core is a spawned process, which imports this file again
    main()
