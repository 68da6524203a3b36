"""Data parallelism on a Ray cluster (`data_parallel_backend="ray"`, vLLM's Ray DP backend): on a local two-node Ray
cluster, the two engine-core actors land on different nodes and give the in-process engine's greedy tokens; a killed
actor fails the next generate with `EngineDeadError` in seconds; shutdown leaves no actor alive.

Starting the cluster (two raylets) takes ~20 s on a 2-core machine and each engine actor ~20 s more: one cluster and
one data-parallel `LLM` serve the whole module."""
import time
import pytest

ray = pytest.importorskip("ray", reason="the Ray data-parallel backend needs Ray (pip install ray)")
from ray.cluster_utils import Cluster
from litevllm import LLM, SamplingParams
from litevllm.core_client import SyncMPClient, RayEngineManager, _init_ray
from litevllm.executor import EngineDeadError

PROMPTS = ["The capital of France is", "Once upon a time", "def fibonacci(n):", "Water boils at"]
GREEDY = SamplingParams(temperature=0, max_tokens=12)
ARGS = dict(max_model_len=256, kv_cache_memory_bytes=64 * 2**20)


def test_init_ray_connects_as_vllm_does(monkeypatch):
    "Not initialised: `RAY_ADDRESS` if set, else `ray.init()`'s own choice (a `ray start` cluster here, or a new local one)."
    calls = []
    monkeypatch.setattr(ray, "is_initialized", lambda: bool(calls))
    monkeypatch.setattr(ray, "init", lambda **kw: calls.append(kw))
    monkeypatch.setenv("RAY_ADDRESS", "10.1.2.3:6379")
    _init_ray(); _init_ray()
    assert calls == [dict(address="10.1.2.3:6379")]  # once: an initialised Ray is used as it is
    calls.clear(); monkeypatch.delenv("RAY_ADDRESS")
    _init_ray()
    assert calls == [dict(address=None)]


@pytest.fixture(scope="module")
def inproc_tokens():
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
        llm = LLM(**ARGS)
        return [o.outputs[0].token_ids for o in llm.generate(PROMPTS, GREEDY, use_tqdm=False)]


@pytest.fixture(scope="module")
def cluster():
    "A head node and a worker node, one CPU each: two engine actors (one CPU each) cannot share a node."
    if ray.is_initialized(): ray.shutdown()
    c = Cluster(initialize_head=True, head_node_args=dict(num_cpus=1, include_dashboard=False))
    try:
        c.add_node(num_cpus=1)
        c.wait_for_nodes()
        yield c
    finally:
        ray.shutdown()
        c.shutdown()


@pytest.fixture(scope="module")
def ray_llm(cluster):
    "`LLM(data_parallel_backend='ray')`, connecting this process to the cluster through `RAY_ADDRESS`."
    assert not ray.is_initialized()
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("RAY_ADDRESS", cluster.address)
        mp.delenv("LITEVLLM_RAY_CPUS_PER_ENGINE", raising=False)
        t0 = time.monotonic()
        llm = LLM(data_parallel_size=2, data_parallel_backend="ray", **ARGS)
        print(f"two Ray engine actors up in {time.monotonic() - t0:.1f} s")
        try: yield llm
        finally: llm.llm_engine.shutdown()


def test_connected_by_ray_address(ray_llm, cluster):
    assert ray.is_initialized() and ray.get_runtime_context().gcs_address == cluster.address


def test_engines_on_two_nodes(ray_llm):
    client = ray_llm.llm_engine.engine_core
    assert isinstance(client, SyncMPClient) and isinstance(client.engine_manager, RayEngineManager)
    where = client.engine_manager.where
    alive = {n["NodeID"] for n in ray.nodes() if n["Alive"]}
    assert len(alive) == 2 and set(w["node_id"] for w in where) == alive  # one engine on each raylet
    ip = where[0]["node_ip"]
    assert client.input_address.startswith(f"tcp://{ip}:") and client.output_address.startswith(f"tcp://{ip}:")


def test_same_tokens_as_in_process(ray_llm, inproc_tokens):
    outs = ray_llm.generate(PROMPTS, GREEDY, use_tqdm=False)
    assert [o.outputs[0].token_ids for o in outs] == inproc_tokens


def test_too_few_cpus_fails_at_once(ray_llm):
    "Three one-CPU engines on a two-CPU cluster: an error now, not actors pending until the hello wait times out."
    t0 = time.monotonic()
    with pytest.raises(ValueError, match="needs 3 CPUs"): LLM(data_parallel_size=3, data_parallel_backend="ray", **ARGS)
    assert time.monotonic() - t0 < 10


def test_killed_actor_fails_fast_and_shutdown_kills_the_rest(ray_llm):
    client = ray_llm.llm_engine.engine_core
    actors = client.engine_manager.actors
    ray.kill(actors[1])
    t0 = time.monotonic()
    with pytest.raises(EngineDeadError, match="engine core 1"):
        ray_llm.generate(PROMPTS, SamplingParams(temperature=0, max_tokens=200, ignore_eos=True), use_tqdm=False)
    assert time.monotonic() - t0 < 5
    with pytest.raises(EngineDeadError): client.check_health()
    ray_llm.llm_engine.shutdown()  # engine 0 is still alive: shutdown kills it
    for a in actors:
        with pytest.raises(ray.exceptions.RayActorError): ray.get(a.where.remote(), timeout=30)
    deadline = time.monotonic() + 15  # both CPUs free again: nothing of the engines holds them
    while ray.available_resources().get("CPU", 0) < 2 and time.monotonic() < deadline: time.sleep(0.2)
    assert ray.available_resources().get("CPU", 0) == 2
