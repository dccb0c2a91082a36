"""The block hash tells apart what vLLM's sha256 chain tells apart, on structured tokens too.

`spec/block_hash.py` once entered each token as itself into a chain seeded
with 0, so 0 was an identity: a prompt of zeros hashed to 0 at every depth,
and leading zeros were invisible. vLLM's own tests prompt with `[0]*N`
(`tests/v1/core/test_prefix_caching.py`), where the reference then found
cache hits vLLM has not. These pin the collisions found, and draw prompts
built the way real prompts and tests are (zeros, repeated blocks, shared
prefixes that part inside a block) to check that distinct prefixes never
share a hash.
"""

from __future__ import annotations

from hypothesis import given, settings, strategies as st

from schedspec.spec.block_hash import block_hashes, hash_block

BS = 16


def test_a_prompt_of_zeros_has_a_different_hash_at_every_depth():
    hashes = block_hashes([0] * 100, BS)
    assert len(hashes) == 6 and len(set(hashes)) == 6 and 0 not in hashes


def test_leading_zeros_are_not_invisible():
    assert block_hashes([0] * BS + [5] * BS, BS)[1] != block_hashes([5] * BS, BS)[0]
    assert hash_block(0, [0] * BS) != 0  # the chain's seed is not a fixed point


def test_the_hash_is_a_chain_over_the_prefix_like_vllm_s():
    """Equal blocks under different prefixes differ; equal prefixes agree, however they were computed."""
    a, b = [1] * BS + [7] * BS, [2] * BS + [7] * BS
    assert block_hashes(a, BS)[1] != block_hashes(b, BS)[1]
    assert block_hashes(a + [3] * BS, BS, block_hashes(a, BS)) == block_hashes(a + [3] * BS, BS)


# Prompts the way tests and chat traffic build them: few distinct tokens (0 among them), whole blocks
# repeated, and prefixes shared up to some point inside a block.
SMALL_TOKENS = st.integers(0, 3)
BLOCK = st.lists(SMALL_TOKENS, min_size=BS, max_size=BS) | st.sampled_from([[0] * BS, [1] * BS, [0] * (BS - 1) + [1]])


@st.composite
def structured_prompts(draw: st.DrawFn) -> list[int]:
    blocks = draw(st.lists(BLOCK, min_size=1, max_size=6))
    repeat = draw(st.integers(0, len(blocks) - 1))
    tokens = [t for b in blocks + blocks[repeat:] for t in b]  # a tail of repeated blocks
    return tokens[: len(tokens) - draw(st.integers(0, BS - 1))]


@settings(max_examples=300, derandomize=True, deadline=None)
@given(st.lists(structured_prompts(), min_size=2, max_size=6))
def test_distinct_prefixes_never_share_a_hash(prompts):
    """Over every prefix of every prompt that ends on a block boundary: one hash per distinct prefix."""
    seen: dict[int, tuple[int, ...]] = {}
    for p in prompts:
        for i, h in enumerate(block_hashes(p, BS)):
            prefix = tuple(p[: (i + 1) * BS])
            assert seen.setdefault(h, prefix) == prefix, f"{prefix} and {seen[h]} share the hash {h}"


def test_the_property_sees_the_old_hash_s_collisions(monkeypatch):
    """The checker catches a planted bug: the token entering as itself (the old hash) fails the property."""
    import schedspec.spec.block_hash as block_hash

    monkeypatch.setattr(block_hash, "TOKEN_OFFSET", 0)
    zeros = [0] * (2 * BS)
    assert block_hash.block_hashes(zeros, BS) == (0, 0)
    failed = False
    try:
        test_distinct_prefixes_never_share_a_hash.hypothesis.inner_test([zeros, [0] * BS + [5] * BS])
    except AssertionError:
        failed = True
    assert failed
