"""What an engine declares it models, beyond the core protocol: the optional methods of `spec.engine.Engine`.

A deployment feature reaches an engine through one optional method
(`spec.engine.FEATURE_METHODS`: `grammar_compiled` for structured output),
or through the config and the requests alone (`spec.engine.DECLARED_FEATURES`:
LoRA), which an engine claims by naming it in a class attribute
`features = frozenset({"lora"})`. An engine without the method, or without
the name, declares the feature outside its scope, and that is a
statement, not a failure: a campaign that was not asked for the feature
leaves its families out and says so in the certificate, and one that was
asked for them (`--family structured-output`) is refused in one line before
anything runs (`certify.plan`).

The declaration is read from the engine's class, never by building an
engine: a factory may exit, hang or count its calls (the demo engines do),
and asking it would change the run it is asked for. The class is the
factory itself, or the class its return annotation names
(`def make(config) -> MyEngine`). A factory with neither declares the core
protocol only. Our engines and the real vLLM model every feature.
"""

from __future__ import annotations

import typing

from ...spec.engine import DECLARED_FEATURES, FEATURE_METHODS
from .engine_spec import EngineSpec
from .registry import in_process_factory


def engine_class(factory: object) -> type | None:
    """The class a factory builds: itself, or its return annotation; None if it does not say."""
    if isinstance(factory, type):
        return factory
    try:
        built = typing.get_type_hints(factory).get("return")
    except Exception:  # noqa: BLE001 - an annotation that does not resolve declares nothing
        return None
    return built if isinstance(built, type) else None


def models(cls: type | None, need: str) -> bool:
    """Whether an engine class models a feature: it has the feature's method, or names it in `features`."""
    if cls is None:
        return False
    if need in FEATURE_METHODS:
        return callable(getattr(cls, need, None))
    return need in getattr(cls, "features", frozenset())


def missing_features(spec: EngineSpec) -> dict[str, str]:
    """The features the engine does not model, by what a family needs (a method or a declared name), each with
    what it is; {} for our engines and vLLM."""
    if spec.builtin:
        return {}
    cls = engine_class(in_process_factory(spec))
    needs = {**FEATURE_METHODS, **DECLARED_FEATURES}
    return {need: what for need, what in needs.items() if not models(cls, need)}
