"""Prefix caching on both engines: hits, the hit cap, and the block ids the free order decides.

Scenarios and numbers: §8 T41/T43/T44/T45 (vLLM's
`test_prefix_caching.py` and `test_async_scheduler.py`, replayed through the
scheduler instead of the bare `KVCacheManager`: a request freed there is
aborted here, which frees the same blocks in the same order), §8b D5/D6, and
the bug zoo's Z6/Z7. Each runs on the reference and on vLLM 0.33.0.
"""

from __future__ import annotations

from both_engines import new_blocks, prompt

from schedspec.spec.config import SchedulerConfig
from schedspec.spec.request import Request


def _req(rid: str, tokens: tuple[int, ...], max_tokens: int = 16) -> Request:
    return Request(request_id=rid, prompt_token_ids=tokens, max_tokens=max_tokens, ignore_eos=True)


def test_D5_block_ids_caching_off(make):
    """D5: bs=4, 11 blocks, caching off. A (12) -> [1,2,3], B (8) -> [4,5]; both finish (max_tokens=1);
    the free queue is then [5,4,3,2,1,6,...], so the next 12-token request gets [5,4,3]."""
    e = make(SchedulerConfig(block_size=4, num_gpu_blocks=11))
    e.add(_req("A", prompt((1, 12)), 1), _req("B", prompt((2, 8)), 1))
    out, finished = e.step()
    assert new_blocks(out) == {"A": ((1, 2, 3), 0), "B": ((4, 5), 0)}
    assert set(finished) == {"A", "B"}
    e.add(_req("C", prompt((3, 12)), 1))
    out, _ = e.step()
    assert new_blocks(out) == {"C": ((5, 4, 3), 0)}


def test_D5_block_ids_caching_on(make):
    """D5: caching on, bs=4: a 10-token request -> [1,2,3]; after it finishes the queue is [3,4,...,10,2,1].
    A 13-token request with the same prefix hits [1,2] (C=8), gets [1,2,3,4] and schedules 5 tokens."""
    e = make(SchedulerConfig(block_size=4, num_gpu_blocks=11, enable_prefix_caching=True))
    first = prompt((1, 4), (2, 4), (3, 2))
    e.add(_req("A", first, 1))
    out, finished = e.step()
    assert new_blocks(out) == {"A": ((1, 2, 3), 0)}
    assert set(finished) == {"A"}
    assert e.num_free_blocks() == 10  # cached blocks 1 and 2 sit in the free queue, evictable
    e.add(_req("B", first + prompt((4, 3)), 1))
    out, _ = e.step()
    assert new_blocks(out) == {"B": ((1, 2, 3, 4), 8)}
    assert dict(out.num_scheduled_tokens) == {"B": 5}


def test_D6_hit_cap_recomputes_the_last_block(make):
    """D6 (and Z7): two identical 32-token prompts (bs=16): the second hits 16, not 32, and schedules 16.
    With 33 tokens the second hits 32 and schedules 1."""
    for length, hit in ((32, 16), (33, 32)):
        e = make(SchedulerConfig(enable_prefix_caching=True))
        e.add(_req("r1", prompt((7, length))))
        e.step()
        e.add(_req("r2", prompt((7, length))))
        out, _ = e.step()
        assert new_blocks(out)["r2"][1] == hit
        assert dict(out.num_scheduled_tokens)["r2"] == length - hit
        e.close()  # give the vLLM driver back before the next config


def test_a_prompt_of_zeros_hits_each_of_its_own_blocks(make):
    """vLLM's tests prompt with `[0]*N` (`test_prefix_caching.py`). bs=16: A's 100 zeros take [1..7]; after A
    finishes, B's 100 zeros hit its six full blocks, each its own block, [1..6], as vLLM's sha256 chain has
    them. (The spec's old hash gave every all-zero block the hash 0, so B hit block 1 six times.)"""
    e = make(SchedulerConfig(enable_prefix_caching=True))
    e.add(_req("A", (0,) * 100, 1))
    out, finished = e.step()
    assert new_blocks(out) == {"A": ((1, 2, 3, 4, 5, 6, 7), 0)} and set(finished) == {"A"}
    e.add(_req("B", (0,) * 100, 1))
    out, _ = e.step()
    assert new_blocks(out)["B"][0][:6] == (1, 2, 3, 4, 5, 6) and new_blocks(out)["B"][1] == 96
    e.close()


def test_leading_zeros_are_part_of_the_prefix(make):
    """A's second block, `[5]*16` after sixteen zeros, is no hit for B's first block, `[5]*16`: the hash is of
    the prefix, and zeros are tokens like any other."""
    e = make(SchedulerConfig(enable_prefix_caching=True))
    e.add(_req("A", (0,) * 16 + (5,) * 16 + (1,), 1))
    e.step()
    e.add(_req("B", (5,) * 16 + (1,), 1))
    out, _ = e.step()
    assert new_blocks(out)["B"][1] == 0
    e.close()


def test_T43_free_order_and_eviction_order(make):
    """T43 (`test_prefill`), bs=16, 11 blocks: req0 (55) -> [1,2,3,4]; req1 (same 48 + 5) hits [1,2,3], new [5], free 5.
    Free req0 then req1: queue [5,4,6,7,8,9,10,3,2,1]. req2 (prefix + 6) hits [1,2,3], new [5], free 6.
    Free req2; req3 (160 novel tokens) gets [5,4,6,7,8,9,10,3,2,1] (eviction order)."""
    e = make(SchedulerConfig(num_gpu_blocks=11, enable_prefix_caching=True))
    common = prompt((1, 16), (2, 16), (3, 16))
    e.add(_req("req0", common + prompt((4, 7))), _req("req1", common + prompt((5, 5))))
    out, _ = e.step()
    assert new_blocks(out) == {"req0": ((1, 2, 3, 4), 0), "req1": ((1, 2, 3, 5), 48)}
    assert e.num_free_blocks() == 5
    e.abort("req0")
    e.abort("req1")
    e.add(_req("req2", common + prompt((6, 6))))
    out, _ = e.step()
    assert new_blocks(out) == {"req2": ((1, 2, 3, 5), 48)}
    assert e.num_free_blocks() == 6
    e.abort("req2")
    e.add(_req("req3", prompt((9, 160))))
    out, _ = e.step()
    assert new_blocks(out) == {"req3": ((5, 4, 6, 7, 8, 9, 10, 3, 2, 1), 0)}


def _new_block_ids(out) -> dict[str, tuple[int, ...] | None]:
    """Each running request's newly allocated blocks this step (None: none)."""
    return {c.req_id: c.new_block_ids for c in out.scheduled_cached_reqs}


def test_T44_decode_fills_a_block_before_taking_one(make):
    """T44 (`test_decode`), bs=16, 11 blocks: a 55-token prompt -> [1,2,3,4], C=55. vLLM's test then allocates
    4 slots (0 new blocks, C=59) and 19 more (1 new block); here those are 4 and 19 one-token decode steps, the
    one new block, 5, coming at the step that schedules position 64. Block 4 (tokens 48-63) is then hashed
    and block 5 (64-77, partial) is not: a probe with req0's whole sequence (79 tokens) hits exactly
    [1,2,3,4] (64 tokens) and gets a fresh block 6 for the rest. Hash flags are not in the engine protocol,
    so the probe's hit is how they show."""
    e = make(SchedulerConfig(num_gpu_blocks=11, enable_prefix_caching=True))
    p0 = tuple(range(100, 155))
    e.add(_req("req0", p0, 100))
    out, _ = e.step(default=0)
    assert new_blocks(out) == {"req0": ((1, 2, 3, 4), 0)}
    assert e.ct("req0") == (55, 56)
    for _ in range(4):  # positions 55-58: inside block 4
        out, _ = e.step(default=0)
        assert _new_block_ids(out) == {"req0": None}
    assert e.ct("req0") == (59, 60)
    grown = {}  # position scheduled -> new blocks
    for _ in range(19):  # positions 59-77: block 4 fills at 63, position 64 takes one new block
        out, _ = e.step(default=0)
        if _new_block_ids(out)["req0"] is not None:
            grown[out.scheduled_cached_reqs[0].num_computed_tokens] = _new_block_ids(out)["req0"]
    assert grown == {64: (5,)}
    assert e.ct("req0") == (78, 79)
    assert e.num_free_blocks() == 5
    e.add(_req("probe", p0 + (0,) * 24))  # req0's tokens so far: the prompt and 24 sampled zeros
    out = e.schedule()
    assert new_blocks(out)["probe"] == ((1, 2, 3, 4, 6), 64)


def test_T45_lru_eviction_keeps_the_prefix(make):
    """T45 (`test_evict`), bs=16, 11 blocks: req0 (87) -> 6 blocks, req1 (48) -> 3 blocks, free 1.
    Free req0 -> queue [6,10,5,4,3,2,1]; free req1 -> [6,10,5,4,3,2,1,9,8,7].
    req2 (35 tokens of req0's prefix) hits [1,2] and gets the new block 6; free 7."""
    e = make(SchedulerConfig(num_gpu_blocks=11, enable_prefix_caching=True))
    p0 = tuple(range(100, 187))
    e.add(_req("req0", p0), _req("req1", tuple(range(300, 348))))
    out, _ = e.step()
    assert new_blocks(out) == {"req0": ((1, 2, 3, 4, 5, 6), 0), "req1": ((7, 8, 9), 0)}
    assert e.num_free_blocks() == 1
    e.abort("req0")
    e.abort("req1")
    e.add(_req("req2", p0[:35]))
    out, _ = e.step()
    assert new_blocks(out) == {"req2": ((1, 2, 6), 32)}
    assert e.num_free_blocks() == 7


def test_T41_same_step_dedup_under_async(make):
    """T41: async, budget 1000, APC, bs=16, 100-token same-prompt requests: r0 gets 100 and r1 only 4
    (= 100 % 16), because r0's blocks are registered at allocation, earlier in the same step."""
    e = make(SchedulerConfig(max_num_batched_tokens=1000, enable_prefix_caching=True, async_scheduling=True))
    same = tuple(range(1000, 1100))
    e.add(_req("r0", same, 3), _req("r1", same, 3))
    out = e.schedule()
    assert dict(out.num_scheduled_tokens) == {"r0": 100, "r1": 4}
    assert new_blocks(out)["r1"][1] == 96


def test_Z6_failed_allocation_touches_no_hit_block(make):
    """Z6 / T46: an admission that hits evictable blocks but does not fit changes nothing: the hit blocks
    stay evictable in the free queue (the free count is unchanged), and a later admission that fits still
    hits them. bs=4, 5 usable blocks."""
    e = make(
        SchedulerConfig(
            block_size=4, num_gpu_blocks=6, enable_prefix_caching=True, max_model_len=64, max_num_batched_tokens=64
        )
    )
    shared = prompt((1, 4), (2, 4))
    e.add(_req("a", shared + (3,), 1))
    e.step()  # a finishes; its two full blocks stay cached, evictable
    e.add(_req("big", shared + prompt((4, 16)), 1))  # hit 2 blocks, needs 6 in all: 2 evictable + 4 new > 5 free
    out, _ = e.step()
    assert dict(out.num_scheduled_tokens) == {}
    assert e.num_free_blocks() == 5
    e.abort("big")
    e.add(_req("small", shared + (5,), 1))
    out, _ = e.step()
    assert new_blocks(out)["small"][1] == 8


def test_a_request_that_skips_reading_the_cache_takes_no_hit_and_caches_all_the_same(make):
    """`skip_reading_prefix_cache` (SamplingParams or PoolingParams; vllm/v1/core/kv_cache_manager.py:
    KVCacheManager.prefix_cache_lookup_enabled): bs=4, caching on. r1 (12 tokens) caches blocks [1,2,3] and
    finishes, so they sit at the free queue's tail. r2 repeats its prompt but skips the read: no hit, three blocks
    from the front, [4,5,6]. r3 repeats it again plus one token and reads: it hits 12 tokens, on the first block
    cached under each hash, r1's."""
    e = make(SchedulerConfig(block_size=4, num_gpu_blocks=11, enable_prefix_caching=True))
    tokens = prompt((1, 4), (2, 4), (3, 4))
    e.add(_req("r1", tokens, 1))
    assert set(e.step()[1]) == {"r1"}
    e.add(Request("r2", tokens, 1, ignore_eos=True, skip_reading_prefix_cache=True))
    out, finished = e.step()
    assert new_blocks(out) == {"r2": ((4, 5, 6), 0)} and set(finished) == {"r2"}
    e.add(_req("r3", tokens + prompt((4, 1)), 1))
    out, _ = e.step()
    assert new_blocks(out)["r3"][1] == 12 and new_blocks(out)["r3"][0][:3] == (1, 2, 3)
