"""Planting: every mutant fits its target exactly once, and formatting can never move one.

The snippets are matched against `ast.unparse`'s print of the target, so
the property that matters is that two formattings of the same code give the
same canonical source and the same mutant. The reformatting here is the
kind `ruff format` does (line breaks inside brackets, trailing commas,
quotes, comments), done by hand on small functions.
"""

import ast
import textwrap

import pytest

from schedspec.mutants import MUTANTS, Mutant, MutantDrift, applied, canonical_source, mutated_source, resolve, rewrite

COMPACT = """
def grant(owed, budget, threshold):
    n = min(owed, budget)
    if 0 < threshold < n:  # the long-prefill clamp
        n = threshold
    for _ in range(2):
        if n > budget:
            break
    return n
"""
SPREAD = """
def grant(
    owed,
    budget,
    threshold,
):
    # owed tokens, clamped twice
    n = min(
        owed,
        budget,
    )
    if (0 < threshold < n):
        n = threshold
    for _ in range(2):
        if (n
                > budget):
            break  # never, with this clamp
    return n
"""


def canonical(text: str) -> str:
    return ast.unparse(ast.parse(textwrap.dedent(text)))


def mutant(find: str, replace: str) -> Mutant:
    return Mutant("m", "classic", "test", "x:grant", find, replace, ())


def test_two_formattings_have_one_canonical_source_and_one_mutant():
    assert canonical(COMPACT) == canonical(SPREAD)
    m = mutant("if n > budget:\n    break", "if n >= budget:\n    break")
    assert rewrite(canonical(COMPACT), m) == rewrite(canonical(SPREAD), m)
    assert "if n >= budget:" in rewrite(canonical(SPREAD), m)


def test_a_block_snippet_is_placed_at_the_depth_it_is_found():
    m = mutant("if n > budget:\n    break", "if n > budget:\n    n = budget\n    break")
    mutated = rewrite(canonical(COMPACT), m)
    ast.parse(mutated)  # the inserted lines sit inside the loop, not at column 0
    assert "        if n > budget:\n            n = budget\n            break" in mutated


@pytest.mark.parametrize("find, times", [("n = max(owed, budget)", 0), ("owed", 2)])
def test_a_snippet_that_does_not_occur_exactly_once_is_drift_naming_the_mutant(find, times):
    with pytest.raises(MutantDrift, match=rf"mutant m: .* occurs {times} times"):
        rewrite(canonical(COMPACT), mutant(find, "pass"))


def test_a_continuation_line_must_keep_its_relative_depth():
    # "break" one level too shallow is a different block, not the same code.
    with pytest.raises(MutantDrift):
        rewrite(canonical(COMPACT), mutant("if n > budget:\nbreak", "pass"))


@pytest.mark.parametrize("m", MUTANTS, ids=lambda m: m.name)
def test_every_mutant_plants_and_changes_its_target(m):
    original = canonical_source(resolve(m.target)[3])
    assert ast.dump(ast.parse(mutated_source(m))) != ast.dump(ast.parse(original))
    module, owner, attr, function = resolve(m.target)
    with applied(m):
        assert getattr(owner, attr) is not function
    assert getattr(owner, attr) is function  # restored


def test_a_crash_in_a_mutant_points_at_the_rules_file_and_line():
    import inspect
    import traceback

    from schedspec.reference_impl import rules as reference_rules
    from schedspec.spec import rules

    m = Mutant(
        "m",
        "classic",
        "test",
        "spec.rules:waiting_pass_allowed",
        "return num_preempted == 0",
        "raise RuntimeError('planted')",
        (),
    )
    lines, first = inspect.getsourcelines(rules.waiting_pass_allowed)
    line = first + next(i for i, text in enumerate(lines) if "return num_preempted == 0" in text)
    with applied(m), pytest.raises(RuntimeError) as info:
        reference_rules.waiting_pass_allowed(0)  # the reference's handle on the rule is rebound too
    frame = traceback.extract_tb(info.value.__traceback__)[-1]
    assert (frame.filename, frame.lineno) == (inspect.getsourcefile(rules), line)
    assert frame.line.strip() == "return num_preempted == 0"  # the file's text: the mutant replaced this line


@pytest.mark.parametrize("m", MUTANTS, ids=lambda m: m.name)
def test_a_mutated_function_starts_where_the_original_does(m):
    function = resolve(m.target)[3]
    with applied(m):
        mutated = resolve(m.target)[3]
        assert mutated.__code__.co_filename == function.__code__.co_filename
        assert mutated.__code__.co_firstlineno == function.__code__.co_firstlineno
