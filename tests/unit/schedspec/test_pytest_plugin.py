"""The pytest plugin, as another project uses it: an engine certified by a test of a few lines.

Each test writes a throwaway project with `pytester` and runs pytest on it
in process. The plugin is not named anywhere: it must arrive through the
`pytest11` entry point, the way it does for a project that installs
schedspec. The example test in `examples/toy_engine` is run verbatim, so the
example a reader copies is known to work.
"""

import re
from importlib.metadata import entry_points
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
# Loaded here, outside the in-process runs: pytester drops the modules a run imported, and numpy's
# C extension (under matplotlib, which draws the timelines) cannot be loaded twice in one process.
import matplotlib.pyplot  # noqa: E402,F401

pytest_plugins = ["pytester"]

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "toy_engine"


def test_plugin_is_registered_as_a_pytest11_entry_point():
    (ep,) = [e for e in entry_points(group="pytest11") if e.name == "schedspec"]
    assert ep.value == "schedspec.pytest_plugin"


def test_the_example_engine_passes_with_the_example_test(pytester):
    pytester.syspathinsert(EXAMPLE)
    pytester.makepyfile(test_toy_engine=(EXAMPLE / "test_toy_engine.py").read_text())
    result = pytester.runpytest()
    result.assert_outcomes(passed=1)


def test_a_diverging_engine_fails_with_its_counterexample_table(pytester):
    pytester.makepyfile("""
        def test_engine(schedspec_certify):
            schedspec_certify("schedspec.conformance.demo_engines.planted:extra_token_at_step_3", workloads=3, families=["budget"])
    """)
    result = pytester.runpytest()
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*failed certification against 'reference' (3 workloads, level blocks)",
            "first counterexample: budget-0-0 diverges at step 3 on output.num_scheduled_tokens*",
            "*| **3** ⟵ | **r1:1** | **r1:2** |*",
            "replay: schedspec replay *counterexample-budget-0-0.json",
            "invariant violations (1):",
            "*budget-conservation*",
        ]
    )


def test_the_failure_docs_engines_md_shows_is_what_its_test_prints(pytester):
    """docs/engines.md shows a failing test and what it prints: run the test it shows, expect every line it shows
    (a temporary path stands for whatever folder pytest picks)."""
    doc = (Path(__file__).resolve().parents[3] / "docs" / "engines.md").read_text()
    test, shown = re.search(r"```python\n(def test_engine.*?)```\n\nfails with.*?```\n(.*?)```", doc, re.S).groups()
    pytester.makepyfile(test)
    result = pytester.runpytest()
    result.assert_outcomes(failed=1)
    expected = [re.sub(r"/tmp/pytest-of-you/pytest-1/test_engine0", "*", line) for line in shown.splitlines()]
    result.stdout.fnmatch_lines([line.replace("[", "[[]") for line in expected], consecutive=True)


def test_allowed_divergence_passes_and_returns_the_departures(pytester):
    pytester.makepyfile(
        test_departs="""
        from schedspec.conformance.demo_engines.planted import perturbed

        reordered = perturbed("order", 1)  # the same grants in another order: no invariant cares

        def test_engine(schedspec_certify):
            cert = schedspec_certify("test_departs:reordered", workloads=2, families=["big-batch"],
                                     allow_divergence=True)
            assert cert["passed"] and cert["departures"] and not cert["invariant_violations"]
    """
    )
    pytester.runpytest().assert_outcomes(passed=1)


def test_bad_engine_is_a_one_line_failure_and_outputs_go_where_asked(pytester, tmp_path):
    pytester.makepyfile("""
        def test_bad(schedspec_certify):
            schedspec_certify("no_such_module:make", workloads=1)

        def test_good(schedspec_certify):
            schedspec_certify("reference", workloads=2)
    """)
    out = tmp_path / "artifacts"
    result = pytester.runpytest("--schedspec-out", str(out))
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["schedspec: error: --engine: *cannot import no_such_module*"])
    (cert,) = out.glob("*test_good*/certificate.json")
    assert (cert.parent / "junit.xml").is_file()


def test_a_mistyped_answer_fails_the_test_as_malformed_not_as_a_crash(pytester):
    """A token count `True` once passed certification; a string one crashed inside a monitor."""
    pytester.makepyfile("""
        def test_engine(schedspec_certify):
            schedspec_certify("schedspec.conformance.demo_engines.misbehaving:token_count_as_bool", workloads=2,
                              families=["budget"])
    """)
    result = pytester.runpytest()
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*malformed*True is of type bool*"])
    assert "Traceback" not in result.stdout.str().split("schedspec:")[-1]
