"""Concurrent HTTP clients of the OpenAI-compatible server: streaming completions, some abandoned mid-stream.

Each request is a `/v1/completions` call with a token-id prompt (the tiny
model's vocabulary is `t3` ... `t999`), a random `max_tokens`, sometimes a
stop token, streamed. A drawn share of the clients close the connection
after a few chunks: vLLM's server turns the disconnect into an abort, which
EngineCore drains between a step's execution and its update (`Abort.mid_step`).
Bursts (many clients at once) force preemption in a small KV pool. In the
`controls` variant an operator resets the prefix cache and pauses and resumes
generation beside them; in the `pooling` variant each client asks
`/v1/embeddings` for its prompt instead (a pooling model samples nothing). Only the standard library: the point is a real HTTP
client, not a particular one.
"""

from __future__ import annotations

import http.client
import json
import random
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

VOCAB = range(3, 1000)


@dataclass(frozen=True)
class Plan:
    """One client's request, drawn from the seed: the same seed, the same requests (their timing is the machine's)."""

    index: int
    prompt: tuple[int, ...]
    max_tokens: int
    stop_token: int | None
    disconnect_after: int | None  # chunks read before the client walks away; None: it reads to the end
    priority: int


def plans(n: int, seed: int, disconnect_rate: float, priority: bool) -> list[Plan]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        prompt = tuple(rng.choice(VOCAB) for _ in range(rng.randint(4, 200)))
        out.append(
            Plan(
                i,
                prompt,
                rng.randint(1, 48),
                rng.choice(VOCAB) if rng.random() < 0.2 else None,
                rng.randint(1, 6) if rng.random() < disconnect_rate else None,
                rng.randint(0, 3) if priority else 0,
            )
        )
    return out


@dataclass
class Tally:
    outcomes: Counter[str] = field(default_factory=Counter)  # completed, disconnected, refused, failed
    tokens: int = 0
    latencies: list[float] = field(default_factory=list)  # seconds, of the requests read to the end
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, outcome: str, tokens: int = 0, seconds: float | None = None) -> None:
        with self.lock:
            self.outcomes[outcome] += 1
            self.tokens += tokens
            if seconds is not None:
                self.latencies.append(seconds)


def one(port: int, model: str, plan: Plan, tally: Tally) -> None:
    body = {
        "model": model,
        "prompt": list(plan.prompt),
        "max_tokens": plan.max_tokens,
        "temperature": 0,
        "stream": True,
        "ignore_eos": True,
    }
    if plan.stop_token is not None:
        body["stop_token_ids"] = [plan.stop_token]
    if plan.priority:
        body["priority"] = plan.priority
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
    t0 = time.monotonic()
    try:
        conn.request("POST", "/v1/completions", json.dumps(body), {"Content-Type": "application/json"})
        r = conn.getresponse()
        if r.status != 200:
            tally.add("refused")
            return
        chunks = 0
        for raw in r:
            line = raw.strip()
            if not line.startswith(b"data:") or line == b"data: [DONE]":
                continue
            chunks += 1
            if plan.disconnect_after is not None and chunks >= plan.disconnect_after:
                conn.sock.close() if conn.sock is not None else None  # walk away mid-stream
                tally.add("disconnected", chunks)
                return
        tally.add("completed", chunks, time.monotonic() - t0)
    except (OSError, http.client.HTTPException):
        tally.add("failed")
    finally:
        conn.close()


def drive(
    port: int, model: str, todo: list[Plan], concurrency: int, controls_seed: int | None = None, pooling: bool = False
) -> Tally:
    """Every planned request, `concurrency` at a time; with `controls_seed`, an operator's calls beside them;
    `pooling`: each asks for the prompt's embedding instead."""
    tally = Tally()
    done = threading.Event()
    operator = None
    if controls_seed is not None:
        operator = threading.Thread(target=controls, args=(port, random.Random(controls_seed), done, tally))
        operator.start()
    try:
        with ThreadPoolExecutor(concurrency) as pool:
            list(pool.map(lambda p: (embed if pooling else one)(port, model, p, tally), todo))
    finally:
        done.set()
        if operator is not None:
            operator.join()
    return tally


def embed(port: int, model: str, plan: Plan, tally: Tally) -> None:
    """`/v1/embeddings` of the plan's prompt: one response, no stream. A client that walks away closes its socket
    before the answer (the server aborts the request when it sees the disconnect)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
    t0 = time.monotonic()
    try:
        body = {"model": model, "input": list(plan.prompt)}
        conn.request("POST", "/v1/embeddings", json.dumps(body), {"Content-Type": "application/json"})
        if plan.disconnect_after is not None:
            time.sleep(0.01 * plan.disconnect_after)  # give it a step or so to start
            conn.sock.close() if conn.sock is not None else None
            tally.add("disconnected")
            return
        r = conn.getresponse()
        data = r.read()
        if r.status != 200 or b'"embedding"' not in data:
            tally.add("refused")
            return
        tally.add("completed", 1, time.monotonic() - t0)
    except (OSError, http.client.HTTPException):
        tally.add("failed")
    finally:
        conn.close()


# The operator's calls (vLLM's development endpoints, `VLLM_SERVER_DEV_MODE`): a weight update's cache reset, with
# the running requests preempted or not, and a pause in mode keep (new requests queue, none is refused) that a
# resume ends. vLLM's engine core turns them into the scheduler's `reset_prefix_cache` and `set_pause_state`,
# which the live mode judges (`spec/controls.py`).
CALLS = (
    "/reset_prefix_cache?reset_running_requests=true",
    "/reset_prefix_cache?reset_running_requests=true",
    "/reset_prefix_cache",
    "/pause?mode=keep",
)


def controls(port: int, rng: random.Random, done: threading.Event, tally: Tally) -> None:
    """Until `done`: a call every 0.05 to 0.4 s, a pause resumed 0.05 to 0.3 s later; each counted by its path."""
    while not done.wait(rng.uniform(0.05, 0.4)):
        path = rng.choice(CALLS)
        _post(port, path, tally)
        if path.startswith("/pause"):
            time.sleep(rng.uniform(0.05, 0.3))
            _post(port, "/resume", tally)


def _post(port: int, path: str, tally: Tally) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
    try:
        conn.request("POST", path)
        ok = conn.getresponse().status == 200
    except (OSError, http.client.HTTPException):
        ok = False
    finally:
        conn.close()
    tally.add(f"control {path.split('?')[0]}" if ok else "control failed")
