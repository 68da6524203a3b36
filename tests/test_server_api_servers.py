"""`litevllm serve --api-server-count 2` (vLLM's flag; issue 39): one engine core, two API server processes accepting on one
port, each serving its own requests; /metrics from either merges both (prometheus_client's multiprocess mode); SIGTERM
stops every process the launcher started."""
import concurrent.futures, glob, json, os, signal, subprocess, sys, time
import httpx
from prometheus_client.mmap_dict import MmapedDict
from litevllm.metrics import parse_metrics
from test_server import free_port

NAME = "SmolLM2-135M-Instruct"

def descendants(pid:int) -> list[int]:
    "The pids of a process's children, their children, ... (Linux's /proc)."
    out = []
    for t in glob.glob(f"/proc/{pid}/task/*/children"):
        for c in map(int, open(t).read().split()): out += [c] + descendants(c)
    return out

def alive(pid:int) -> bool:
    try: os.kill(pid, 0); return True
    except ProcessLookupError: return False

def served_by_pid(prom_dir) -> dict[int, float]:
    "Requests each API server process finished, read from its own multiprocess counter file."
    res = {}
    for f in glob.glob(f"{prom_dir}/counter_*.db"):
        pid = int(f.rsplit("_", 1)[1].split(".")[0])
        res[pid] = sum(v for k, v, *_ in MmapedDict.read_all_values_from_file(f) if json.loads(k)[1] == "vllm:request_success_total")
    return res

def one_request(base:str) -> str:
    with httpx.Client(base_url=base, timeout=120) as c:  # a connection of its own: the kernel picks the process that accepts it
        r = c.post("/v1/completions", json=dict(model=NAME, prompt="The capital of France is", max_tokens=5, temperature=0))
        assert r.status_code == 200, r.text
        return r.json()["choices"][0]["text"]

def test_two_api_servers(tmp_path):
    prom, log_path, port = tmp_path / "prom", tmp_path / "serve.log", free_port()
    prom.mkdir()
    log = open(log_path, "w")
    proc = subprocess.Popen([sys.executable, "-m", "litevllm.cli", "serve", "--host", "127.0.0.1", "--port", str(port), "--max-model-len", "512",
                             "--dtype", "float32", "--api-server-count", "2", "--disable-uvicorn-access-log"],
                            stdout=log, stderr=subprocess.STDOUT, env=os.environ | {"PROMETHEUS_MULTIPROC_DIR": str(prom)})
    base, pids = f"http://127.0.0.1:{port}", []
    try:
        deadline = time.monotonic() + 300
        while open(log_path).read().count("Application startup complete") < 2:
            assert proc.poll() is None, open(log_path).read()[-3000:]
            assert time.monotonic() < deadline, "the API servers did not start"
            time.sleep(0.3)
        pids = descendants(proc.pid)
        assert len(pids) >= 3, pids  # the engine core and two API servers (and the fork server that started them)
        texts, total = set(), 0
        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            for _ in range(20):  # until both API servers have served some (each connection is accepted by one of them)
                texts |= set(pool.map(one_request, [base] * 8)); total += 8
                if len([n for n in served_by_pid(prom).values() if n > 0]) == 2: break
        by_pid = served_by_pid(prom)
        assert len([n for n in by_pid.values() if n > 0]) == 2 and sum(by_pid.values()) == total, by_pid
        assert texts == {" Paris.\n\nThe"}  # one engine core, the same greedy text whichever API server answered
        m = parse_metrics(httpx.get(f"{base}/metrics").text)  # merged: both servers' requests
        lab = f'engine="0",finished_reason="length",model_name="{NAME}"'
        assert m[f"vllm:request_success_total{{{lab}}}"] == total
        assert m[f'vllm:generation_tokens_total{{engine="0",model_name="{NAME}"}}'] == 5 * total
    finally:
        if proc.poll() is None: proc.send_signal(signal.SIGTERM)
        code = proc.wait(90)
    assert code == 0, open(log_path).read()[-3000:]
    deadline = time.monotonic() + 15  # the fork server and multiprocessing's resource tracker exit once they see it gone
    while [p for p in pids if alive(p)] and time.monotonic() < deadline: time.sleep(0.2)
    assert not [(p, open(f"/proc/{p}/cmdline").read()) for p in pids if alive(p)], "a process outlived the launcher"
