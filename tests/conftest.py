"Shared pytest set-up: Triton's interpreter on CPU-only machines, and the `gpu` marker."
import os
import pytest
import torch

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


@pytest.fixture(scope="module")
def agents_engine():
    "The default model as an AsyncLLM (float32, a 256 MB KV pool): the engine of the tool-calling and /v1/responses tests."
    from litevllm.async_llm import AsyncLLM, AsyncEngineArgs
    eng = AsyncLLM.from_engine_args(AsyncEngineArgs(max_model_len=2048, dtype="float32", seed=0, kv_cache_memory_bytes=256 * 2**20),
                                    served_model_name="SmolLM2-135M-Instruct")
    yield eng
    eng.shutdown()
