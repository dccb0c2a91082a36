"""An engine as the user named it, parsed once into a typed value.

`--engine`, `--against`, `--engine-b`, a counterexample file's `engine_b`
and the pytest plugin's `engine=` all name an engine with the same small
language: `reference`, `torch`, `vllm` (the default release), `vllm==V`,
`vllm@PATH` (a source tree, judged as the default release), `vllm==V@PATH`,
or `module:callable`. `parse_engine` reads that string at the boundary and
nowhere else; the library takes an `EngineSpec` and asks it questions
(`is_vllm`, `release`, `source`, `builtin`) instead of parsing the string
again at every turn.

`name` is the canonical spelling, and the one thing that leaves the
process: certificates, counterexample files and an isolated engine's host
process carry it, and `parse_engine(name)` gives the same spec back.
`option` is where the user wrote it, so a failure found later (a module that
will not import, a driver that will not start) still names the option.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from ...spec.errors import SpecError
from ...spec.versions import DEFAULT_RELEASE, RELEASES

BUILTIN_ENGINES = ("reference", "vllm", "torch")
VLLM_SOURCE_PREFIX = "vllm@"
VLLM_RELEASE_PREFIX = "vllm=="

Kind = Literal["reference", "torch", "vllm", "import"]


@dataclass(frozen=True)
class EngineSpec:
    """One engine, parsed. Public: every room that runs an engine takes one."""

    name: str
    kind: Kind
    release: str | None = None  # vllm: the release it runs, or that its source tree is judged as
    source: str | None = None  # vllm: a source tree, as given (made absolute by `vllm_source_engine`)
    option: str = field(default="--engine", compare=False)

    def __str__(self) -> str:
        return self.name

    @property
    def is_vllm(self) -> bool:
        return self.kind == "vllm"

    @property
    def builtin(self) -> bool:
        """One of ours or the real vLLM: trusted, run in process (`registry.engine_factory`)."""
        return self.kind != "import"

    @property
    def module_and_callable(self) -> tuple[str, str]:
        module, _, attr = self.name.partition(":")
        return module, attr


def check_release(release: str, option: str, given: str | None = None) -> str:
    """A release schedspec models, or a one-line error naming the option."""
    if release not in RELEASES:
        raise SpecError(option, given or release, f"must name a vLLM release schedspec models: {', '.join(RELEASES)}")
    return release


def parse_engine(text: str, option: str = "--engine") -> EngineSpec:
    """The one parser of an engine's name; a bad name is a one-line error naming `option`."""
    if text in ("reference", "torch"):
        return EngineSpec(text, text, option=option)  # type: ignore[arg-type]  # narrowed by the test above
    if text == "vllm":
        return EngineSpec(text, "vllm", DEFAULT_RELEASE, option=option)
    if text.startswith(VLLM_SOURCE_PREFIX):
        return EngineSpec(text, "vllm", DEFAULT_RELEASE, text[len(VLLM_SOURCE_PREFIX) :], option=option)
    if text.startswith(VLLM_RELEASE_PREFIX):
        release, at, source = text[len(VLLM_RELEASE_PREFIX) :].partition("@")
        check_release(release, option, text)
        return EngineSpec(text, "vllm", release, source if at else None, option=option)
    if ":" in text:  # whether the module imports is the factory's question (`registry.in_process_factory`)
        return EngineSpec(text, "import", option=option)
    raise SpecError(option, text, f"must be one of {', '.join(BUILTIN_ENGINES)}, vllm==VERSION or module:callable")


REFERENCE = EngineSpec("reference", "reference")  # the oracle, the default `--against`
