"""Tensor parallelism on CPU (gloo, 2 ranks): TP=2 gives TP=1's tokens (and transformers'), under the engine's own worker
processes and under torchrun; logprobs agree; prefix caching, chunked prefill and preemption still hold; a worker that
dies or raises ends the engine with an error naming its rank, and no process is left behind.

Comparisons ask for float32 (`dtype="auto"` is bfloat16 on this CPU)."""
import gc, json, os, signal, subprocess, sys, textwrap, threading, time
import pytest, torch
from transformers import AutoModelForCausalLM, AutoTokenizer
from litevllm import LLM, SamplingParams
from litevllm.config import default_model_path
from litevllm.executor import EngineDeadError, MultiprocExecutor
from litevllm.models.llama import save_random_model
from litevllm.cli import main

ENGINE_IN_PROCESS = True  # these tests look inside the engine core (conftest: VLLM_ENABLE_V1_MULTIPROCESSING=0)

PROMPTS = ["The capital of France is", "Once upon a time", "def fibonacci(n):", "List three colors:\n1.",
           "The quick brown fox jumps over the lazy dog. " * 4]
KW = dict(dtype="float32", max_model_len=256, num_gpu_blocks_override=128, seed=0)

# family -> save_random_model overrides; heads chosen so that the KV heads do not divide evenly over 2 ranks (3 -> 2 + 1),
# or are fewer than the ranks (1: replicated on both), or divide (2 -> 1 + 1)
FAMILIES = {"llama": dict(num_attention_heads=4, num_key_value_heads=2),
            "qwen2": dict(num_attention_heads=6, num_key_value_heads=1, hidden_size=96),
            "qwen3": dict(num_attention_heads=6, num_key_value_heads=3, hidden_size=96, tie_word_embeddings=False)}


def alive(pid:int) -> bool:
    "Is `pid` a live process (a zombie counts as gone)?"
    try:
        with open(f"/proc/{pid}/stat") as f: return f.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError: return False


def worker_pids(llm) -> list[int]:
    ex = llm.llm_engine.engine_core.model_executor
    assert isinstance(ex, MultiprocExecutor)
    return [p.pid for p in ex.procs]


def shutdown_and_check(llm, tp:int):
    "Shut the engine down and check its workers are gone."
    pids = worker_pids(llm) if tp > 1 else []
    llm.llm_engine.engine_core.shutdown()
    assert not any(alive(p) for p in pids)


class Engines:
    """The module's engines with the KW settings, one per (model, TP size), made when first asked for and shared by the tests
    that run the same model at the same TP size (a TP=2 start is ~3 s: two worker processes load the model): the default
    model's pair serves test_default_model_tp2, test_torchrun_external_launcher and test_structured_output_tp2; the llama
    TP=2 engine of test_families_tp2 is then ended by test_worker_raises. `take` hands an engine over to a test that ends
    it (a fresh one if none is made); `close` shuts the others down, each checked to leave no worker behind."""
    def __init__(self): self.made = {}
    def get(self, path, tp:int):
        key = (str(path), tp)
        if key not in self.made: self.made[key] = LLM(str(path), tensor_parallel_size=tp, **KW)
        return self.made[key]
    def take(self, path, tp:int): return self.made.pop((str(path), tp), None) or LLM(str(path), tensor_parallel_size=tp, **KW)
    def close(self):
        while self.made:
            (_, tp), llm = self.made.popitem()
            shutdown_and_check(llm, tp)


@pytest.fixture(scope="module")
def engines():
    e = Engines()
    yield e
    e.close()


def generate(engines, path, tp:int, prompts, params):
    "Outputs of `prompts` on the module's engine for `path` with `tp` ranks."
    return engines.get(path, tp).generate(prompts, params, use_tqdm=False)


def hf_greedy(model, ids, max_new):
    out = model.generate(torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long), do_sample=False,
                         max_new_tokens=max_new, pad_token_id=model.generation_config.eos_token_id, top_p=None, top_k=None, temperature=None)
    return out[0, len(ids):].tolist()


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    d = tmp_path_factory.mktemp("tp")
    return {name: save_random_model(d/name, name.split("-")[0], **kw) for name, kw in FAMILIES.items()}


def check_greedy(engines, path, max_tokens:int, logprobs:int|None=None, hf=None):
    "TP=2 greedy == TP=1 greedy == transformers' greedy (`hf`, else loaded from `path`); with logprobs, TP=2's within 1e-4 of TP=1's."
    sp = SamplingParams(temperature=0, max_tokens=max_tokens, logprobs=logprobs, prompt_logprobs=logprobs)
    one = generate(engines, path, 1, PROMPTS, sp)
    two = generate(engines, path, 2, PROMPTS, sp)
    assert [o.outputs[0].token_ids for o in two] == [o.outputs[0].token_ids for o in one]
    if hf is None: hf = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    with torch.no_grad():
        assert [list(o.outputs[0].token_ids) for o in one] == [hf_greedy(hf, o.prompt_token_ids, max_tokens) for o in one]
    if logprobs:
        def close(a, b):  # one position's {token: Logprob}: the same top tokens, values within 1e-4
            assert a.keys() == b.keys()
            assert all(abs(a[t].logprob - b[t].logprob) < 1e-4 for t in a)
        for o1, o2 in zip(one, two):
            for a, b in zip(o1.outputs[0].logprobs, o2.outputs[0].logprobs): close(a, b)
            for a, b in zip(o1.prompt_logprobs[1:], o2.prompt_logprobs[1:]): close(a, b)
    return one


def test_default_model_tp2(engines, hf_default_model):
    "The default model: 9 query heads in 3 KV groups on 2 ranks (6 + 3 query heads, 2 + 1 KV heads); logprobs too."
    one = check_greedy(engines, default_model_path(), 16, logprobs=5, hf=hf_default_model)
    tok = AutoTokenizer.from_pretrained(default_model_path())
    assert tok.decode(one[0].outputs[0].token_ids).startswith(" Paris")


@pytest.mark.parametrize("family", list(FAMILIES))
def test_families_tp2(engines, models, family):
    check_greedy(engines, models[family], 12)


def test_tp2_prefix_caching_chunked_prefill_preemption(models):
    "A small pool (preemption), a small token budget (chunked prefill), a shared prefix (prefix caching): TP=2 as TP=1."
    path = models["qwen3"]
    kw = dict(num_gpu_blocks_override=10, max_num_batched_tokens=48, max_num_seqs=4, block_size=16, max_model_len=128)
    prefix = "The quick brown fox jumps over the lazy dog. " * 5
    prompts = [prefix + s for s in ("Then", "And so", "Finally,", "But")]
    sp = SamplingParams(temperature=0, max_tokens=60, ignore_eos=True)
    res = {}
    for tp in (1, 2):
        llm = LLM(str(path), tensor_parallel_size=tp, **(KW | kw))
        first = llm.generate(prompts[:1], sp, use_tqdm=False)
        rest = llm.generate(prompts[1:], sp, use_tqdm=False)
        stats = llm.llm_engine.get_stats()
        res[tp] = [o.outputs[0].token_ids for o in first + rest]
        assert rest[0].num_cached_tokens >= 16                  # the prefix came from the cache
        assert len(first[0].prompt_token_ids) > kw["max_num_batched_tokens"]  # the prompt took more than one step: chunked
        assert stats.num_preemptions > 0                        # the pool was too small for all four
        llm.llm_engine.engine_core.shutdown()
    assert res[2] == res[1]


TORCHRUN_SCRIPT = textwrap.dedent('''
    import json, sys
    import torch.distributed as dist
    from litevllm import LLM, SamplingParams
    from litevllm.sampling_params import StructuredOutputsParams
    if __name__ == "__main__":
        model, out, prompts = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
        llm = LLM(model, tensor_parallel_size=2, distributed_executor_backend="external_launcher", dtype="float32",
                  max_model_len=256, num_gpu_blocks_override=128, seed=0)
        params = [SamplingParams(temperature=0, max_tokens=12)] * len(prompts) + [SamplingParams(temperature=1.0, seed=7, max_tokens=12)]
        outs = llm.generate(prompts + prompts[:1], params, use_tqdm=False)
        try:  # refused: each rank compiles grammars on its own schedule, which would split the ranks' batches
            llm.generate(prompts[:1], SamplingParams(structured_outputs=StructuredOutputsParams(choice=["a", "b"])), use_tqdm=False)
            refused = False
        except ValueError as e: refused = "external_launcher" in str(e)
        with open(f"{out}.{dist.get_rank()}", "w") as f: json.dump([list(o.outputs[0].token_ids) for o in outs] + [refused], f)
''')


@pytest.mark.parametrize("family", ["qwen3", "default"])
def test_torchrun_external_launcher(engines, models, family, tmp_path):
    "Every rank a torchrun process running the same script: both ranks get TP=1's greedy tokens (and the same sampled ones)."
    path = default_model_path() if family == "default" else models[family]
    script = tmp_path/"tp_script.py"
    script.write_text(TORCHRUN_SCRIPT)
    env = os.environ | dict(OMP_NUM_THREADS="1", PYTHONPATH=os.pathsep.join([os.getcwd(), os.environ.get("PYTHONPATH", "")]))
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", str(script), str(path),
           str(tmp_path/"out"), json.dumps(PROMPTS)]
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    ranks = [json.loads((tmp_path/f"out.{i}").read_text()) for i in range(2)]
    assert ranks[0] == ranks[1] and ranks[0][-1] is True  # the structured request was refused with a clear error on each rank
    one = generate(engines, path, 1, PROMPTS, SamplingParams(temperature=0, max_tokens=12))
    assert ranks[0][:len(PROMPTS)] == [list(o.outputs[0].token_ids) for o in one]


def test_worker_killed_mid_generation(models):
    "SIGKILL to rank 1 while generate runs: EngineDeadError naming rank 1 within seconds, no worker left."
    llm = LLM(str(models["llama"]), tensor_parallel_size=2, **(KW | dict(max_model_len=512)))
    pids = worker_pids(llm)
    assert all(alive(p) for p in pids)
    sp = SamplingParams(temperature=0, max_tokens=480, ignore_eos=True)
    sched, killed = llm.llm_engine.engine_core.scheduler, []
    def kill():  # once the requests are decoding (a few tokens out of 480), from another thread, as an OOM kill would come
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not any(r.num_output_tokens >= 5 for r in list(sched.running)): time.sleep(0.005)
        killed.append(time.monotonic()); os.kill(pids[1], signal.SIGKILL)
    threading.Thread(target=kill, daemon=True).start()
    with pytest.raises(EngineDeadError, match="rank 1 died") as e:
        llm.generate(["Once upon a time"] * 16, [sp] * 16, use_tqdm=False)
    took = time.monotonic() - killed[0]
    assert took < 5, took
    assert "exit code -9" in str(e.value)
    time.sleep(0.5)
    assert not any(alive(p) for p in pids)
    with pytest.raises(EngineDeadError): llm.generate(["again"], SamplingParams(max_tokens=2), use_tqdm=False)  # it stays dead


def test_worker_raises(engines, models):
    "A call that raises on the workers ends the engine with the rank and the exception named; no worker left."
    llm = engines.take(models["llama"], 2)  # test_families_tp2[llama]'s engine: this test ends it
    pids = worker_pids(llm)
    ex = llm.llm_engine.engine_core.model_executor
    infos = ex.collective_rpc("shard_info")  # each rank holds only its slice: 4 query heads as 2 + 2, 2 KV heads as 1 + 1
    assert [i["head_ranges"] for i in infos] == [((0, 2), (0, 1)), ((2, 4), (1, 2))]
    assert [i["vocab"] for i in infos] == [(0, 24576), (24576, 49152)] and [i["down_cols"] for i in infos] == [(0, 64), (64, 128)]
    with pytest.raises(EngineDeadError, match=r"rank [01] raised IndexError"):
        ex.collective_rpc("shard_info", (99,))  # layer 99 does not exist
    time.sleep(0.5)
    assert not any(alive(p) for p in pids)


def test_workers_end_with_the_engine(engines, models):
    "An engine that is dropped takes its workers with it."
    llm = engines.take(models["llama"], 2)  # no longer shared: this test drops it
    pids = worker_pids(llm)
    assert llm.generate(["Hi"], SamplingParams(max_tokens=3, ignore_eos=True), use_tqdm=False)[0].outputs[0].token_ids
    del llm; gc.collect()
    time.sleep(0.5)
    assert not any(alive(p) for p in pids)


def test_bad_tensor_parallel_size(models):
    with pytest.raises(ValueError, match="tensor_parallel_size"):  # 4 query heads cannot give 8 ranks one each
        LLM(str(models["llama"]), tensor_parallel_size=8, **KW)
    with pytest.raises(ValueError, match="torchrun"):  # external_launcher outside torchrun
        LLM(str(models["llama"]), tensor_parallel_size=2, distributed_executor_backend="external_launcher", **KW)


def test_bench_and_cli_tensor_parallel_size(models, tmp_path, capsys):
    out = tmp_path/"t.json"
    assert main(["bench", "throughput", "--model", str(models["llama"]), "--workload", "custom", "--num-requests", "4",
                 "--input-len-range", "4", "24", "--output-len-range", "3", "9", "--max-model-len", "64", "--ttft-prompt-len", "0",
                 "--tensor-parallel-size", "2", "--breakdown", "--output-json", str(out)]) == 0
    rep = json.loads(out.read_text())
    assert rep["settings"]["engine"]["tensor_parallel_size"] == 2 and rep["results"][-1]["output_tokens"] > 0
    assert {r["phase"] for r in rep["breakdown_all"]} >= {"prepare", "forward", "sample"}
    gc.collect()
    assert main(["generate", "--model", str(models["llama"]), "--max-tokens", "4", "--tensor-parallel-size", "2",
                 "--max-model-len", "64", "--dtype", "float32", "Hello"]) == 0
    assert "Generated:" in capsys.readouterr().out


def test_structured_output_tp2(engines):
    "Structured requests at TP=2: the step's grammar bitmask reaches every rank, so all ranks mask and sample alike."
    from litevllm.sampling_params import StructuredOutputsParams
    schema = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 12}}, "required": ["city"],
              "additionalProperties": False}
    params = [SamplingParams(temperature=0, max_tokens=24, structured_outputs=StructuredOutputsParams(json=schema)),
              SamplingParams(temperature=0, max_tokens=6, structured_outputs=StructuredOutputsParams(choice=[" yes", " no"])),
              SamplingParams(temperature=0, max_tokens=8)]  # a free request in the same batch
    prompts = ["The capital of France as JSON:", "Is Paris in France? Answer:", "Once upon a time"]
    two = generate(engines, default_model_path(), 2, prompts, params)
    one = generate(engines, default_model_path(), 1, prompts, params)
    assert [o.outputs[0].token_ids for o in two] == [o.outputs[0].token_ids for o in one]
    assert set(json.loads(two[0].outputs[0].text)) == {"city"}
    assert two[1].outputs[0].text in (" yes", " no")
