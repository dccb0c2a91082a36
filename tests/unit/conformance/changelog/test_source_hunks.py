"""`source_hunks`: the changed scheduler hunks of two vllm package folders, and which of them ran.

Each test builds two tiny package folders in tmp_path (release A and release B) that differ in one way,
so every assertion names the one hunk that difference must give, or the one it must not.
"""

import json
import textwrap

from schedspec.conformance.changelog.source_hunks import (
    ENTERED,
    NEVER_ENTERED,
    LineSets,
    changed_hunks,
    load_lines,
    reach,
    scheduler_files,
    unreached_json,
    unreached_markdown,
)

SCHEDULER = "v1/core/sched/scheduler.py"
A_SOURCE = textwrap.dedent(
    '''\
    """The scheduler."""
    import os


    class Scheduler:
        """Schedules."""

        def schedule(self, n):
            """Schedule n."""
            total = 0
            for i in range(n):
                total += i  # add
            return total

        def _preempt(self, r):
            if r:
                r.x = 1
            else:
                r.y = 2
            return r

        def connector_only(self, kv):
            kv.send(1)
            return kv
    '''
)


def line_of(source: str, text: str) -> int:
    """The 1-based line of the first line of `source` that contains `text`."""
    return next(i for i, line in enumerate(source.splitlines(), 1) if text in line)


def packages(tmp_path, b_source, extra_b=None):
    """Package folders A (A_SOURCE) and B (`b_source`), each with a request.py and a file outside the set."""
    roots = []
    for side, source, extra in (("a", A_SOURCE, {}), ("b", b_source, extra_b or {})):
        root = tmp_path / side / "vllm"
        files = {SCHEDULER: source, "v1/request.py": "class Request:\n    pass\n", "v1/engine/core.py": side, **extra}
        for rel, text in files.items():
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            (root / rel).write_text(text)
        roots.append(root)
    return roots


def test_the_scheduler_sources_are_core_and_request_only(tmp_path):
    a, _ = packages(tmp_path, A_SOURCE, {"v1/core/new/deep.py": "x = 1\n"})
    assert scheduler_files(a) == [SCHEDULER, "v1/request.py"]
    assert "v1/core/new/deep.py" in scheduler_files(tmp_path / "b" / "vllm")


def test_an_insertion_is_one_hunk_with_an_empty_a_range(tmp_path):
    b_source = A_SOURCE.replace("        total = 0\n", "        total = 0\n        total += 1\n")
    (h,) = changed_hunks(*packages(tmp_path, b_source))
    at = line_of(b_source, "total += 1")
    assert (h.file, h.b, h.a[0] == h.a[1], h.qualname) == (SCHEDULER, (at, at + 1), True, "Scheduler.schedule")
    assert h.first_line == "total += 1"


def test_a_deletion_is_one_hunk_with_an_empty_b_range(tmp_path):
    b_source = A_SOURCE.replace("        kv.send(1)\n", "")
    (h,) = changed_hunks(*packages(tmp_path, b_source))
    at = line_of(A_SOURCE, "kv.send(1)")
    assert (h.a, h.b[0] == h.b[1], h.qualname, h.first_line) == (
        (at, at + 1),
        True,
        "Scheduler.connector_only",
        "- kv.send(1)",
    )


def test_a_replacement_names_both_ranges_and_its_function(tmp_path):
    b_source = A_SOURCE.replace("r.x = 1", "r.x = 2")
    (h,) = changed_hunks(*packages(tmp_path, b_source))
    at = line_of(A_SOURCE, "r.x = 1")
    assert (h.a, h.b, h.qualname, h.first_line) == ((at, at + 1), (at, at + 1), "Scheduler._preempt", "r.x = 2")


def test_comments_docstrings_blank_lines_and_rewrapping_change_no_code(tmp_path):
    b_source = (
        A_SOURCE.replace("# add", "# plus one each time")
        .replace('"""Schedule n."""', '"""Schedule n requests,\n        or fewer."""')
        .replace("            return r\n", "\n            return r\n")
        .replace("kv.send(1)", "kv.send(\n                1\n            )")
    )
    assert b_source != A_SOURCE
    assert changed_hunks(*packages(tmp_path, b_source)) == []


def test_indenting_a_statement_into_a_block_is_code(tmp_path):
    # Only the indentation of one line changes; its tokens apart from INDENT/DEDENT are the same.
    b_source = A_SOURCE.replace(
        "            total += i  # add\n        return total", "            total += i  # add\n            return total"
    )
    (h,) = changed_hunks(*packages(tmp_path, b_source))
    assert h.qualname == "Scheduler.schedule" and h.first_line == "return total"


def test_a_file_only_in_b_is_one_whole_file_hunk(tmp_path):
    new = "# header\nimport os\n\n\ndef plan():\n    return 1\n"
    (h,) = changed_hunks(*packages(tmp_path, A_SOURCE, {"v1/core/kv_cache_planning.py": new}))
    assert (h.file, h.a, h.b, h.qualname, h.first_line) == (
        "v1/core/kv_cache_planning.py",
        (1, 1),
        (1, 7),
        "<module>",
        "import os",
    )


def sets(executed, source=A_SOURCE, file=SCHEDULER):
    return {file: LineSets(frozenset(line_of(source, t) for t in executed), frozenset())}


def test_reach_tells_reached_from_entered_from_never_entered(tmp_path):
    b_source = (
        A_SOURCE.replace("total = 0", "total = 1").replace("r.y = 2", "r.y = 3").replace("kv.send(1)", "kv.send(2)")
    )
    hunks = changed_hunks(*packages(tmp_path, b_source))
    assert [h.qualname for h in hunks] == ["Scheduler.schedule", "Scheduler._preempt", "Scheduler.connector_only"]
    # Both sides ran schedule() and took the `if r:` branch of _preempt; nothing called connector_only.
    ran = ["def schedule", "total = 1", "total = 0", "if r:", "r.x = 1", "def connector_only"]
    got = reach(hunks, sets([t for t in ran if t != "total = 1"]), sets([t for t in ran if t != "total = 0"], b_source))
    assert [r.status for r in got] == ["reached", ENTERED, NEVER_ENTERED]
    assert got[0].on_a and got[0].on_b
    # Only B's run reaching B's lines still counts; a run of neither side reaches nothing.
    assert reach(hunks[:1], {}, sets(["total = 1"], b_source))[0].reached
    assert not reach(hunks[:1], {}, {})[0].reached


def test_a_signature_change_is_reached_by_a_call_not_by_the_import(tmp_path):
    b_source = A_SOURCE.replace("def connector_only(self, kv):", "def connector_only(self, kv, n=0):")
    (h,) = changed_hunks(*packages(tmp_path, b_source))
    assert not reach([h], {}, sets(["def connector_only"], b_source))[0].reached  # the def line runs at import
    assert reach([h], {}, sets(["kv.send(1)"], b_source))[0].reached


def test_a_deletion_is_judged_on_a_and_its_neighbours_count_only_for_syntax(tmp_path):
    deleted = A_SOURCE.replace("            r.y = 2\n", "            pass\n")  # a statement that A never ran
    hunks = changed_hunks(*packages(tmp_path / "1", deleted))
    assert not reach(hunks, sets(["if r:", "r.x = 1", "return r"]), sets(["if r:", "r.x = 1"], deleted))[0].reached
    assert reach(hunks, sets(["r.y = 2"]), {})[0].reached
    # Dropping `else:` (the body keeps its indentation) deletes no statement: the neighbours on A decide.
    no_else = A_SOURCE.replace("        else:\n            r.y = 2", "            r.y = 2")
    (h,) = changed_hunks(*packages(tmp_path / "2", no_else))
    assert h.b[0] == h.b[1] and h.first_line == "- else:"
    assert reach([h], sets(["r.x = 1"]), {})[0].reached
    assert not reach([h], sets(["def schedule"]), {})[0].reached


def test_load_lines_merges_the_drivers_files_per_version(tmp_path):
    for pid, executed in ((1, [3, 5]), (2, [5, 8])):
        doc = {
            "vllm_version": "0.33.0",
            "vllm_root": "/x/vllm",
            "files": {SCHEDULER: {"executed": executed, "statements": [3, 5, 8, 9]}},
        }
        (tmp_path / f"lines-0.33.0-{pid}.json").write_text(json.dumps(doc))
    (tmp_path / ".lines-x.tmp").write_text("{half a fi")  # a save in progress is not read
    lines = load_lines(tmp_path)
    assert lines == {"0.33.0": {SCHEDULER: LineSets(frozenset({3, 5, 8}), frozenset({3, 5, 8, 9}))}}
    assert set(load_lines(tmp_path, by="vllm_root")) == {"/x/vllm"}


def test_the_report_lists_only_unreached_hunks_by_file(tmp_path):
    b_source = A_SOURCE.replace("total = 0", "total = 1").replace("r.y = 2", "r.y = 3")
    got = reach(changed_hunks(*packages(tmp_path, b_source)), {}, sets(["total = 1", "if r:"], b_source))
    data = unreached_json(got)
    assert (data["hunks"], data["reached"], data["entered_not_reached"], data["never_entered"]) == (2, 1, 1, 0)
    (entry,) = data["unreached"][SCHEDULER]
    assert entry["qualname"] == "Scheduler._preempt" and entry["why"] == ENTERED
    json.dumps(data)
    md = unreached_markdown(got)
    at = line_of(b_source, "r.y = 3")
    assert md[0] == "1 of 2 changed scheduler hunks were reached."
    assert md[-1] == f"- `{SCHEDULER}:{at}-{at}` `Scheduler._preempt` ({ENTERED}): `r.y = 3`"


def test_a_block_of_deleted_functions_is_one_hunk_per_function(tmp_path):
    b_source = A_SOURCE[: A_SOURCE.index("    def _preempt")]
    hunks = changed_hunks(*packages(tmp_path, b_source))
    assert [(h.qualname, h.first_line) for h in hunks] == [
        ("Scheduler._preempt", "- def _preempt(self, r):"),
        ("Scheduler.connector_only", "- def connector_only(self, kv):"),
    ]
    assert all(h.b == hunks[0].b and h.b[0] == h.b[1] for h in hunks)
