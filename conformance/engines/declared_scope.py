"""What an engine declares it models, beyond the core protocol: the optional methods of `spec.engine.Engine`.

A deployment feature reaches an engine through one optional method
(`spec.engine.FEATURE_METHODS`: `grammar_compiled` for structured output).
An engine without it declares the feature outside its scope, and that is a
statement, not a failure: a campaign that was not asked for the feature
leaves its families out and says so in the certificate, and one that was
asked for them (`--family structured-output`) is refused in one line before
anything runs (`certify.plan`). Our engines and the real vLLM model every
feature; an engine given as `module:callable` is asked once, by building one
engine the way the campaign will (in its own process unless `--in-process`).
"""

from __future__ import annotations

from ...spec.config import SchedulerConfig
from ...spec.engine import FEATURE_METHODS
from .engine_spec import EngineSpec
from .registry import engine_factory


def supports(engine: object, method: str) -> bool:
    """Whether a built engine has one of the protocol's optional methods (a wrapper answers for its engine)."""
    ask = getattr(engine, "supports", None)
    return bool(ask(method)) if callable(ask) else callable(getattr(engine, method, None))


_ASKED: dict[EngineSpec, dict[str, str]] = {}  # an engine is asked once per process


def missing_features(spec: EngineSpec, isolate: bool | None = None) -> dict[str, str]:
    """The feature methods the engine lacks, each with the feature it would carry; {} for our engines and vLLM."""
    if spec.builtin:
        return {}
    if spec not in _ASKED:
        engine = engine_factory(spec, isolate=isolate)(SchedulerConfig())
        try:
            _ASKED[spec] = {m: feature for m, feature in FEATURE_METHODS.items() if not supports(engine, m)}
        finally:
            close = getattr(engine, "close", None)
            if callable(close):
                close()
    return dict(_ASKED[spec])
