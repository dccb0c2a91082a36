"""The child side of `isolated.py`: one engine at a time, served over two pipes.

Run as `python -m schedspec.conformance.engines.host IN_FD OUT_FD ENGINE OPTION`: the engine's canonical
name, read back with `engine_spec.parse_engine`, and the option the user named it with.
It answers each message with `("ok", value)`, `("raise", "Type: message")`
when the engine raised, or `("start" | "malformed", value, why)` when the
engine could not be built or answered something with no JSON form. Its
stdout and stderr go to a file the parent reads only when the child dies,
so an engine that prints cannot corrupt the protocol.
"""

from __future__ import annotations

import sys
import traceback
from multiprocessing.connection import Connection
from typing import Any

from ...spec.engine import FEATURE_METHODS, EngineFactory
from ...spec.errors import InfrastructureError
from .engine_spec import EngineSpec, parse_engine
from .exits import EngineExited, engine_may_not_exit, exit_cause
from .lifeline import die_with_parent
from .snapshot import check_engine, encode


def _raised(e: BaseException) -> tuple[str, str]:
    frames = traceback.extract_tb(e.__traceback__)
    where = f" (at {frames[-1].filename}:{frames[-1].lineno})" if frames else ""
    first = str(e).splitlines()[0] if str(e) else ""
    return "raise", f"{type(e).__name__}: {first}{where}"


def serve(inbox: Connection, outbox: Connection, spec: EngineSpec) -> None:
    from .registry import in_process_factory

    factory: EngineFactory | None = None
    engine: Any = None
    while True:
        try:
            message = inbox.recv()
        except EOFError:  # the parent went away
            return
        op = message[0]
        try:
            if op == "exit":
                return
            if op == "hello":
                factory = in_process_factory(spec)
                outbox.send(("ok", None))
            elif op == "make":
                assert factory is not None  # the parent's first message is always "hello" (isolated._Host)
                with engine_may_not_exit():
                    engine = check_engine(factory(message[1]), f"the factory {spec.name!r}")
                outbox.send(("ok", str(getattr(engine, "name", spec.name))))
            elif op == "drop":
                close = getattr(engine, "close", None)
                engine = None
                if close is not None:
                    close()
                outbox.send(("ok", None))
            else:
                _, method, args = message
                fn = getattr(engine, method, None)
                if fn is None and method == "update_draft_token_ids":
                    outbox.send(("ok", None))  # optional in the protocol
                    continue
                if fn is None and method in FEATURE_METHODS:
                    raise InfrastructureError(
                        f"engine {spec.name!r} {method}",
                        None,
                        f"has no {method}(): {FEATURE_METHODS[method]} is outside its declared scope",
                        kind="start",
                    )
                assert fn is not None  # check_engine found every method of the protocol; only that one is optional
                with engine_may_not_exit():
                    answer = fn(*args)
                outbox.send(("ok", encode(method, answer)))
        except InfrastructureError as e:
            outbox.send((e.kind, e.where, e.why))
        except (SystemExit, EngineExited, KeyboardInterrupt) as e:  # the engine ended its process: say so, end it
            outbox.send(
                ("died", f"engine {spec.name!r} {op}", exit_cause(e) or f"the engine raised {type(e).__name__}")
            )
            return
        except Exception as e:  # noqa: BLE001 - the engine's exception is its finding, reported, not fatal here
            outbox.send(("start", "import", f"could not be imported: {_raised(e)[1]}") if op == "hello" else _raised(e))


if __name__ == "__main__":
    die_with_parent()  # a host stuck in a hanging engine never reads the EOF of a parent that was killed
    engine = parse_engine(sys.argv[3], sys.argv[4])
    serve(Connection(int(sys.argv[1]), writable=False), Connection(int(sys.argv[2]), readable=False), engine)
