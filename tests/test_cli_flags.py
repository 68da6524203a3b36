"`litevllm serve` and vLLM 0.32's `vllm serve` flags: each one works, is an accepted no-op, or is refused (nbs/40_cli.ipynb)."
import argparse, json, logging, shlex
from pathlib import Path
import pytest
from litevllm.cli import VLLM_SERVE_SPECS, make_parser, warn_vllm_noops

VLLM_FLAGS = json.loads((Path(__file__).parent / "data" / "vllm032_serve_flags.json").read_text())  # dump_vllm_serve_flags.py
OPTIONS = [a for a in VLLM_FLAGS["options"] if a["option_strings"]]
BY_CLASS = {c: {f.flag: f for f in VLLM_SERVE_SPECS.values() if f.cls == c} for c in ("works", "no-op", "refused")}


@pytest.fixture(scope="module")
def serve():
    "The `litevllm serve` sub-parser (add_vllm_noop_args included)."
    return make_parser()._subparsers._group_actions[0].choices["serve"]


def parse(cmd:str) -> argparse.Namespace:
    "A `litevllm serve ...` command line (without the `litevllm`), parsed."
    return make_parser().parse_args(shlex.split(cmd))


def test_every_vllm_flag_is_classified():
    assert VLLM_FLAGS["vllm_version"] == "0.32.0" and len(OPTIONS) == 317
    vllm_opts = {o for a in OPTIONS for o in a["option_strings"]}
    table_opts = [o for f in VLLM_SERVE_SPECS.values() for o in f.opts]
    assert len(table_opts) == len(set(table_opts)), "an option string is in the table twice"
    assert set(table_opts) == vllm_opts, (sorted(vllm_opts - set(table_opts)), sorted(set(table_opts) - vllm_opts))
    for a in OPTIONS:  # one entry per vLLM flag, named by its first long option string, with all of vLLM's names
        f = VLLM_SERVE_SPECS[next(o for o in a["option_strings"] if o.startswith("--"))]
        assert set(f.opts) == set(a["option_strings"]) and f.cls in ("works", "no-op", "refused") and f.why, f


@pytest.mark.parametrize("a", [a for a in OPTIONS if a["option_strings"][0] in BY_CLASS["no-op"] or
                               (len(a["option_strings"]) > 1 and a["option_strings"][1] in BY_CLASS["no-op"])],
                         ids=lambda a: a["option_strings"][0])
def test_noop_takes_vllms_arguments(a):
    "The table's nargs, kind, choices and default are vLLM's (it was generated from this JSON)."
    f = VLLM_SERVE_SPECS[next(o for o in a["option_strings"] if o.startswith("--"))]
    kind = {"BooleanOptionalAction": "b", "store_true": "t", "append": "a"}.get(a["action"])
    if kind: assert f.kind == kind
    else: assert f.kind in "ifsnk" and f.nargs == a["nargs"]
    if a["type"] in ("int", "float"): assert f.kind == a["type"][0]
    if a["type"] in ("human_readable_int",): assert f.kind == "n"
    assert f.choices == ([str(c) for c in a["choices"] if c is not None] if a["choices"] else None)
    if f.default is not None: assert f.default == a["default"] or str(f.default) == str(a["default"]) or float(f.default) == float(a["default"])


def test_serve_parser_matches_the_table(serve):
    have = serve._option_string_actions
    for f in BY_CLASS["works"].values():  # "works" is true: litevllm has the flag, and vLLM's other names lead to it
        assert all(o in have for o in f.opts), f.opts
        assert len({have[o].dest for o in f.opts}) == 1, f.opts
    for f in BY_CLASS["no-op"].values():
        assert all(o in have for o in f.opts), f.opts
        assert have[f.flag].default is None and have[f.flag].help == argparse.SUPPRESS, f.flag
    for f in BY_CLASS["refused"].values(): assert not any(o in have for o in f.opts), f.opts


@pytest.mark.parametrize("opt", sorted(o for f in BY_CLASS["refused"].values() for o in f.opts))
def test_refused_flags_stop_the_command(opt, serve, capsys):
    with pytest.raises(SystemExit) as e: parse(f"serve M {opt} '{{\"a\": 1}}'")
    assert e.value.code == 2
    if opt.startswith("--"):  # not even as an abbreviation of an accepted flag: argparse leaves it unrecognized
        assert serve.parse_known_args(["M", opt])[1] == [opt]
        assert f"unrecognized arguments: {opt}" in capsys.readouterr().err


# launch commands vLLM 0.32's own parser accepts (checked with .vllm-venv), one a line
VLLM_COMMANDS = """
serve M --host 0.0.0.0 --port 8000 --dtype float32 --max-model-len 2048 --gpu-memory-utilization 0.9 --served-model-name x --uvicorn-log-level warning --enforce-eager --max-num-seqs 64 --seed 0
serve M -tp 2 --distributed-executor-backend mp --block-size 16 --enable-prefix-caching --max-num-batched-tokens 8192 --enable-chunked-prefill --disable-log-stats --api-key k
serve --model M --port 8001 --device-memory-utilization 0.8 -dp 2 -dpb mp --no-enable-prefix-caching --max-model-len 4096 --trust-remote-code --enable-prompt-tokens-details --no-enable-force-include-usage --return-tokens-as-token-ids
serve M --max-model-len 32k --max-num-batched-tokens 2K --kv-cache-memory-bytes 1G
serve M --api-server-count 1 --max-log-len 100 --enable-log-requests --no-enable-log-deltas -pp 1 --compilation-config '{"mode": 3}' --async-scheduling --stream-interval 1 --cpu-offload-gb 0 --limit-mm-per-prompt '{"image": 0}' --language-model-only --log-level DEBUG
serve M --otlp-traces-endpoint http://localhost:4317 --collect-detailed-traces model worker --moe-backend TRITON --performance-mode throughput --enable-sleep-mode --numa-bind-nodes 0 1 -ep --kv-cache-metrics --disable-custom-all-reduce --safetensors-load-strategy lazy --download-dir /tmp/x --hf-token abc
serve M --enable-lora --lora-modules a=/x '{"name": "b", "path": "/y", "base_model_name": "M"}' --max-loras 2 --max-lora-rank 32 --max-cpu-loras 4
serve M --enable-expert-parallel --all2all-backend naive --mm-processor-cache-gb 0 --disable-log-stats --aggregate-engine-logging --max-num-scheduled-tokens 1k --safetensors-prefetch-block-size 16M
""".strip().splitlines()


@pytest.mark.parametrize("cmd", VLLM_COMMANDS, ids=range(len(VLLM_COMMANDS)))
def test_vllm_launch_commands_parse(cmd): assert parse(cmd).command == "serve"


def test_launch_command_values(caplog):
    ns = parse(VLLM_COMMANDS[0])
    assert (ns.model, ns.host, ns.port, ns.dtype, ns.max_model_len, ns.gpu_memory_utilization, ns.served_model_name, ns.uvicorn_log_level,
            ns.enforce_eager, ns.max_num_seqs, ns.seed) == ("M", "0.0.0.0", 8000, "float32", 2048, 0.9, ["x"], "warning", True, 64, 0)
    with caplog.at_level(logging.WARNING, logger="litevllm"): assert warn_vllm_noops(ns) == []  # all of these work
    ns = parse(VLLM_COMMANDS[2])
    assert (ns.model_flag, ns.gpu_memory_utilization, ns.data_parallel_size, ns.data_parallel_backend, ns.enable_prefix_caching,
            ns.enable_prompt_tokens_details, ns.enable_force_include_usage) == ("M", 0.8, 2, "mp", False, True, False)
    ns = parse(VLLM_COMMANDS[3])
    assert (ns.max_model_len, ns.max_num_batched_tokens, ns.kv_cache_memory_bytes) == (32_000, 2048, 2**30)
    ns = parse(VLLM_COMMANDS[5])
    with caplog.at_level(logging.WARNING, logger="litevllm"): given = warn_vllm_noops(ns)
    assert set(given) == {"--otlp-traces-endpoint", "--collect-detailed-traces", "--moe-backend", "--performance-mode", "--enable-sleep-mode",
                          "--numa-bind-nodes", "--enable-expert-parallel", "--kv-cache-metrics", "--disable-custom-all-reduce",
                          "--safetensors-load-strategy", "--download-dir", "--hf-token"}
    assert len([r for r in caplog.records if r.levelno == logging.WARNING]) == len(given)
    assert any(r.getMessage().startswith("--moe-backend triton has no effect in litevllm") for r in caplog.records)


@pytest.mark.parametrize("cmd", ["serve M --quantization awq", "serve M -q fp8"])
def test_quantization_methods_other_than_gguf_refused(cmd, capsys):
    with pytest.raises(SystemExit) as e: parse(cmd)
    assert e.value.code == 2 and "invalid choice" in capsys.readouterr().err


def test_quantization_gguf_parses():
    assert parse("serve M.gguf --quantization gguf").quantization == parse("serve M.gguf -q gguf").quantization == "gguf"


@pytest.mark.parametrize("cmd", ["serve M --lora-dtype float16",
                                 "serve M --tool-parser-plugin p.py",
                                 "serve M --reasoning-parser-plugin p.py", "serve M --chat-template-content-format openai", "serve M --kv-cache-dtype fp8",
                                 "serve M --revision main", "serve M --ssl-keyfile k.pem --ssl-certfile c.pem",
                                 "serve M --swap-space 4", "serve M --disable-log-requests"])  # the last two: gone before vLLM 0.32, which refuses them too
def test_refused_launch_commands(cmd, capsys):
    with pytest.raises(SystemExit) as e: parse(cmd)
    assert e.value.code == 2 and "unrecognized arguments" in capsys.readouterr().err


def test_lora_launch_command():
    "vLLM's LoRA launch flags parse into litevllm's engine fields and --lora-modules entries (both of vLLM's forms)."
    ns = parse(VLLM_COMMANDS[-2])
    assert (ns.enable_lora, ns.max_loras, ns.max_lora_rank, ns.max_cpu_loras) == (True, 2, 32, 4)
    assert [(m.name, m.path, m.base_model_name) for m in ns.lora_modules] == [("a", "/x", None), ("b", "/y", "M")]


def test_agent_launch_command():
    "vLLM's documented tool-calling launch parses, with every agent flag where litevllm's code reads it."
    ns = parse("serve M --enable-auto-tool-choice --tool-call-parser hermes --reasoning-parser deepseek_r1 --chat-template t.jinja "
               "--exclude-tools-when-tool-choice-none")
    assert (ns.enable_auto_tool_choice, ns.tool_call_parser, ns.reasoning_parser, ns.chat_template, ns.exclude_tools_when_tool_choice_none) == \
           (True, "hermes", "deepseek_r1", "t.jinja", True)
