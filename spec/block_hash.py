"""Block hashes: the prefix-cache key of every full block of a request's tokens.

vLLM hashes each full block as `hash((parent_hash, block_token_ids, extra_keys))`
with sha256 (`vllm/v1/core/kv_cache_utils.py:hash_block_tokens`), so a block's hash fingerprints the
whole prefix that ends at it. Which function computes the fingerprint is not
observable: the scheduler only ever asks "is this prefix cached, and by which
block". So the spec picks one every engine can compute cheaply and exactly:
a chained polynomial hash over two Mersenne-prime fields,

    h_i = (h_{i-1} * B^bs + sum_j (tok_j + 1) * B^(bs-1-j)) mod p,  per (B, p) pair,

packed into one non-negative int below 2^62. It is a hash of the prefix, like
vLLM's: a chain, not a per-block digest, so two blocks with equal tokens but
different prefixes differ. A torch engine computes it with int64 tensor ops
(every product is below 2^62), which is why it is not sha256.

Each token enters as `tok + 1` (`TOKEN_OFFSET`), never as itself. With the
bare token, 0 was the additive identity and the chain starts at 0: a block
of zero tokens hashed to 0 at any depth, and leading zeros vanished, so the
second block of `[0]*16 + [5]*16` hashed as the first block of `[5]*16`.
Real prompts and vLLM's own tests (`[0]*N`) are full of such structure, and
the reference then found cache hits vLLM does not have. With every
coefficient in 1..p-1, the prefix hash H(m) = sum_{j<m} (tok_j + 1) B^(m-1-j)
is a polynomial of degree exactly m-1 in B: prefixes of different lengths
are different polynomials, and a run of equal tokens is a geometric sum
that returns to a value only after ord(B) tokens (about 10^9 and 10^8 for
the two bases, so never within a request). Two distinct prefixes collide
only if their difference vanishes at both bases: about 2^-62 per pair, and
structure (zeros, repeats, shifts) does not raise it
(`tests/unit/spec/test_block_hash.py` draws such prompts). A collision would
show as a divergence, never as silent agreement. Token ids must be below
p - 1 = 2^31 - 2, far above any vocabulary.

Block hashes are a function of the tokens, so they are not stored in the
state; `spec.state` stores only which block is cached under which hash.
"""

from __future__ import annotations

from collections.abc import Sequence

MODULUS = 2**31 - 1  # a Mersenne prime: every residue fits in 31 bits
BASES = (1_000_003, 998_244_353 % MODULUS)
NONE_HASH = 0  # the parent of the first block (vLLM's NONE_HASH)
TOKEN_OFFSET = 1  # a token enters the hash as tok + 1: 0 is no identity (see the module's docstring)


def hash_block(parent: int, block_token_ids: Sequence[int]) -> int:
    """The hash of one full block, chained on its parent's."""
    packed = 0
    for i, base in enumerate(BASES):
        h = (parent >> (31 * i)) & MODULUS
        for t in block_token_ids:
            h = (h * base + t + TOKEN_OFFSET) % MODULUS
        packed |= h << (31 * i)
    return packed


ADAPTER_MARK = MODULUS - 2  # a token id no vocabulary reaches (2^31 - 3): it starts an adapter's chain


def chain_seed(lora_int_id: int = 0) -> int:
    """The parent of a request's first block: NONE_HASH, or for a LoRA adapter a hash of its own.

    vLLM puts the adapter into every block's extra keys (vllm/v1/core/kv_cache_utils.py:_gen_lora_extra_hash_keys),
    so requests of different adapters never share a cached block, and those of one adapter do. A chain seeded
    per adapter separates them alike: every block of the chain differs.
    """
    return NONE_HASH if not lora_int_id else hash_block(NONE_HASH, (ADAPTER_MARK, lora_int_id))


def block_hashes(
    token_ids: Sequence[int], block_size: int, start: tuple[int, ...] = (), seed: int = NONE_HASH
) -> tuple[int, ...]:
    """The hashes of every full block of `token_ids`; `start` is an already-known prefix of them; `seed` the
    parent of the first block (`chain_seed`)."""
    hashes = list(start)
    parent = hashes[-1] if hashes else seed
    for b in range(len(hashes), len(token_ids) // block_size):
        parent = hash_block(parent, token_ids[b * block_size : (b + 1) * block_size])
        hashes.append(parent)
    return tuple(hashes)
