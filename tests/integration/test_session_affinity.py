"""``--session-header NAME``: every turn of a session carries the session's id in that header, one
stable value per session (routers pin a session to a replica by it), seen by a recording server."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

from tests.fixtures.cli_proc import cli_run
from tests.fixtures.recording_server import RecordingServer, ok_stream


def test_each_turn_carries_its_sessions_id_in_the_session_header(tmp_path: Path) -> None:
    out = tmp_path / "run"
    with RecordingServer(lambda n, req: ok_stream()) as srv:
        p = cli_run("run", "--endpoint", srv.url, "--api", "completions", "--sessions",
                    "synthetic,turns=3,input=20,output=3,delay=10ms", "--rate", "20", "--requests", "4",
                    "--session-header", "X-Session-ID", "--no-preflight", "--quiet", out=out)  # fmt: skip
        posts = [r for r in srv.requests if r["method"] == "POST"]
    assert p.returncode in (0, 1), p.stdout[-3000:] + p.stderr[-3000:]  # 1: INVALID (lag) on a busy machine
    recs = [json.loads(x) for x in (out / "requests.jsonl").read_text().splitlines()]
    assert len(recs) == 12 and len(posts) == 12 and all(r["status"] == "ok" for r in recs)
    by_index = {r["index"]: r for r in recs}
    turns: dict[str, list[int]] = defaultdict(list)
    for req in posts:
        value = req["headers"]["x-session-id"]  # on every turn
        rec = by_index[int(req["headers"]["x-request-id"].rsplit("-", 1)[1])]
        assert value == rec["session_id"]  # the session's own id, as in requests.jsonl
        turns[value].append(rec["turn"])
    # one stable value per session: 4 sessions, each value on exactly its session's 3 turns
    assert len(turns) == 4 and all(sorted(t) == [0, 1, 2] for t in turns.values()), dict(turns)


def test_session_header_needs_sessions_and_a_header_name(tmp_path: Path) -> None:
    p = cli_run("run", "--rate", "1", "--requests", "1", "--session-header", "X-Session-ID", out=tmp_path)
    assert p.returncode == 2 and "--session-header goes with --sessions" in p.stderr, p.stderr
    p = cli_run("run", "--sessions", "synthetic,turns=2", "--rate", "1", "--requests", "1", "--session-header",
                "X Session", out=tmp_path)  # fmt: skip
    assert p.returncode == 2 and "not an HTTP header name" in p.stderr, p.stderr
