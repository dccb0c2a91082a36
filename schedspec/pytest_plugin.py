"""schedspec as a pytest plugin: certify an engine from any project's test suite.

    def test_my_engine(schedspec_certify):
        schedspec_certify("mypkg.engine:make", workloads=200)

The plugin is registered under the `pytest11` entry point, so installing
schedspec is all a project does; nothing goes into its conftest. The
fixture runs the same campaign as `schedspec certify`, in process, and
writes the same outputs (certificate, JUnit XML, counterexamples, timelines)
to the test's tmp dir, or under `--schedspec-out DIR` where CI can upload
them. A failed certificate fails the test with what a reader needs first:
the first counterexample as a step table, the broken invariants, and where
the files are. Everything heavy is imported inside the fixture, because
pytest loads this module in every session of every project that has
schedspec installed.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

MAX_VIOLATIONS_SHOWN = 5


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("schedspec", "schedspec engine certification")
    group.addoption(
        "--schedspec-out",
        metavar="DIR",
        default=None,
        help="write each schedspec_certify certificate under DIR/<test name> instead of the test's tmp dir",
    )


def engine_name(engine: str | Callable[..., Any]) -> str:
    """An engine factory by the name the harness resolves (`module:callable`); workers re-import it by name."""
    if isinstance(engine, str):
        return engine
    module, qualname = getattr(engine, "__module__", None), getattr(engine, "__qualname__", "")
    if not module or not qualname or "<" in qualname or "." in qualname:
        raise TypeError(f"schedspec_certify needs 'module:callable' or a module-level factory, not {engine!r}")
    return f"{module}:{qualname}"


def failure_message(cert: dict[str, Any], out_dir: Path) -> str:
    """What the failed test prints: verdict, first counterexample as a table, broken invariants, files."""
    from .conformance.harness.explain import markdown_table

    lines = [
        f"schedspec: engine {cert['engine']!r} failed certification against {cert['against']!r} "
        f"({cert['workloads_run']} workloads, level {cert['level']})"
    ]
    for e in cert["errors"][:MAX_VIOLATIONS_SHOWN]:
        where = "at start" if e["step"] is None else f"at step {e['step']}"
        lines.append(
            f"error in {e['workload']}: engine {e['engine']!r} {e['kind']} {where}: {e['cause']}\n    fix: {e['fix']}"
        )
    shown = [c for c in cert["counterexamples"] if c["crash"] or not cert.get("allow_divergence")]
    if shown:
        c = shown[0]
        lines.append(
            f"first counterexample: {c['workload']} diverges at step {c['step']} on {c['field']} "
            f"({len(cert['counterexamples'])} workloads diverged)"
        )
        if c.get("shrunk"):
            n = c["shrunk_size"]["requests"]
            lines.append(f"shrunk to {n} request{'s' * (n != 1)}, diverging at step {c['shrunk']['step']}:")
            lines += ["    " + ln for ln in markdown_table(c["shrunk"], cert["against"], "engine")]
        lines.append(f"replay: schedspec replay {c['file']}")
    violations = cert["invariant_violations"]
    if violations:
        lines.append(f"invariant violations ({len(violations)}):")
        lines += [f"    {v['workload']}: {v['violation']}" for v in violations[:MAX_VIOLATIONS_SHOWN]]
    nondet = cert["determinism"]["nondeterministic"]
    if nondet:
        lines.append(f"nondeterministic: {', '.join(n['workload'] for n in nondet)}")
    lines.append(f"certificate: {out_dir / 'certificate.md'}")
    return "\n".join(lines)


@pytest.fixture
def schedspec_certify(request: pytest.FixtureRequest, tmp_path: Path) -> Callable[..., dict[str, Any]]:
    """`schedspec_certify(engine, workloads=100, **options)` -> the certificate; fails the test unless it passed.

    Options are those of `schedspec certify`: against, level, families, seed,
    jobs, allow_divergence, vllm_source (with engine "vllm"), isolate,
    step_timeout, start_timeout, timelines (how many counterexamples get a
    PNG; default 1).
    """
    root = request.config.getoption("--schedspec-out")
    base = Path(root) / re.sub(r"[^\w.-]+", "_", request.node.nodeid) if root else tmp_path / "schedspec"

    def certify(
        engine: str | Callable[..., Any],
        workloads: int = 100,
        *,
        against: str = "reference",
        level: str = "blocks",
        families: list[str] | None = None,
        seed: int = 0,
        jobs: int = 1,
        allow_divergence: bool = False,
        vllm_source: str | None = None,
        timelines: int = 1,
        isolate: bool | None = None,
        step_timeout: float = 30.0,
        start_timeout: float = 300.0,
    ) -> dict[str, Any]:
        from .conformance.campaign import certify as cert_mod
        from .conformance.engines.engine_spec import parse_engine
        from .conformance.engines.registry import vllm_source_engine
        from .render.counterexample_timelines import write_timelines
        from .spec.errors import SpecError

        name, error = engine_name(engine), None
        spec = against_spec = None
        out = base
        n = 1
        while out.exists():  # a test may certify several engines
            n += 1
            out = base.with_name(f"{base.name}-{n}")
        try:
            spec, against_spec = parse_engine(name, "--engine"), parse_engine(against, "--against")
            if vllm_source is not None:
                if name != "vllm":
                    raise SpecError("vllm_source", vllm_source, f"needs engine 'vllm', not {name!r}")
                spec = vllm_source_engine(vllm_source)
            options = cert_mod.Options(
                jobs=jobs, isolate=isolate, step_timeout_s=step_timeout, start_timeout_s=start_timeout
            )
            cert, results = cert_mod.certify(
                spec, against_spec, level, families, workloads, seed, options=options, out_dir=str(out),
                allow_divergence=allow_divergence,
            )  # fmt: skip
            write_timelines(cert, timelines)
        except SpecError as e:  # failed outside the handler, so the report is one line, not a chain
            error = f"schedspec: error: {e}"
        if error:
            pytest.fail(error, pytrace=False)
        cert_mod.write_outputs(str(out), cert, results)
        if not cert["passed"]:
            pytest.fail(failure_message(cert, out), pytrace=False)
        return cert

    return certify
