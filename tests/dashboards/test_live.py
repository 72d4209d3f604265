"""Following a live fill: the SSE client against popcorn's own live server, and the pages that show it."""

import time

import pytest

from dashboards import live_client
from dashboards.live_state import Follow

from . import report
from .browser import free_port
from .live_servers import live_fill, not_popcorn
from .test_pages import messages, names, titled


def measured(n: int = 3) -> list:
    """Rows a fill of rms_norm measures: compile on the bf16 curve's first points."""
    return [report.record("rms_norm", "compile", p, time_ms=0.001, ref_ms=0.01)
            for p in report.planned("rms_norm", report.BF16_CURVE, n)]


def test_parse_server_sent_events():
    lines = [": keepalive", "", "event: record", "id: 7", 'data: {"op":', 'data: "x"}', "", "event: progress",
             "data: not json", "", "event: complete", "data: {}"]
    events, whole = live_client.parse(lines)
    assert [(e.type, e.id) for e in events] == [("record", "7"), ("progress", None)]
    assert events[0].data == {"op": "x"} and events[1].data == "not json"
    assert not whole  # the last event had no closing blank line yet
    wrapped = live_client.Event("record", {"record": {"op": "x"}}, "1")
    assert live_client.record_of(wrapped) == {"op": "x"}


def test_read_events_returns_within_its_budget_and_resumes():
    rows = measured()
    with live_fill(rows, planned=10) as port:
        assert live_client.status(port)["state"] == "running"
        t = time.monotonic()
        batch = live_client.read_events(port, budget=0.5, timeout=0.2)
        assert time.monotonic() - t < 2.0  # the fill keeps the stream open; the client does not wait for it
        assert [row["case_id"] for _, row in batch.records()] == [r.case_id for r in rows]
        assert batch.last_id == "3" and not batch.complete
        again = live_client.read_events(port, last_id=batch.last_id, budget=0.3, timeout=0.2)
        assert again.records() == []


def test_status_of_a_closed_port_is_none_at_once():
    t = time.monotonic()
    assert live_client.status(free_port()) is None
    assert time.monotonic() - t < 0.5


def test_something_else_on_the_port_is_named():
    with not_popcorn() as port, pytest.raises(live_client.NotPopcorn):
        live_client.status(port)


def test_follow_keeps_one_session_and_drops_repeats():
    rows = measured()
    with live_fill(rows, running=False) as port:
        f = Follow(port=port).poll(port)
        assert f.status["state"] == "complete" and len(f.rows) == 3
        f.poll(port)  # the server replays after Last-Event-ID only: nothing twice
        assert len(f.rows) == 3
    with live_fill(rows[:1], running=False) as port2:
        f.poll(port2)  # another port, another fill: its rows only
        assert len(f.rows) == 1


def test_live_page_shows_status_progress_records_and_stars(app):
    with live_fill(measured(), planned=10) as port:
        at = app.run()
        at.switch_page("views/live.py").run()
        at.text_input(key="live_port_input").input(str(port)).run()
        assert not at.exception
        assert "running" in messages(at) and "rms_norm" in messages(at)
        assert at.get("progress")[0].proto.value == 30  # 3 of 10 pairs
        assert {m.label: m.value for m in at.metric}["measured"] == "3"
        assert len(at.dataframe[0].value) == 3
        fig = titled(at, "rms_norm")
        assert "live · compile" in names(fig) and {"torch", "compile"} <= names(fig)


def test_live_page_names_a_port_taken_by_something_else(app):
    with not_popcorn() as port:
        at = app.run()
        at.switch_page("views/live.py").run()
        at.text_input(key="live_port_input").input(str(port)).run()
        assert not at.exception and "Is another program using port" in messages(at)


def test_kernel_page_follows_the_remembered_port(app):
    with live_fill(measured(), planned=10) as port:
        at = app
        at.query_params["op"] = "rms_norm"
        at.query_params["port"] = str(port)
        at.run()
        at.switch_page("views/kernel.py").run()
        assert not at.exception
        assert f"on port {port}: 3/10" in "\n".join(str(s.value) for s in at.sidebar.success)
        assert "live · compile" in names(titled(at, "latency"))
