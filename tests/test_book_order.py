"The book's order: no notebook imports from a later one, and no module of Part I imports a module of Part II or III."
import ast, json, re
from pathlib import Path
import pytest

ROOT = Path(__file__).resolve().parent.parent
PARTS = [(0, 19, "I"), (20, 39, "II"), (40, 49, "III"), (50, 99, "bench")]

# The kernels (kernels_nbs/) open Part II, but Part I's model, attention and config call them: the CPU layer ops and
# the attention backends are chosen by the platform there. Until they register themselves as backends (Part II), these
# imports of a later notebook are the book's known exceptions.
KNOWN = {("00b_config", "kernels.cpu_attention"), ("06_models", "kernels"),
         ("07_attention", "kernels.cpu_attention"), ("07_attention", "kernels.paged_attention"),
         ("07_attention", "kernels.store_kvcache")}


def notebooks():
    return sorted(ROOT.glob("nbs/[0-9]*.ipynb")) + sorted(ROOT.glob("kernels_nbs/[0-9]*.ipynb"))


def order_key(nb:Path) -> tuple:
    "Reading order: nbs/ by name; the kernels open Part II (after the tour, nbs/19, before nbs/20)."
    return ("19z", nb.stem) if nb.parent.name == "kernels_nbs" else (nb.stem, "")


def part(nb:Path) -> str:
    if nb.parent.name == "kernels_nbs": return "II"
    n = int(re.match(r"\d+", nb.stem)[0])
    return next(p for lo, hi, p in PARTS if lo <= n <= hi)


def cells(nb:Path):
    return ["".join(c["source"]) for c in json.loads(nb.read_text())["cells"] if c["cell_type"] == "code"]


def owners() -> dict[str, Path]:
    "Each module of the package and the notebook that starts it (`#| default_exp`)."
    out = {}
    for nb in notebooks():
        for src in cells(nb):
            if m := re.match(r"#\|\s*default_exp\s+(\S+)", src): out[m[1].removesuffix(".__init__")] = nb
    return out


def imported(src:str) -> set[str]:
    "The litevllm modules a cell imports, anywhere in it (inside functions, after `if x:`), without the `litevllm.` prefix."
    mods = set()
    src = "\n".join(l for l in src.splitlines() if not l.lstrip().startswith("if TYPE_CHECKING:"))  # type hints only
    for m in re.finditer(r"(?:^|[:;])\s*from\s+litevllm\.([\w.]+)\s+import|(?:^|[:;])\s*import\s+litevllm\.([\w.]+)", src, re.M):
        mods.add(m[1] or m[2])
    return mods


def owner_of(mod:str, own:dict):
    while mod and mod not in own: mod = mod.rpartition(".")[0]
    return own.get(mod)


def test_no_notebook_imports_a_later_one():
    own, bad = owners(), []
    assert len(own) > 40
    for nb in notebooks():
        for src in cells(nb):
            for mod in imported(src):
                o = owner_of(mod, own)
                if o is None or order_key(o) <= order_key(nb) or (nb.stem, mod) in KNOWN: continue
                bad.append(f"{nb.relative_to(ROOT)} imports litevllm.{mod} ({o.relative_to(ROOT)})")
    assert not bad, "\n".join(sorted(set(bad)))


def test_known_exceptions_still_exist():
    "An exception that is no longer needed is taken off the list."
    own = owners()
    found = {(nb.stem, mod) for nb in notebooks() for src in cells(nb) for mod in imported(src)}
    assert KNOWN <= found, KNOWN - found


def module_part(path:Path, own:dict):
    rel = path.relative_to(ROOT/"litevllm").with_suffix("")
    mod = ".".join(rel.parts).removesuffix(".__init__")
    o = owner_of(mod, own)
    return None if o is None else part(o)


def module_imports(path:Path) -> set[str]:
    "The litevllm modules a module imports at its top level (not inside functions)."
    tree, pkg, out = ast.parse(path.read_text()), ".".join(path.relative_to(ROOT).with_suffix("").parts[:-1]), set()
    for node in tree.body:
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = pkg.split(".")[:len(pkg.split(".")) - node.level + 1]
                base = ".".join(up + ([base] if base else []))
            if base.startswith("litevllm"):
                out.add(base)
                out |= {f"{base}.{a.name}" for a in node.names}  # `from litevllm import kv_cache`: a module too
        elif isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name.startswith("litevllm")}
    return {m.removeprefix("litevllm.").removeprefix("litevllm") for m in out} - {""}


def test_part_one_modules_import_no_later_part():
    own, bad = owners(), []
    for path in sorted((ROOT/"litevllm").rglob("*.py")):
        if path.name == "_modidx.py" or module_part(path, own) != "I": continue
        for mod in module_imports(path):
            o = owner_of(mod, own)
            if o is not None and part(o) != "I" and (own_nb := owner_of(str(path.relative_to(ROOT/"litevllm").with_suffix("")).replace("/", "."), own)) is not None \
               and (own_nb.stem, mod) not in KNOWN and (own_nb.stem, mod.rpartition(".")[0]) not in KNOWN:
                bad.append(f"{path.relative_to(ROOT)} imports litevllm.{mod} (Part {part(o)}: {o.relative_to(ROOT)})")
    assert not bad, "\n".join(bad)
