"""The timeline picture shows every step, and these tests read its parts, not its pixels.

`plot.draw` draws each lane's parts of one kind as one artist tagged `gid="kind:request"`; `_parts` reads the
steps back from the artists' geometry (a bar's left edge, a line segment's ends, a mark's x). So a test can ask:
is there a bar for every grant of the run, a mark for every admission, preemption, resumption and finish, at
the step the trace says, and a legend entry for each kind drawn? `seed-preemption` is the picture of docs/commands.md:
four requests, two preemptions, 76 steps of which about 70 are 1-4 token decodes.
"""

from __future__ import annotations

import matplotlib
import matplotlib.collections
import matplotlib.lines

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402

from schedspec.conformance.workloads.builtin import BUILTIN  # noqa: E402
from schedspec.reference_impl import simulate  # noqa: E402
from schedspec.render.step_digest import views  # noqa: E402
from schedspec.render.timeline import DIVERGENCE, MARK_OFFSET, MAX_LANES, draw, lanes  # noqa: E402


def _parts(fig) -> set[str]:
    """Every "kind:step:request" the picture shows, read from its artists."""
    parts = set()
    for ax in fig.axes:
        for artist in [*ax.collections, *ax.lines]:
            if not artist.get_gid():
                continue
            kind, rid = artist.get_gid().rsplit(":", 1)
            if isinstance(artist, matplotlib.collections.LineCollection):  # runs of steps, from a - 0.5 to b + 0.5
                steps = [
                    s for seg in artist.get_segments() for s in range(round(seg[0][0] + 0.5), round(seg[1][0] + 0.5))
                ]
            elif isinstance(artist, matplotlib.lines.Line2D):  # marks, offset within their step's slot
                steps = [round(x - MARK_OFFSET[kind]) for x in artist.get_xdata()]
            else:  # bars, each from step - 0.43
                steps = [round(p.vertices[:, 0].min() + 0.43) for p in artist.get_paths()]
            parts |= {f"{kind}:{step}:{rid}" for step in steps}
    return parts


@pytest.fixture(scope="module")
def preemption():
    trace = simulate(BUILTIN["seed-preemption"]())
    fig = draw([(trace.workload, "reference", views(trace))])
    yield trace, fig
    plt.close(fig)


def test_every_grant_of_every_step_is_a_bar(preemption) -> None:
    trace, fig = preemption
    bars = {
        g.split(":", 1)[1]
        for g in _parts(fig)
        if g.split(":")[0] in ("decode", "prefill chunk (tokens)", "recompute after preemption")
    }
    grants = {f"{r.step}:{rid}" for r in trace.steps for rid in r.output.num_scheduled_tokens}
    assert bars == grants and len(grants) > 150


def test_the_events_are_marked_where_they_happen(preemption) -> None:
    _, fig = preemption
    parts = _parts(fig)
    assert {g for g in parts if g.startswith("preempted:")} == {"preempted:5:p3", "preempted:37:p2"}
    assert {g for g in parts if g.startswith("resumed:")} == {"resumed:40:p2", "resumed:40:p3"}
    assert {g for g in parts if g.startswith("admitted:")} == {f"admitted:0:p{i}" for i in range(4)}
    assert {g for g in parts if g.startswith("finished:")} == {
        "finished:39:p0",
        "finished:39:p1",
        "finished:42:p2",
        "finished:74:p3",
    }
    # p3 waits from its preemption to its resumption, a dotted lane segment per step
    assert {g for g in parts if g.startswith("waiting:") and g.endswith(":p3")} == {
        f"waiting:{s}:p3" for s in range(5, 40)
    }
    # the recomputed chunks of both resumed requests are told apart from first prefills
    assert {g for g in parts if g.startswith("recompute")} == {
        "recompute after preemption:40:p2",
        "recompute after preemption:40:p3",
    }


def test_the_legend_names_what_is_drawn_and_the_token_axis_shows_a_one_token_step(preemption) -> None:
    _, fig = preemption
    (legend,) = fig.legends
    assert [t.get_text() for t in legend.get_texts()] == [
        "prefill chunk (tokens)",
        "recompute after preemption",
        "decode",
        "waiting",
        "admitted",
        "resumed",
        "preempted",
        "finished",
    ]
    tokens = fig.axes[0]
    assert tokens.get_yscale() == "log" and tokens.get_ylim()[0] < 1  # a 1-token decode step is a visible bar


def test_a_replay_marks_the_diverging_step_in_magenta_in_every_axis_with_its_field() -> None:
    trace = simulate(BUILTIN["seed-preemption"]())
    panel = (trace.workload, "reference", views(trace))
    fig = draw([panel, panel], mark_step=37, mark_label="output.preempted_req_ids: p2 (a) vs - (b)")
    try:
        assert len(fig.axes) == 4
        for ax in fig.axes:
            bands = [p for p in ax.patches if matplotlib.colors.same_color(p.get_facecolor()[:3], DIVERGENCE)]
            assert len(bands) == 1 and bands[0].get_x() == 36.5
        notes = [t.get_text() for ax in fig.axes for t in ax.texts if t.get_text().startswith("diverges")]
        assert notes == ["diverges at step 37: output.preempted_req_ids: p2 (a) vs - (b)"] * 2
        assert "diverging step" in [t.get_text() for t in fig.legends[0].get_texts()]
        assert DIVERGENCE != "red"  # red is a preemption's colour
    finally:
        plt.close(fig)


def test_a_crowded_run_draws_the_requests_with_events_and_says_how_many_it_left_out() -> None:
    trace = simulate(BUILTIN["seed-long-prompt"]())
    panel = (trace.workload, "reference", views(trace))
    shown, left_out = lanes([panel])
    assert len(shown) == MAX_LANES and left_out == len(trace.workload.requests) - MAX_LANES
    assert "long" in shown  # the one request with chunks
