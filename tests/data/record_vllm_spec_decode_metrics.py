"""Record vLLM 0.32's speculative-decoding metrics on scripted per-step stats, as test data for litevllm's `metrics`
module (tests/test_spec_decode_metrics.py compares against it; the tests never import vLLM).

How `tests/data/vllm032_spec_decode_metrics.json` was made, from /work/main:

    .vllm-venv/bin/python tests/data/record_vllm_spec_decode_metrics.py tests/data/vllm032_spec_decode_metrics.json

vLLM's `SpecDecodingProm` (the Prometheus counters `PrometheusStatLogger` creates when speculative decoding is on) and
`SpecDecodingLogging` (what the periodic log line adds) are fed the same `SpecDecodingStats` steps (k = 3, one engine
labelled model_name="m", engine="0"); the speculative config is a stand-in carrying only `num_speculative_tokens`, the one
field SpecDecodingProm reads. Recorded:
- families: name -> [type, HELP text, label names] as prometheus_client collects them
- samples: every sample of those families after the steps, [name, labels, value], in collection order (without the
  `_created` timestamps, which vLLM's server turns off and litevllm never has)
- snapshot: vLLM's `get_metrics_snapshot()` entries for them: [class name, metric name, labels, value or values]
- log: the message SpecDecodingLogging.log() gives after the steps, with 2.0 s elapsed since its reset; and log_empty,
  whether it logs anything with no step observed
"""
import json, sys
from types import SimpleNamespace
from unittest import mock
import prometheus_client
from vllm.v1.spec_decode.metrics import SpecDecodingProm, SpecDecodingLogging, SpecDecodingStats
from vllm.v1.metrics.reader import get_metrics_snapshot
import vllm.v1.spec_decode.metrics as sdm

K = 3
# each step: the (num_draft_tokens, num_accepted_tokens) of each request that carried drafts
STEPS = [[(3, 3), (3, 1)], [(3, 0), (2, 2)], [(1, 1)]]


def steps():
    for step in STEPS:
        s = SpecDecodingStats.new(K)
        for d, a in step: s.observe_draft(d, a)
        yield s


def main(out:str):
    prom = SpecDecodingProm(SimpleNamespace(num_speculative_tokens=K), ["model_name", "engine"], {0: ["m", "0"]})
    for s in steps(): prom.observe(s, 0)
    fams = [m for m in prometheus_client.REGISTRY.collect() if m.name.startswith("vllm:spec_decode")]
    res = dict(k=K, steps=STEPS,
               families={m.name: [m.type, m.documentation, sorted({k for s in m.samples for k in s.labels})] for m in fams},
               samples=[[s.name, s.labels, s.value] for m in fams for s in m.samples if not s.name.endswith("_created")],
               snapshot=[[type(x).__name__, x.name, x.labels, getattr(x, "values", getattr(x, "value", None))]
                         for x in get_metrics_snapshot() if x.name.startswith("vllm:spec_decode")])
    msgs = []
    log_fn = lambda fmt, *args: msgs.append(fmt % args)
    with mock.patch.object(sdm.time, "monotonic", return_value=100.0):
        logging = SpecDecodingLogging()
    for s in steps(): logging.observe(s)
    with mock.patch.object(sdm.time, "monotonic", return_value=102.0): logging.log(log_fn)
    res["log"] = msgs[0]
    logging.log(log_fn)  # reset by the call above: nothing observed since
    res["log_empty"] = len(msgs) > 1
    with open(out, "w") as f: json.dump(res, f, indent=1); f.write("\n")


if __name__ == "__main__": main(sys.argv[1])
