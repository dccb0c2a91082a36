"""The batch queue (vllm/v1/engine/core.py:EngineCore.step_with_batch_queue), for B instances.

Under async scheduling or pipeline parallel a step's output is absorbed by a
later step: each instance queues the steps it scheduled (at most its
`max_concurrent_batches`: 2 for async, pp for PP, pp + 1 for both) with
everything update_from_output needs: grants, their order, scheduled drafts
and the fake model's tokens. `spec.engine._batch_queue_steps` decides per
step whether an instance pushes, absorbs the oldest entry, or both; this
class only stores the entries, as tensors [B, depth, ...] (depth: the
largest queue of the batch), so that absorbing is one gather for all
instances. Instances without a queue never use it: they absorb the step
they just scheduled.
"""

from __future__ import annotations

import torch

Tensor = torch.Tensor


class BatchQueue:
    FIELDS = ("n", "key", "nspec", "gen", "ngen")

    def __init__(self, B: int, R: int, G: int, depth: int, device: torch.device) -> None:
        self.depth = depth
        z = torch.zeros((B, depth, R), dtype=torch.int64, device=device)
        self.n, self.key, self.nspec, self.ngen = z.clone(), z.clone(), z.clone(), z.clone()
        self.gen = torch.zeros((B, depth, R, G), dtype=torch.int64, device=device)
        self.size = torch.zeros(B, dtype=torch.int64, device=device)

    def push(self, mask: Tensor, n: Tensor, key: Tensor, nspec: Tensor, gen: Tensor, ngen: Tensor) -> None:
        """Append one entry to the masked instances' queues (the caller keeps each below its own size)."""
        depth = self.depth
        at = (self.size.clamp(max=depth - 1)[:, None] == torch.arange(depth, device=mask.device)[None, :]) & mask[
            :, None
        ]
        for name, value in zip(self.FIELDS, (n, key, nspec, gen, ngen)):
            cur = getattr(self, name)
            sel = at.reshape(at.shape + (1,) * (cur.dim() - 2))
            setattr(self, name, torch.where(sel, value[:, None], cur))
        self.size = self.size + mask.long()

    def pop(self, mask: Tensor) -> tuple[Tensor, ...]:
        """Take the oldest entry of the masked instances (zeros elsewhere: an update that does nothing)."""
        out = []
        for name in self.FIELDS:
            cur = getattr(self, name)
            first = cur[:, 0]
            sel = mask.reshape(mask.shape + (1,) * (first.dim() - 1))
            out.append(torch.where(sel, first, torch.zeros_like(first)))
            shifted = torch.cat([cur[:, 1:], torch.zeros_like(cur[:, :1])], 1)
            setattr(self, name, torch.where(sel[:, None], shifted, cur))
        self.size = self.size - mask.long()
        return tuple(out)

    def select(self, keep: Tensor) -> None:
        for name in self.FIELDS + ("size",):
            setattr(self, name, getattr(self, name).index_select(0, keep))
