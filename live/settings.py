"""The settings of a monitored scheduler: one env var, or a small JSON file, read once per scheduler.

Design notes
------------
* A monitored scheduler is built by vLLM (`scheduler_config.scheduler_cls`),
  which passes it no arguments of ours, so its settings come from the
  environment: $SCHEDSPEC_LIVE="mode=raise,capture=/path/cap.jsonl,sample=1,
  invariants=a;b,hash_token_ids=0,max_bytes=67108864,max_parts=8", or
  $SCHEDSPEC_LIVE_CONFIG=path.json holding the same keys as a JSON object
  (the file wins where both are set, so a deployment can pin its settings).
* Every field is checked here, before the scheduler serves a request; a bad
  one is one line naming the field and the value (`LiveSettingsError`), the
  way the spec's configs report theirs. Unknown fields are refused, so a typo
  never silently turns monitoring off.
* `sample=N` thins the monitors only (one step in N is judged, from vLLM's
  state read before it: online.py); the capture always keeps every step, or
  it could not be replayed.
* Pure: no vLLM, no spec import; the unit tests call `parse` directly.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

ENV = "SCHEDSPEC_LIVE"
CONFIG_ENV = "SCHEDSPEC_LIVE_CONFIG"
MODES = ("off", "log", "raise")
DEFAULT_MAX_BYTES = 64 * 1024 * 1024
DEFAULT_MAX_PARTS = 8


class LiveSettingsError(ValueError):
    """One line: `SCHEDSPEC_LIVE: field 'mode' = 'loud': must be one of off, log, raise`."""


@dataclass(frozen=True)
class LiveSettings:
    mode: str = "log"
    capture: str | None = None  # the capture's first part; None: no capture
    sample: int = 1  # the monitors judge one step in `sample`
    invariants: tuple[str, ...] | None = None  # None: every monitor
    hash_token_ids: bool = False
    max_bytes: int = DEFAULT_MAX_BYTES
    max_parts: int = DEFAULT_MAX_PARTS
    source: str = field(default=ENV, compare=False)  # where they were read, for error lines

    @property
    def monitoring(self) -> bool:
        return self.mode != "off"


def from_environ(environ: Mapping[str, str] | None = None) -> LiveSettings:
    """The settings of $SCHEDSPEC_LIVE_CONFIG (a JSON file) or else $SCHEDSPEC_LIVE; defaults when neither is set."""
    env = os.environ if environ is None else environ
    path = env.get(CONFIG_ENV)
    if path:
        try:
            with open(path, encoding="utf-8") as f:
                data = json.load(f)
        except OSError as e:
            raise LiveSettingsError(f"{CONFIG_ENV}: {path!r} cannot be read: {e.strerror}") from None
        except json.JSONDecodeError as e:
            raise LiveSettingsError(f"{CONFIG_ENV}: {path!r} is not valid JSON: {e.msg} at line {e.lineno}") from None
        if not isinstance(data, dict):
            raise LiveSettingsError(f"{CONFIG_ENV}: {path!r} must hold a JSON object")
        return from_mapping(data, f"{CONFIG_ENV} {path}")
    return parse(env.get(ENV, ""))


def parse(text: str) -> LiveSettings:
    """`key=value,key=value` (the env var's syntax); `invariants` lists its names with `;`."""
    items: dict[str, Any] = {}
    for part in text.split(","):
        if not part.strip():
            continue
        key, eq, value = part.partition("=")
        if not eq:
            raise LiveSettingsError(f"{ENV}: {part.strip()!r} is not key=value")
        items[key.strip()] = value.strip()
    return from_mapping(items, ENV)


def from_mapping(data: Mapping[str, Any], source: str) -> LiveSettings:
    def bad(key: str, why: str) -> LiveSettingsError:
        return LiveSettingsError(f"{source}: field {key!r} = {data[key]!r}: {why}")

    known = set(LiveSettings.__dataclass_fields__) - {"source"}
    for key in data:
        if key not in known:
            raise LiveSettingsError(f"{source}: field {key!r} is not a setting (known: {', '.join(sorted(known))})")
    out: dict[str, Any] = {"source": source}
    if "mode" in data:
        if data["mode"] not in MODES:
            raise bad("mode", f"must be one of {', '.join(MODES)}")
        out["mode"] = data["mode"]
    if "capture" in data:
        value = data["capture"]
        if not isinstance(value, str):
            raise bad("capture", "must be a path")
        out["capture"] = value or None
    for key, least in (("sample", 1), ("max_bytes", 4096), ("max_parts", 1)):
        if key in data:
            out[key] = _integer(data[key], least, lambda why, key=key: bad(key, why))
    if "hash_token_ids" in data:
        out["hash_token_ids"] = _boolean(data["hash_token_ids"], lambda why: bad("hash_token_ids", why))
    if "invariants" in data:
        value = data["invariants"]
        names = value.split(";") if isinstance(value, str) else value
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            raise bad("invariants", "must be names separated by ';' (a list in a JSON file)")
        out["invariants"] = tuple(n.strip() for n in names if n.strip())
    return LiveSettings(**out)


def _integer(value: Any, least: int, bad: Any) -> int:
    if isinstance(value, bool):
        raise bad("must be an integer")
    try:
        n = int(value)
    except (TypeError, ValueError):
        raise bad("must be an integer") from None
    if n < least:
        raise bad(f"must be >= {least}")
    return n


def _boolean(value: Any, bad: Any) -> bool:
    if isinstance(value, bool):
        return value
    if value in ("1", "true", "yes", "on", 1):
        return True
    if value in ("0", "false", "no", "off", "", 0):
        return False
    raise bad("must be 0 or 1")
