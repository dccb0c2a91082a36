"""The live capture format's one home: its name, version, line kinds, schema, and the token-id hash.

`schedspec.live` writes captures inside vLLM (`live/session.py`);
`conformance/live_replay/` reads and replays them, and writes fixture
captures of any trace (`capture_write.py`). All three take the format's
literals and the hasher from here, beside the trace and workload formats the
capture reuses, so a fixture is what `MonitoredScheduler` writes. The line
schema is `live_capture.schema.json`, in this folder (`spec.jsonio.schema`).

Token ids under `hash_token_ids` go through a keyed hash, so a capture holds
no prompt or output a reader could decode:

* The capture must stay replayable: the spec's rules compare token ids only
  for equality (a stop token, an EOS, a draft that matches the sample, a
  prefix-cache block hash), never for order or size. So any injective map
  keeps a replay faithful; a keyed BLAKE2b of each id, per capture session,
  is one with overwhelming probability, and without the key (random, never
  written) the ids cannot be mapped back by trying the vocabulary.
* The image is 2**62 wide, not the vocabulary's width: folding into the
  vocabulary would collide (about n**2 / 2V pairs for n distinct ids), and a
  collision between an ordinary token and a stop token would make a replay
  stop where vLLM did not. JSON integers of 62 bits are exact in Python.
* Negative ids are vLLM's placeholders (async drafts, -1), not tokens: kept.
* A bounded cache (the hot ids of a vocabulary) keeps the cost per token
  to a dict lookup; memory stays bounded whatever the run's length.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable
from functools import lru_cache
from typing import Any

CAPTURE_FORMAT = "schedspec-live-capture"
CAPTURE_VERSION = 1
KINDS = ("header", "add", "abort", "schedule", "update", "drafts", "scope", "end")

SPACE = 1 << 62


def encode_line(obj: Any) -> bytes:
    """One capture line's bytes, without the newline: compact JSON, keys in the order they were built.

    Inside vLLM the writer uses msgspec's encoder when it is there, which
    writes the same bytes for a capture's values (ints, strings, lists, dicts).
    """
    return json.dumps(obj, separators=(",", ":")).encode()


class TokenHasher:
    def __init__(self, key: bytes | None = None) -> None:
        self.key = key if key is not None else os.urandom(16)
        self.one = lru_cache(maxsize=1 << 16)(self._hash)

    def _hash(self, token: int) -> int:
        if token < 0:
            return token
        digest = hashlib.blake2b(token.to_bytes(8, "little", signed=False), key=self.key, digest_size=8).digest()
        return int.from_bytes(digest, "little") % SPACE

    def many(self, tokens: Iterable[int]) -> list[int]:
        one = self.one
        return [one(int(t)) for t in tokens]


def identity(tokens: Iterable[int]) -> list[int]:
    return [int(t) for t in tokens]
