"Property-based: random add / step / abort sequences on small pools and budgets never break the KV cache's invariants."
from collections import Counter
from hypothesis import given, settings, strategies as st, HealthCheck
from litevllm.config import EngineArgs
from litevllm.request import Request, RequestStatus
from litevllm.sampling_params import SamplingParams
from litevllm.scheduler import Scheduler, fake_model_output


def check_invariants(s: Scheduler):
    m = s.kv_cache_manager
    pool = m.block_pool
    owners = Counter()
    for rid, blocks in m.req_to_blocks.items():
        ids = [b.block_id for b in blocks]
        assert len(ids) == len(set(ids)), f"{rid} owns a block twice: {ids}"
        assert rid in s.requests, f"blocks of a request the scheduler no longer knows: {rid}"
        owners.update(ids)
    for b in pool.blocks:
        assert b.ref_cnt == owners[b.block_id], f"block {b.block_id}: ref_cnt {b.ref_cnt}, owners {owners[b.block_id]}"
    free = pool.free_block_queue.get_all_free_blocks()
    assert len(free) == pool.free_block_queue.num_free_blocks
    assert {b.block_id for b in free} == {b.block_id for b in pool.blocks if b.ref_cnt == 0}
    for h, b in pool.cached_block_hash_to_block.items(): assert b.block_hash == h
    live = [r.request_id for r in s.running] + [r.request_id for r in s.waiting]
    assert sorted(live) == sorted(s.requests), (live, list(s.requests))
    for r in s.running:
        assert r.status == RequestStatus.RUNNING
        assert len(m.req_to_blocks[r.request_id]) * s.block_size >= r.num_computed_tokens
    for r in s.waiting: assert r.status in (RequestStatus.WAITING, RequestStatus.PREEMPTED)
    assert len(s.running) <= s.max_num_seqs


configs = st.fixed_dictionaries(dict(
    block_size=st.sampled_from([2, 4, 8]),
    extra_blocks=st.integers(0, 12),
    budget=st.integers(4, 48),
    chunked=st.booleans(),
    caching=st.booleans(),
    policy=st.sampled_from(["fcfs", "priority"]),
    threshold=st.sampled_from([0, 0, 3, 8]),
    max_num_seqs=st.integers(1, 6),
))
ops = st.lists(st.one_of(
    st.tuples(st.just("add"), st.integers(1, 40), st.integers(1, 12), st.integers(0, 3), st.integers(0, 2)),
    st.tuples(st.just("step")), st.tuples(st.just("step")),
    st.tuples(st.just("abort"), st.integers(0, 30)),
), min_size=1, max_size=60)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cfg=configs, ops=ops)
def test_random_add_step_abort(cfg, ops):
    max_model_len = 48
    budget = cfg["budget"] if cfg["chunked"] else max(cfg["budget"], max_model_len)
    vc = EngineArgs(max_model_len=max_model_len, block_size=cfg["block_size"], max_num_batched_tokens=budget,
                    enable_chunked_prefill=cfg["chunked"], enable_prefix_caching=cfg["caching"], scheduling_policy=cfg["policy"],
                    long_prefill_token_threshold=cfg["threshold"], max_num_seqs=cfg["max_num_seqs"]).create_engine_config()
    num_blocks = max_model_len // cfg["block_size"] + cfg["extra_blocks"]
    s = Scheduler(vc, num_blocks)
    ids = []
    prefixes = [list(range(100, 140)), list(range(200, 240)), []]  # shared prefixes make prefix hits likely
    for op in ops:
        if op[0] == "add":
            _, n, max_tokens, prio, pre = op
            toks = (prefixes[pre][: n // 2] + list(range(1000 + 50 * len(ids), 1000 + 50 * len(ids) + n)))[:n]
            max_tokens = min(max_tokens, max_model_len - n)
            if max_tokens < 1: continue
            rid = f"r{len(ids)}"
            s.add_request(Request(rid, toks, SamplingParams(max_tokens=max_tokens), eos_token_id=None, arrival_time=len(ids), priority=prio))
            ids.append(rid)
        elif op[0] == "step":
            so = s.schedule()
            check_invariants(s)
            s.update_from_output(so, fake_model_output(s, so))
        else:
            if ids: s.finish_requests([ids[op[1] % len(ids)]])
        check_invariants(s)
    for _ in range(2000):  # everything left finishes, and then every block is free
        if not s.has_unfinished_requests(): break
        so = s.schedule()
        s.update_from_output(so, fake_model_output(s, so))
        check_invariants(s)
    assert not s.has_unfinished_requests(), "requests never finished"
    pool = s.kv_cache_manager.block_pool
    assert pool.get_num_free_blocks() == num_blocks
    assert all(b.ref_cnt == 0 for b in pool.blocks)
