"""Every id the project cites is defined in docs/glossary.md, and every vLLM citation resolves in vLLM 0.33.0.

The citations used to point into documents outside the repository and at
vLLM line numbers nobody checked; this keeps them honest. The scans must
find something (a pattern that silently matches nothing would pass
vacuously), and the last tests feed the checkers deliberate mistakes to
show each is refused. The vLLM half reads the reference venv's source with
`ast` and is skipped where that venv is missing (CI builds it).
"""

from __future__ import annotations

import pytest

from citations import (
    BARE_LINES,
    ID_RE,
    OLD_CITATION,
    VLLM_CITATION,
    Cited,
    citation_problem,
    glossary_ids,
    old_form_problem,
    problems,
    prose,
    scan,
    undefined_ids,
    vllm_root,
)

from schedspec.spec.invariants.decisions import MONITORED

ROOT = vllm_root()
needs_vllm = pytest.mark.skipif(
    ROOT is None,
    reason="no vLLM 0.33.0 venv to resolve citations against; build it with conformance/vllm_env/setup_vllm_ref.sh",
)


def _report(bad: list) -> str:
    return "\n".join(f"{c.file}:{c.line}: {getattr(c, 'text', '')} {why}" for c, why in bad)


def test_every_cited_id_is_defined():
    cited = scan(ID_RE)
    assert len(cited) >= 500, f"the id scan found only {len(cited)} citations: is the pattern broken?"
    missing = undefined_ids(cited, glossary_ids())
    assert not missing, "ids with no glossary entry:\n" + "\n".join(f"{c.file}:{c.line}: {c.text}" for c in missing)


def test_every_catalogue_tag_is_defined():
    """The catalogue's ids include bug-zoo tags (BUDGET, OWED, ...), which no id pattern could find; so do the
    decision invariants'."""
    tags = {t for inv in MONITORED for t in inv.ids}
    assert len(tags) >= 20
    assert not tags - glossary_ids(), f"catalogue ids with no glossary entry: {sorted(tags - glossary_ids())}"


def test_no_citation_in_the_old_forms():
    bad = problems(OLD_CITATION, old_form_problem) + problems(BARE_LINES, old_form_problem)
    assert not bad, "citations to convert (docs/glossary.md, How to cite):\n" + _report(bad)


@needs_vllm
def test_every_vllm_citation_resolves():
    cited = scan(VLLM_CITATION)
    assert len(cited) >= 200, f"the citation scan found only {len(cited)}: is the pattern broken?"
    bad = [(c, why) for c in cited if (why := citation_problem(c.text, ROOT)) is not None]
    assert not bad, "vLLM citations that do not resolve in 0.33.0:\n" + _report(bad)


# ---- The checkers refuse what they should -------------------------------------------------------

S = "vllm/v1/core/sched/scheduler.py"


@needs_vllm
@pytest.mark.parametrize(
    "text,why",
    [
        (f"{S}:Scheduler.schedule (1579)", None),
        (f"{S}:Scheduler.schedule (845, 1332-1333)", None),
        (f"{S}:Scheduler.update_from_output", None),
        ("vllm/v1/request.py:Request.num_tokens", None),  # a property: its span starts at the decorator
        ("vllm/config/scheduler.py:SchedulerConfig.max_num_scheduled_tokens", None),  # a class field
        (f"{S}:Scheduler.schedule (1799)", "outside"),  # the line is in _preempt_request, past schedule's end
        (f"{S}:Scheduler.schedule (690-700)", "outside"),  # starts before the def
        (f"{S}:Scheduler._preempt_request (1579)", "outside"),
        (f"{S}:Scheduler.schedulee", "no class, function"),
        ("vllm/v1/core/kv_cache_manager.py:KVCacheManager.cache_blocks (477-541)", "outside"),  # the drift it fixes
        ("vllm/v1/core/kv_cache_manager.py:SingleTypeKVCacheManager.cache_blocks", "no class, function"),  # wrong file
        ("vllm/v1/core/sched/schedular.py:Scheduler.schedule", "no file"),
        ("scheduler.py:Scheduler.schedule", "not of the form"),
    ],
)
def test_citation_checker_refuses_wrong_citations(text, why):
    problem = citation_problem(text, ROOT)
    assert (problem is None) if why is None else (why in (problem or "")), problem


@pytest.mark.parametrize(
    "text,refused",
    [
        ("scheduler.py:1579", True),  # vLLM's file, by line only
        ("vllm/v1/core/sched/scheduler.py:1579", True),
        (":1331", True),  # bare lines leaning on a file named earlier
        ("reference_impl/scheduler.py:62", False),  # the project's own file may be cited by line
    ],
)
def test_old_form_checker(text, refused):
    assert (old_form_problem(text) is not None) is refused


def test_the_patterns_find_what_they_should():
    line = (
        f"see {S}:Scheduler.schedule (839-857), I-14, §9.A.4, §3.1, T54c, T7-T11, D1, P1, exp1 and Z6 (:1331), x[:120]"
    )
    assert [m.group(0) for m in VLLM_CITATION.finditer(line)] == [f"{S}:Scheduler.schedule (839-857)"]
    assert [m.group(0) for m in ID_RE.finditer(line)] == [
        "I-14",
        "§9.A.4",
        "§3.1",
        "T54",
        "T7",
        "T11",
        "D1",
        "P1",
        "exp1",
        "Z6",
    ]
    assert [m.group(0) for m in BARE_LINES.finditer(line)] == [":1331"]


def test_only_comments_and_strings_are_scanned(tmp_path):
    """`T0 = ...` or `P1: list` in code would read as ids; only what a reader reads as prose may cite."""
    source = tmp_path / "m.py"
    source.write_text('T0 = 1  # see T41\nP1 = "D5"\n', encoding="utf-8")
    assert [m.group(0) for _, text in prose(source) for m in ID_RE.finditer(text)] == ["T41", "D5"]


def test_undefined_ids_are_reported():
    defined = glossary_ids()
    made_up = ["I-" + "99", "T" + "999", "Z" + "99", "§" + "42.7", "exp" + "9"]
    cited = [Cited("x.py", 1, i) for i in made_up] + [Cited("x.py", 2, "I-14")]
    assert [c.text for c in undefined_ids(cited, defined)] == made_up
    assert glossary_ids("- **Q1** a made-up entry.\n- **Q2** another.") == {"Q1", "Q2"}
