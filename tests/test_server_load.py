"""A tiny version of `litevllm bench serve`'s load path against the real server: streaming clients, some hanging up
mid-stream; every request completes or is aborted, no KV block is left in use, the server's RSS is read."""
import json
from litevllm.cli import main
from test_server import start_server, stop_server


def test_tiny_load_with_disconnects(tmp_path):
    proc, base = start_server()
    try:
        out = tmp_path/"load.json"
        rc = main(["bench", "serve", "--base-url", base, "--workload", "custom", "--num-requests", "8", "--input-len-range", "8", "16",
                   "--output-len-range", "8", "8", "--max-concurrency", "8", "--disconnect-fraction", "0.25", "--seed", "3",
                   "--server-pid", str(proc.pid), "--output-json", str(out), "--no-tqdm"])
        res = json.loads(out.read_text())["results"][0]
        assert rc == 0, res
        assert res["completed"] + res["aborted"] == 8 and res["failed"] == 0, res
        assert res["aborted"] >= 1, res            # seed 3 draws at least one client that hangs up
        assert res["blocks_in_use_after"] == 0 and res["unfinished_after"] == 0, res
        assert res["rss_start_mb"] > 100 and res["rss_end_mb"] > 100, res
        assert 0 < res["ttft_ms_p50"] and 0 < res["tpot_ms_p50"], res
    finally: assert stop_server(proc) == 0
