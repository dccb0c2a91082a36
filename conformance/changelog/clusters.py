"""A semantic changelog between two vLLM releases, found by machine (`schedspec changelog A B`).

Release A and release B run in lock-step on a campaign, two real vLLMs and no
reference, exactly as `certify --engine vllm==B --against vllm==A
--allow-divergence` runs them (`certify.py`): the same generated workloads,
mapped to configs both releases accept (`families.at_release`), every
divergence written as a counterexample and the first ones shrunk.

Each divergence is then explained by the spec. The reference runs the
shrunk workload at A and at B, and at A with one variant rule taken early
(`spec.versions.parse`: "0.32.0+priority-self-preemption-continues"):

* the reference at A agrees with A, and at B with B: the spec models both
  sides, and the difference lies in the variants between them;
* the variant whose rule alone turns the reference at A into B names the
  root cause; if no single one does, a smallest set of them that does
  together (each rule of the set is needed: without it the rest do not);
* where the reference disagrees with A or with B, the difference is one the
  spec does not model yet: reported as "not modelled", which is the finding
  that matters most.

Divergences are clustered by (first diverging field, explanation). Each
cluster keeps its smallest counterexample, replayable with `schedspec
replay`, and gets one paragraph in `changelog.md`.

Side B may be a vLLM source tree instead of a release (`--engine-b
vllm-source:PATH`): a contributor's branch against the release it branched
from. The tree is judged as the release its version file names (or
`--vllm-version`), so a difference that no variant rule explains is then
exactly what the branch changes: still "not modelled", because until the
spec learns the rule, it is a behaviour the spec has no name for.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ...reference_impl import ReferenceEngine
from ...spec.errors import SpecError
from ...spec.versions import BY_NAME, DEFAULT_RELEASE, RELEASES, VARIANTS, release_key
from ...spec.workload import Workload
from ..engines.engine_spec import EngineSpec, parse_engine
from ..engines.registry import engine_factory
from ..harness.counterexample import Counterexample
from ..harness.differ import diff


def variants_between(a: str, b: str) -> list[str]:
    """The rule variants whose release lies in (A, B]: the candidates for a difference between A and B."""
    lo, hi = release_key(a), release_key(b)
    return [v.name for v in VARIANTS if lo < release_key(v.since) <= hi and not v.config_only]


@dataclass(frozen=True)
class Side:
    """One side of the changelog: what it is called, the engine that runs it, the release the reference takes for it."""

    label: str  # "0.32.0", or "the tree at PATH"
    engine: EngineSpec  # `vllm==0.32.0`, `vllm@PATH`, `vllm==0.32.0@PATH`
    release: str

    @property
    def is_release(self) -> bool:
        return self.engine.source is None


def release_side(release: str, option: str) -> Side:
    if release not in RELEASES:
        raise SpecError(option, release, f"must be one of {', '.join(RELEASES)}")
    return Side(release, parse_engine(f"vllm=={release}", option), release)


def engine_side(engine: str, version: str | None, option: str = "--engine-b") -> Side:
    """Side B from `--engine-b`: `vllm==V`, or a source tree (`vllm-source:PATH`, `vllm@PATH`, `vllm==V@PATH`).

    The one parser of `--engine-b`, whose grammar is the engine's plus `vllm-source:PATH`.
    """
    from ..engines.registry import certify_engine

    if engine.startswith("vllm-source:"):
        spec = certify_engine(parse_engine("vllm", option), engine[len("vllm-source:") :], version)
    else:
        spec = parse_engine(engine, option)
        if not spec.is_vllm:
            raise SpecError(option, engine, "must be a vLLM: vllm==V, vllm-source:PATH, vllm@PATH or vllm==V@PATH")
        if spec.source is not None:
            bare = parse_engine(f"vllm=={spec.release}" if engine.startswith("vllm==") else "vllm", option)
            spec = certify_engine(bare, spec.source, version)
        elif version is not None:
            raise SpecError("--vllm-version", version, "only applies to a source tree (--engine-b vllm-source:PATH)")
    release = spec.release or DEFAULT_RELEASE
    if spec.source is None:
        return Side(release, spec, release)
    return Side(f"the tree at {spec.source}", spec, release)


def check_sides(a: Side, b: Side) -> None:
    if b.is_release and release_key(a.release) >= release_key(b.release):
        raise SpecError("B", b.release, f"must be a later release than A ({a.release})")
    if not b.is_release and release_key(a.release) > release_key(b.release):
        raise SpecError("--engine-b", b.engine, f"is judged as {b.release}, older than A ({a.release})")


def check_releases(a: str, b: str) -> None:
    check_sides(release_side(a, "A"), release_side(b, "B"))


@dataclass
class Explanation:
    """What the spec says about one divergence between A and B."""

    ref_agrees_a: bool
    ref_agrees_b: bool
    variants: tuple[str, ...]  # the rule(s) that turn the reference at A into B; () if none does
    alone: bool = True  # each of `variants` does it on its own (else only the set together)
    where_a: str = ""  # the first disagreement of the reference with A, when there is one
    where_b: str = ""

    @property
    def key(self) -> str:
        if not (self.ref_agrees_a and self.ref_agrees_b):
            return "not modelled"
        if not self.variants:
            return "not modelled"
        if len(self.variants) == 1:
            return self.variants[0]
        return ("any of: " if self.alone else "together: ") + ", ".join(self.variants)

    @property
    def explained(self) -> bool:
        return self.key != "not modelled"


def _at(workload: Workload, version: str) -> Workload:
    return workload.replace(config=dataclasses.replace(workload.config, vllm_version=version))


def _where(result: Any) -> str:
    if result.error is not None:
        return f"error: {result.error}"
    d = result.divergence
    return "" if d is None else f"step {d.step}, {d.field}: reference {d.a!r}, vLLM {d.b!r}"


def _side(x: str | Side) -> Side:
    return x if isinstance(x, Side) else release_side(x, "release")


def explain(
    workload: Workload, a: str | Side, b: str | Side, level: str, factories: dict[str, Callable[..., Any]]
) -> Explanation:
    """Hold the reference, at A, at B and at A with each variant taken early, against the real A and B.

    `factories` runs each side, keyed by its label (a release's label is the release itself).
    """
    sa, sb = _side(a), _side(b)

    def agrees(version: str, side: Side) -> tuple[bool, str]:
        r = diff(_at(workload, version), ReferenceEngine, factories[side.label], level, names=("reference", side.label))
        return r.divergence is None and r.error is None, _where(r)

    ok_a, where_a = agrees(sa.release, sa)
    ok_b, where_b = agrees(sb.release, sb)
    found: tuple[str, ...] = ()
    alone = True
    if ok_a and ok_b:
        candidates = variants_between(sa.release, sb.release)
        found = tuple(v for v in candidates if agrees(f"{sa.release}+{v}", sb)[0])
        if not found:  # a smallest set that does: drop each rule the rest can do without
            needed = list(candidates)
            for v in candidates:
                rest = [x for x in needed if x != v]
                if rest and agrees(sa.release + "".join(f"+{x}" for x in rest), sb)[0]:
                    needed = rest
            found, alone = tuple(needed), False
    return Explanation(ok_a, ok_b, found, alone, where_a, where_b)


@dataclass
class Cluster:
    first_field: str  # the first diverging field
    explanation: Explanation
    members: list[str] = field(default_factory=list)  # workload names
    best: Counterexample | None = None  # the smallest counterexample
    best_size: tuple[int, int] = (10**9, 10**9)

    def paragraph(self, a: str | Side, b: str | Side, file: str) -> str:
        sa, sb = _side(a), _side(b)
        a, b = sa.label, sb.label
        e, n = self.explanation, len(self.members)
        head = f"{n} diverging workload{'s' * (n != 1)} part{'s' * (n == 1)} first at `{self.first_field}`."
        if e.ref_agrees_a and not e.ref_agrees_b and not sb.is_release:
            body = (
                f"Changed by the tree: the reference at {sb.release}, the release the tree is judged as, agrees "
                f"with vLLM {sa.label} but not with the tree ({e.where_b}). No variant rule models this; if the "
                "change is intended, add one (`spec/versions.py`)."
            )
        elif not e.ref_agrees_a or not e.ref_agrees_b:
            side = [
                f"vLLM {v} ({w})"
                for ok, v, w in ((e.ref_agrees_a, a, e.where_a), (e.ref_agrees_b, b, e.where_b))
                if not ok
            ]
            body = (
                "Not modelled: the reference disagrees with " + " and with ".join(side) + ". This is a difference "
                "the spec does not model; add a variant for it (`spec/versions.py`)."
            )
        elif len(e.variants) == 1:
            v = BY_NAME[e.variants[0]]
            body = (
                f"Root cause: `{v.name}`, changed in {v.since} ({v.vllm}). Before: {v.before}. From {v.since}: "
                f"{v.after}. The reference at {sa.release} agrees with vLLM {a}, at {sb.release} with vLLM {b}, and "
                f"at {sa.release} with this rule alone taken from {v.since} it reproduces vLLM {b}."
            )
        elif e.alone:
            body = (
                f"The reference at {sa.release} and at {sb.release} agree with vLLM {a} and {b}, and each of the rules "
                f"{', '.join(f'`{x}`' for x in e.variants)}, taken alone, turns {a} into {b} on this workload."
            )
        else:
            body = (
                f"The reference at {sa.release} and at {sb.release} agree with vLLM {a} and {b}, and no single rule explains the "
                f"difference: the rules {', '.join(f'`{x}`' for x in e.variants)} act together."
            )
        r, s = self.best_size
        size = f"{r} request{'s' * (r != 1)}, {s} step{'s' * (s != 1)}"
        return f"{head} {body} Smallest counterexample ({size}): `{file}`."


def cluster(
    counterexamples: list[Counterexample],
    a: str | Side,
    b: str | Side,
    level: str,
    factories: dict[str, Callable[..., Any]],
) -> list[Cluster]:
    by_key: dict[tuple[str, str], Cluster] = {}
    for cx in counterexamples:
        e = explain(cx.workload, a, b, level, factories)
        fld = str(cx.divergence["field"]).split("[")[0]
        c = by_key.setdefault((fld, e.key), Cluster(fld, e))
        c.members.append(cx.workload.name)
        size = (len(cx.workload.requests), int(cx.divergence.get("step", 0)) + 1)
        if size < c.best_size:
            c.best, c.best_size = cx, size
    return sorted(by_key.values(), key=lambda c: (c.explanation.explained, -len(c.members), c.first_field))


def side_factories(*sides: Side, **kw: Any) -> dict[str, Callable[..., Any]]:
    return {s.label: engine_factory(s.engine, **kw) for s in sides}


def release_factories(a: str, b: str, **kw: Any) -> dict[str, Callable[..., Any]]:
    return side_factories(release_side(a, "A"), release_side(b, "B"), **kw)
