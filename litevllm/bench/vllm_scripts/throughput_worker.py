"Run a benchmark job through real vLLM (in vLLM's own environment): the job as JSON on stdin, one result line on stdout."
import json, os, sys, time

# Under LITEVLLM_CPU_ISA (litevllm behaving as on a narrower CPU) vLLM is narrowed the same way: torch, oneDNN and MKL
# through the variables litevllm set (inherited), vLLM's choice of its _C / _C_AVX512 / _C_AVX2 kernels here (it asks
# torch.cpu, which reads the CPU itself). At module level: vLLM's engine core, a spawned process, imports this file again.
if os.environ.get("LITEVLLM_CPU_ISA", "").lower() in ("avx2", "avx512", "generic"):
    import torch
    torch.cpu._is_avx512_bf16_supported = lambda: False
    if os.environ["LITEVLLM_CPU_ISA"].lower() != "avx512": torch.cpu._is_avx512_supported = lambda: False

def make_llm(job):
    "vLLM's engine with the job's settings, LoRA enabled when the job brings adapters."
    from vllm import LLM
    loras = job.get("loras")  # [[name, id, path], ...]: request i runs on loras[i % len(loras)]
    lora_kw = dict(enable_lora=True, max_loras=len(loras), max_lora_rank=job["max_lora_rank"]) if loras else {}
    return LLM(model=job["model"], dtype=job["dtype"], max_model_len=job["max_model_len"], seed=job["seed"],
               max_num_seqs=job["max_num_seqs"], gpu_memory_utilization=job["gpu_memory_utilization"],
               kv_cache_memory_bytes=job["kv_cache_memory_bytes"], **lora_kw)

def timed_generate(llm, job):
    "A warm-up request, then one timed `generate` over the whole workload: (outputs, seconds)."
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt
    loras = job.get("loras")
    prompts = [TokensPrompt(prompt_token_ids=p) for p in job["prompts"]]
    params = [SamplingParams(temperature=job["temperature"], max_tokens=m, ignore_eos=True) for m in job["max_tokens"]]
    llm.generate(prompts[:1], SamplingParams(max_tokens=8, ignore_eos=True), use_tqdm=False)  # warm-up, as litevllm's
    llm.reset_prefix_cache()
    t0 = time.perf_counter()
    if loras:
        from vllm.lora.request import LoRARequest
        lrs = [LoRARequest(n, i, p) for n, i, p in loras]
        for lr in lrs: llm.llm_engine.add_lora(lr)  # loaded before the clock starts, as litevllm's
        t0 = time.perf_counter()
        outs = llm.generate(prompts, params, use_tqdm=False, lora_request=[lrs[i % len(lrs)] for i in range(len(prompts))])
    else: outs = llm.generate(prompts, params, use_tqdm=False)
    return outs, time.perf_counter() - t0

def ttft_runs(llm, job):
    "Seconds to the first token of the job's one TTFT prompt, `ttft_reps` times (prefix cache reset before each)."
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt
    ttft = []
    for _ in range(job["ttft_reps"] if job["ttft_prompt"] else 0):  # one prompt, one token: the time to first token
        llm.reset_prefix_cache()
        t0 = time.perf_counter()
        llm.generate([TokensPrompt(prompt_token_ids=job["ttft_prompt"])], SamplingParams(max_tokens=1), use_tqdm=False)
        ttft.append(time.perf_counter() - t0)
    return ttft

def main():
    job = json.load(sys.stdin)
    import vllm
    llm = make_llm(job)
    outs, seconds = timed_generate(llm, job)
    ttft = ttft_runs(llm, job)
    n_out = [len(o.outputs[0].token_ids) for o in outs]
    dtype = str(llm.llm_engine.model_config.dtype).removeprefix("torch.")  # what vLLM ran (its choice for "auto")
    print("LITEVLLM_RESULT " + json.dumps(dict(version=vllm.__version__, dtype=dtype, seconds=seconds, output_tokens=sum(n_out),
                                               per_request_tokens=n_out, ttft_s=ttft)), flush=True)

if __name__ == "__main__":  # vLLM's engine core is a spawned process, which imports this file again
    main()
