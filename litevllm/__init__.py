"litevllm: a literate, notebook-first LLM inference engine with vLLM's public API."
__version__ = "0.0.1"

# The public names, imported on first use so that `import litevllm` stays light (no torch until it is needed).
_LAZY = {
    "LLM": "litevllm.llm", "SamplingParams": "litevllm.sampling_params", "RequestOutputKind": "litevllm.sampling_params",
    "RequestOutput": "litevllm.output_processor", "CompletionOutput": "litevllm.output_processor", "Logprob": "litevllm.output_processor",
    "EngineArgs": "litevllm.config", "LLMEngine": "litevllm.engine", "TextPrompt": "litevllm.inputs", "TokensPrompt": "litevllm.inputs",
    "AsyncLLM": "litevllm.async_llm", "AsyncEngineArgs": "litevllm.async_llm",
}
__all__ = list(_LAZY)


def __getattr__(name):
    if name in _LAZY:
        import importlib
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'litevllm' has no attribute {name!r}")
