"litevllm: a literate, notebook-first LLM inference engine with vLLM's public API."
__version__ = "0.0.1"

import os as _os
# LITEVLLM_CPU_ISA=avx2 (or avx512, generic) makes litevllm behave as on a narrower CPU (00_platform's `cpu_info`). torch's own
# kernels, oneDNN and MKL follow these variables, which they read on their first use: set here, before litevllm runs any
# torch op (a value set by the user stays).
_TORCH_ISA_ENV = {"avx2": ("avx2", "AVX2", "AVX2"), "avx512": ("avx512", "AVX512_CORE", "AVX512"), "generic": ("default", "SSE41", "SSE4_2")}
if (_isa := _os.environ.get("LITEVLLM_CPU_ISA", "").strip().lower()) in _TORCH_ISA_ENV:
    for _k, _v in zip(("ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA", "MKL_ENABLE_INSTRUCTIONS"), _TORCH_ISA_ENV[_isa]): _os.environ.setdefault(_k, _v)

# The public names, imported on first use so that `import litevllm` stays light (no torch until it is needed).
_LAZY = {
    "LLM": "litevllm.llm", "SamplingParams": "litevllm.sampling_params", "RequestOutputKind": "litevllm.sampling_params",
    "RequestOutput": "litevllm.output_processor", "CompletionOutput": "litevllm.output_processor", "Logprob": "litevllm.output_processor",
    "EngineArgs": "litevllm.config", "LLMEngine": "litevllm.engine", "TextPrompt": "litevllm.inputs", "TokensPrompt": "litevllm.inputs",
    "AsyncLLM": "litevllm.async_llm", "AsyncEngineArgs": "litevllm.async_llm", "LoRARequest": "litevllm.lora.request",
}
__all__ = list(_LAZY)


def __getattr__(name):
    if name in _LAZY:
        import importlib
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'litevllm' has no attribute {name!r}")
