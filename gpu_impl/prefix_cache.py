"""Prefix caching for B instances: block hashes as int64 tensor programs, the cache map, hits and registration.

Block hashes (`spec.block_hash`): per field (B, p) of the spec's hash, block
i's hash is the polynomial of *all* tokens up to the end of block i,
`H(m) = sum_{j<m} (tok_j + 1) * B^(m-1-j) mod p` with m = (i+1)*bs, because the
chain starts at NONE_HASH = 0 and multiplies the parent by B^bs (each token
enters as tok + TOKEN_OFFSET, as the spec's chain takes it). So:

* a prompt's hashes come from one prefix sum: with `A_j = tok_j * B^-j`,
  `H(m) = (sum_{j<m} A_j) * B^(m-1)` (p is prime, so B is invertible); every
  product is of two residues below 2^31, so below 2^62;
* an appended token updates the running residue, `H = H * B + tok + 1`, and a
  block that became full records the packed hash `h0 | h1 << 31`.

The cache (`BlockHashToBlockMap`) is stored per block: the hash it is cached
under (`blk_hash`, -1 for none) and its insertion order (`blk_ins`); the
blocks cached under a hash are those with that `blk_hash`, and a lookup
returns the first inserted. A lookup sorts the cached blocks by
(hash, insertion) and binary-searches each of the request's hashes.

Registration (`cache_full_blocks`): the blocks of a request's table from
`num_cached_blocks` up to its full blocks among the first `num_tokens`
tokens take their hashes, in the order the calls happen (the callers list
requests in vLLM's order), unless a block already carries that hash.
"""

from __future__ import annotations

import torch

from ..spec.block_hash import BASES, MODULUS, TOKEN_OFFSET
from .block_pool import expand_counts
from .state import BIG, BatchState

Tensor = torch.Tensor
SHIFT = 31


def _powers(base: int, n: int, device: torch.device) -> Tensor:
    out, x = [], 1
    for _ in range(n):
        out.append(x)
        x = x * base % MODULUS
    return torch.tensor(out, dtype=torch.int64, device=device)


def prompt_hashes(
    tokens: Tensor, lengths: Tensor, bs: Tensor, width: int, seeds: Tensor | None = None
) -> tuple[Tensor, Tensor, Tensor]:
    """For prompts [N, X] (padded) of `lengths` [N] and block sizes `bs` [N]: the hashes of their full blocks
    [N, width] (-1 past the last), and the running residues (h0, h1) [N] at the end of each prompt. `seeds` [N]:
    each chain's start (`spec.block_hash.chain_seed`, a LoRA adapter's), which adds `seed * B^m` to H(m)."""
    N, X = tokens.shape
    dev = tokens.device
    pos = torch.arange(max(X, 1), device=dev)[:X]
    tok = (tokens + TOKEN_OFFSET) % MODULUS
    hashes = torch.zeros((N, width), dtype=torch.int64, device=dev)
    ends = []
    m_blocks = (torch.arange(width, device=dev)[None, :] + 1) * bs[:, None]  # [N, width] prefix lengths
    full = m_blocks <= lengths[:, None]
    for i, base in enumerate(BASES):
        up, inv = _powers(base, X + 1, dev), _powers(pow(base, MODULUS - 2, MODULUS), X + 1, dev)
        a = torch.where(pos[None, :] < lengths[:, None], tok * inv[:X][None, :] % MODULUS, torch.zeros_like(tok))
        s = torch.cat([torch.zeros((N, 1), dtype=torch.int64, device=dev), a.cumsum(1) % MODULUS], 1)  # S(m)

        seed = (
            ((seeds >> (SHIFT * i)) & MODULUS) if seeds is not None else torch.zeros(N, dtype=torch.int64, device=dev)
        )

        def H(m: Tensor) -> Tensor:
            mm = m.clamp(max=X)
            h = torch.where(m > 0, s.gather(1, mm) * up[(mm - 1).clamp(min=0)] % MODULUS, torch.zeros_like(mm))  # noqa: B023 - called in this iteration only
            return (h + seed[:, None] * up[mm] % MODULUS) % MODULUS  # noqa: B023

        hashes = hashes | (H(m_blocks.clamp(max=X)) << (SHIFT * i))
        ends.append(H(lengths[:, None]).squeeze(1))
    return torch.where(full, hashes, torch.full_like(hashes, -1)), ends[0], ends[1]


def append_token(st: BatchState, mask: Tensor, token: Tensor) -> None:
    """Extend the running residues by `token` where `mask` [B, R] (num_out already counts it), and record
    the hash of a block the token filled (only in caching instances)."""
    mask = mask & st.caching[:, None]
    t = (token + TOKEN_OFFSET) % MODULUS
    st.h0 = torch.where(mask, (st.h0 * BASES[0] + t) % MODULUS, st.h0)
    st.h1 = torch.where(mask, (st.h1 * BASES[1] + t) % MODULUS, st.h1)
    T = st.num_tokens()
    filled = mask & (T % st.bs[:, None] == 0)
    bi, si = filled.nonzero(as_tuple=True)
    if bi.numel():
        idx = torch.div(T[bi, si], st.bs[bi], rounding_mode="floor") - 1
        st.grow_wide("bhash", int(idx.max()) + 1)
        st.bhash[bi, si, idx] = st.h0[bi, si] | (st.h1[bi, si] << SHIFT)
        st.nhash[bi, si] = idx + 1


def lookup(st: BatchState, hashes: Tensor, limit: Tensor) -> tuple[Tensor, Tensor]:
    """The prefix hit of one request per instance: its hashes [B, H], at most `limit` [B] blocks.

    Returns the hit blocks [B, H] and how many lead the row (get_computed_blocks: the longest run
    of cached blocks from the start, vllm/v1/core/kv_cache_manager.py:KVCacheManager.get_computed_blocks).
    """
    B, H = hashes.shape
    if H == 0:
        return hashes.clone(), torch.zeros(B, dtype=torch.int64, device=hashes.device)
    cached = torch.where(st.blk_hash >= 0, st.blk_hash, torch.full_like(st.blk_hash, BIG))
    by_ins = torch.argsort(st.blk_ins, dim=1, stable=True)
    by_hash = torch.argsort(cached.gather(1, by_ins), dim=1, stable=True)
    perm = by_ins.gather(1, by_hash)  # blocks by (hash, insertion)
    sorted_hash = cached.gather(1, perm).contiguous()
    q = hashes.contiguous()
    at = torch.searchsorted(sorted_hash, q).clamp(max=sorted_hash.shape[1] - 1)
    found = (sorted_hash.gather(1, at) == q) & (q >= 0)
    blocks = perm.gather(1, at)
    cols = torch.arange(H, device=hashes.device)[None, :]
    run = torch.where(~found, cols, torch.full_like(cols, H)).min(1).values
    return blocks, torch.minimum(run, limit.clamp(min=0))


def register(st: BatchState, slots: Tensor, upto_tokens: Tensor, mask: Tensor) -> None:
    """cache_blocks for the listed slots [B, N] in list order: full blocks among the first `upto_tokens`."""
    if not st.keyed:
        return
    full = torch.div(upto_tokens, st.bs[:, None], rounding_mode="floor")
    full = torch.minimum(full, st.nhash.gather(1, slots))
    lo = st.ncached.gather(1, slots)
    go = mask & st.caching[:, None] & (full > lo)
    count = torch.where(go, full - lo, torch.zeros_like(lo))
    total = int(count.sum())
    if total == 0:
        return
    B, N = slots.shape
    owner, q = expand_counts(count.reshape(-1), total)
    b = torch.div(owner, N, rounding_mode="floor")
    slot = slots.reshape(-1)[owner]
    i = lo.reshape(-1)[owner] + q
    block = st.table[b, slot, i].long()
    h = st.bhash[b, slot, i]
    new = st.blk_hash[b, block] != h
    rank = (count.cumsum(1) - count).reshape(-1)[owner] + q  # registration order within the instance
    st.blk_hash[b[new], block[new]] = h[new]
    st.blk_ins[b[new], block[new]] = st.ins_ctr[b[new]] + rank[new]
    st.ins_ctr = st.ins_ctr + count.sum(1)
    st.ncached = st.ncached.scatter(1, slots, torch.where(go, full, lo))
