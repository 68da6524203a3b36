"Shared pytest set-up: one temporary folder, Triton's interpreter on CPU-only machines, and the `gpu` marker."
import multiprocessing.util, os, shutil, tempfile
import pytest
import torch

# The session's temporary files (tmp_path's, and the folders that the tests, the notebooks' code and their engine-core
# and server processes make with tempfile) in one folder, removed at the end: left in /tmp run after run they filled
# the disk.
_SCRATCH = tempfile.mkdtemp(prefix="litevllm-tests-")
os.environ["TMPDIR"] = tempfile.tempdir = _SCRATCH
# removed at exit after multiprocessing's own folder in it (its finalizer runs at priority -100, this one next)
multiprocessing.util.Finalize(None, shutil.rmtree, args=(_SCRATCH,), kwargs=dict(ignore_errors=True), exitpriority=-101)

# Before anything imports triton: its own tl.* helpers are @triton.jit functions, built for the interpreter only if this is set.
if not torch.cuda.is_available(): os.environ.setdefault("TRITON_INTERPRET", "1")


def pytest_configure(config):
    config.addinivalue_line("markers", "gpu: needs a CUDA GPU (skipped without one)")


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available(): return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords: item.add_marker(skip)


@pytest.fixture(scope="module", autouse=True)
def _engine_in_process(request):
    """A test module that looks inside the engine (its scheduler, block pool, model runner) says `ENGINE_IN_PROCESS = True`:
    its engines then run the engine core in this process (VLLM_ENABLE_V1_MULTIPROCESSING=0, the InprocClient). Every other
    module gets vLLM's default, the engine core in a process of its own."""
    if not getattr(request.module, "ENGINE_IN_PROCESS", False):
        yield; return
    old = os.environ.get("VLLM_ENABLE_V1_MULTIPROCESSING")
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    try: yield
    finally:
        if old is None: os.environ.pop("VLLM_ENABLE_V1_MULTIPROCESSING", None)
        else: os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = old


@pytest.fixture(scope="session")
def _agents_engine_session():
    "The engine behind `agents_engine`: started once per session (an engine core process of its own: ~3 s a start)."
    from litevllm.async_llm import AsyncLLM, AsyncEngineArgs
    eng = AsyncLLM.from_engine_args(AsyncEngineArgs(max_model_len=2048, dtype="float32", seed=0, kv_cache_memory_bytes=256 * 2**20),
                                    served_model_name="SmolLM2-135M-Instruct")
    yield eng
    eng.shutdown()


@pytest.fixture(scope="module")
def agents_engine(_agents_engine_session):
    """The default model as an AsyncLLM (float32, a 256 MB KV pool): the engine of the tool-calling and /v1/responses tests.
    One engine serves both modules; each module gets it with an empty prefix cache, as a fresh engine would be (their greedy
    answers are compared with vLLM's recorded ones: a prefix hit left by the other module must not change how they are computed)."""
    import asyncio, time
    eng = _agents_engine_session
    deadline = time.monotonic() + 30
    while not asyncio.run(eng.reset_prefix_cache()):  # refused while a block is in use (a request of the last module ending)
        if time.monotonic() > deadline: pytest.fail("agents_engine: KV blocks still in use 30 s after the last module")
        time.sleep(0.1)
    return eng


@pytest.fixture(scope="session")
def hf_default_model():
    """transformers' copy of the default model in float32, loaded once per session (~2 s a load): the reference that
    test_generate, test_sampling, test_parity_offline, test_parity_server and test_tensor_parallel compare with.
    Shared read-only: eval mode, called under torch.no_grad, never changed."""
    from transformers import AutoModelForCausalLM
    from litevllm.config import default_model_path
    return AutoModelForCausalLM.from_pretrained(default_model_path(), dtype=torch.float32).eval()
