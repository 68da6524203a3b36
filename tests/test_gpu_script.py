"""`make test-gpu` (tools/test_gpu.py) as far as a CPU can check it: without CUDA it says so and runs nothing; its dry run
lists every notebook of nbs/ and kernels_nbs/ and every CUDA test file; its notebook runner runs, stops and fails as
the report says."""
import json, os, re, subprocess, sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT/"tools"/"test_gpu.py"
NO_CUDA = dict(os.environ, CUDA_VISIBLE_DEVICES="", OMP_NUM_THREADS="1")  # no CUDA, even on a GPU machine


def run(*args, cwd=ROOT):
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, env=NO_CUDA, cwd=cwd, timeout=120)


def test_without_cuda_it_runs_nothing(tmp_path):
    r = run("--report", str(tmp_path/"report"), "--wheels", str(tmp_path/"wheels"))
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.startswith("test-gpu: no CUDA device on this machine") and "nothing run" in r.stdout, r.stdout
    assert not (tmp_path/"report").exists() and not (tmp_path/"wheels").exists()
    r = run("--require-cuda", "--report", str(tmp_path/"report"))  # CI's runner: no CUDA is a failure there
    assert r.returncode == 1 and "no CUDA" in r.stdout, r.stdout


def test_dry_run_lists_the_book_and_the_cuda_tests(tmp_path):
    r = run("--dry-run", "--model", "random", "--report", str(tmp_path/"report"))
    assert r.returncode == 0, r.stdout + r.stderr
    out = r.stdout
    assert "nothing is installed or run" in out and "--flags 'gpu'" in out and "random weights of its shape" in out
    listed = re.findall(r"^\s+\d+\. \S*\s+(\S+)\s+timeout", out, re.M)
    notebooks = sorted(str(p.relative_to(ROOT)) for d in ("nbs", "kernels_nbs") for p in (ROOT/d).glob("*.ipynb")
                       if not p.name.startswith(("_", ".")))  # nbdev's globbing
    assert sorted(n for n in listed if n.endswith(".ipynb")) == notebooks
    cuda = sorted(str(p.relative_to(ROOT)) for p in (ROOT/"tests").glob("test_*.py")
                  if re.search(r"pytest\.mark\.gpu|\"cuda\" if torch\.cuda\.is_available\(\)", p.read_text()))
    assert cuda and set(cuda) <= set(listed), set(cuda) - set(listed)
    assert "tests/test_cuda_graphs.py::test_kv_pool_from_profiling_run" in listed  # alone on the card, first
    assert "STALE" not in out, out  # every notebook cell, test and file the script names still exists
    assert re.search(r"stops before 018d1311 after \d+ of \d+ cells", out)  # random weights: 09 runs up to " Paris."
    assert not (tmp_path/"report").exists()


NB = {"cells": [{"cell_type": "code", "id": i, "metadata": {}, "outputs": [], "execution_count": None, "source": s}
                for i, s in [("c1", "x = 1"), ("c2", "#| gpu\nx = 2"), ("c3", "print('third', x)\nassert x == 2, x"), ("c4", "x = 4")]],
      "metadata": {"kernelspec": {"display_name": "python3", "language": "python", "name": "python3"}}, "nbformat": 4, "nbformat_minor": 5}


def test_the_notebook_runner(tmp_path):
    "A notebook in its own process, as nbdev-test runs it: flagged cells by --flags, a stop before a cell, a failing cell named."
    nb = tmp_path/"nbs"/"t.ipynb"; nb.parent.mkdir()
    nb.write_text(json.dumps(NB))
    (tmp_path/"pyproject.toml").write_text('[project]\nname = "t"\n[tool.nbdev]\ntst_flags = "notest gpu"\n')
    def go(*args):
        res = tmp_path/"res.json"
        r = run("--run-notebook", str(nb), "--result", str(res), *args, cwd=tmp_path)
        assert r.returncode == 0, r.stdout + r.stderr
        return json.loads(res.read_text()), r.stdout
    got, out = go("--flags", "gpu")
    assert (got["status"], got["cells_run"], got["cells_total"]) == ("passed", 4, 4) and "third 2" in out, (got, out)
    got, _ = go("--flags", "gpu", "--stop-before", "c3")
    assert (got["status"], got["cells_run"], got["stopped_before"]) == ("passed", 2, "#3 (id c3)"), got
    got, _ = go("--flags", "")  # the gpu cell skipped: the assertion in the third cell fails
    assert (got["status"], got["cells_run"], got["cells_total"]) == ("failed", 1, 3), got
    assert got["where"] == "cell #3 (id c3): AssertionError" and "assert x == 2" in got["error"], got
