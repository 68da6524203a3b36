"""KV connectors end to end, the engine core in a process of its own (vLLM's default): disaggregated prefill between two
engines with the ExampleConnector, the offloading connector under preemption, and the command-line flags."""
import argparse, json
import pytest
from litevllm import LLM, SamplingParams
from litevllm.cli import add_engine_args, engine_kwargs
from litevllm.config import EngineArgs, KVTransferConfig

PROMPTS = ["The capital of France is Paris. The capital of Germany is Berlin. The capital of Italy is",
           "Once upon a time, in a land far away, there lived a wise old owl who knew every star in the sky. One night, the owl",
           "def fibonacci(n):\n    # returns the n-th Fibonacci number, computed iteratively with two running values\n"]


def test_disaggregated_prefill(tmp_path):
    "A producer prefills and saves; a consumer (another engine-core process) loads and decodes: the same tokens, greedy and seeded."
    kt = lambda role: dict(kv_connector="ExampleConnector", kv_role=role, kv_connector_extra_config={"shared_storage_path": str(tmp_path)})
    params = [SamplingParams(temperature=0, max_tokens=10), SamplingParams(temperature=0.8, seed=7, max_tokens=10),
              SamplingParams(temperature=0, max_tokens=10, stop=["\n\n"])]
    producer = LLM(max_model_len=256, dtype="float32", kv_transfer_config=kt("kv_producer"))
    expected = producer.generate(PROMPTS, params, use_tqdm=False)
    producer.llm_engine.shutdown()
    assert len(list(tmp_path.iterdir())) == len(PROMPTS)
    consumer = LLM(max_model_len=256, dtype="float32", kv_transfer_config=kt("kv_consumer"))
    outs = consumer.generate(PROMPTS, params, use_tqdm=False)
    consumer.llm_engine.shutdown()
    assert [o.outputs[0].token_ids for o in outs] == [o.outputs[0].token_ids for o in expected]
    assert [o.num_cached_tokens for o in outs] == [(len(o.prompt_token_ids) - 1) // 16 * 16 for o in outs]
    assert len(list(tmp_path.iterdir())) == len(PROMPTS)  # a consumer saves nothing


def test_offloading_under_preemption(tmp_path):
    "A pool too small for the batch (preemptions), a CPU tier of 6 blocks and a disk tier: the second time, the prompts come from the tiers, the same tokens."
    kw = dict(max_model_len=256, dtype="float32", num_gpu_blocks_override=16)  # 256 slots for ~300 prompt tokens: a preemption (checked in-process)
    prompts = [p * 3 for p in PROMPTS] + [PROMPTS[0] * 4]
    greedy = SamplingParams(temperature=0, max_tokens=24)
    llm = LLM(**kw, kv_transfer_config=dict(kv_connector="OffloadingConnector", kv_role="kv_both",
              kv_connector_extra_config={"num_cpu_blocks": 6, "disk_path": str(tmp_path), "disk_bytes_to_use": 1 << 30}))
    first = llm.generate(prompts, greedy, use_tqdm=False)  # the tiers fill as requests finish (26a_kv_offload compares with no connector)
    outs = llm.generate(prompts, greedy, use_tqdm=False)   # now the prompts' blocks come from the tiers
    assert [o.outputs[0].token_ids for o in outs] == [o.outputs[0].token_ids for o in first]
    assert sum(o.num_cached_tokens for o in outs) > sum(o.num_cached_tokens for o in first)
    llm.llm_engine.shutdown()


def test_cli_flags():
    "--kv-transfer-config (JSON) and --kv-offloading-size (GiB), as vLLM's."
    p = argparse.ArgumentParser(); add_engine_args(p)
    kw = engine_kwargs(p.parse_args(["--kv-transfer-config", json.dumps({"kv_connector": "ExampleConnector", "kv_role": "kv_both"})]))
    kt = KVTransferConfig.resolve(EngineArgs(**kw))
    assert (kt.kv_connector, kt.is_kv_producer, kt.is_kv_consumer) == ("ExampleConnector", True, True)
    kt = KVTransferConfig.resolve(EngineArgs(**engine_kwargs(p.parse_args(["--kv-offloading-size", "2"]))))
    assert (kt.kv_connector, kt.get_from_extra_config("cpu_bytes_to_use", 0)) == ("OffloadingConnector", 2 << 30)
    with pytest.raises(ValueError, match="kv_role"): KVTransferConfig.resolve(EngineArgs(kv_transfer_config={"kv_connector": "ExampleConnector"}))
    with pytest.raises(ValueError, match="tensor_parallel_size"):
        KVTransferConfig.resolve(EngineArgs(tensor_parallel_size=2, kv_transfer_config={"kv_connector": "ExampleConnector", "kv_role": "kv_both"}))
