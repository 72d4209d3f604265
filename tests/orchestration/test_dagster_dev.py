"""`dagster dev -w workspace.yaml` serves the code location: it loads (asked through GraphQL), a backfill
launched through it materializes a reference partition on CPU, and the server stops cleanly on SIGTERM."""

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from popcorn.bench import store

from .conftest import NEEDS_DAGSTER, REFERENCE_ONLY_CASE

pytest.importorskip("dagster", reason=NEEDS_DAGSTER)

ROOT = Path(__file__).resolve().parents[2]
START_S, BACKFILL_S, STOP_S = 240, 300, 90  # generous: a loaded 2-core machine starts Python slowly


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def graphql(port: int, query: str, variables: dict | None = None) -> dict:
    body = json.dumps({"query": query, "variables": variables or {}}).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{port}/graphql", body, {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as r:
        answer = json.loads(r.read())
    assert "errors" not in answer, answer
    return answer["data"]


def poll(what: str, seconds: float, check):
    """check() until it returns something truthy (retried on connection errors), else fail naming ``what``."""
    deadline, last = time.monotonic() + seconds, None
    while time.monotonic() < deadline:
        try:
            value = check()
            if value:
                return value
        except OSError as e:  # the server is not answering yet
            last = e
        time.sleep(1.0)
    pytest.fail(f"{what} within {seconds} s (last error: {last})")


def descendants(pid: int) -> set[int]:
    """Every live process under ``pid`` (from /proc)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    out, todo = set(), [pid]
    while todo:
        for c in children.get(todo.pop(), []):
            if c not in out:
                out.add(c)
                todo.append(c)
    return out


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie has exited
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_text().replace("\0", " ")[:200]
    except OSError:
        return "?"


def default_signals():
    # a test runner's background process may inherit SIGINT ignored; dagster maps SIGTERM onto it
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


LOCATION = """{ workspaceOrError { ... on Workspace { locationEntries { name loadStatus
  locationOrLoadError { __typename ... on PythonError { message } ... on RepositoryLocation {
  repositories { assetNodes { assetKey { path } } } } } } } } }"""
LAUNCH = """mutation($params: LaunchBackfillParams!) { launchPartitionBackfill(backfillParams: $params) {
  __typename ... on LaunchBackfillSuccess { backfillId } ... on PythonError { message } } }"""
STATUS = """query($id: String!) { partitionBackfillOrError(backfillId: $id) { ... on PartitionBackfill { status } } }"""


def test_dagster_dev_loads_the_location_runs_a_backfill_and_stops_cleanly(sweep_env):
    home = sweep_env / "home"
    home.mkdir()
    (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    port = free_port()
    exe = Path(sys.executable).with_name("dagster")
    log = open(sweep_env / "dagster-dev.log", "w")
    server = subprocess.Popen([str(exe), "dev", "-w", str(ROOT / "workspace.yaml"), "-h", "127.0.0.1", "-p", str(port)],
                              cwd=ROOT, env={**os.environ, "DAGSTER_HOME": str(home)}, stdout=log,
                              stderr=subprocess.STDOUT, start_new_session=True, preexec_fn=default_signals)
    family = set()
    try:
        poll("the webserver answering", START_S,
             lambda: urllib.request.urlopen(f"http://127.0.0.1:{port}/server_info", timeout=10).status == 200)

        def loaded():
            [entry] = graphql(port, LOCATION)["workspaceOrError"]["locationEntries"]
            location = entry["locationOrLoadError"]
            assert location is None or location["__typename"] != "PythonError", location["message"]
            return entry["loadStatus"] == "LOADED" and location

        location = poll("the code location loading", START_S, loaded)
        keys = {"/".join(a["assetKey"]["path"]) for r in location["repositories"] for a in r["assetNodes"]}
        assert {"case_plan", "reference", "measurements", "report_store", "published_report"} <= keys

        params = {"partitionsByAssets": [{"assetKey": {"path": ["reference"]}, "partitions": {
                      "ranges": [{"start": REFERENCE_ONLY_CASE, "end": REFERENCE_ONLY_CASE}]}}],
                  "tags": [{"key": "popcorn/limit", "value": "1"}, {"key": "popcorn/trials", "value": "1"}]}
        launched = graphql(port, LAUNCH, {"params": params})["launchPartitionBackfill"]
        assert launched["__typename"] == "LaunchBackfillSuccess", launched
        backfill = launched["backfillId"]

        def finished():
            status = graphql(port, STATUS, {"id": backfill})["partitionBackfillOrError"]["status"]
            return status if status not in ("REQUESTED", "CANCELING", "FAILING") else None

        assert poll("the backfill finishing", BACKFILL_S, finished) == "COMPLETED_SUCCESS"
        shard = home / "storage" / "popcorn-sweep" / "reference" / REFERENCE_ONLY_CASE
        rows = store.read("rms_norm", root=shard)
        assert [(r.impl, r.status) for r in rows] == [("torch", "pass")]
    finally:
        family = descendants(server.pid) | {server.pid}
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(STOP_S)
            deadline = time.monotonic() + STOP_S  # its code servers follow it out
            while any(alive(p) for p in family) and time.monotonic() < deadline:
                time.sleep(0.5)
        finally:
            log.close()
            leftover = [(p, cmdline(p)) for p in family if alive(p)]
            for p, _ in leftover:  # never leave processes behind, even when the assertion below fails
                os.kill(p, signal.SIGKILL)
    assert server.returncode is not None and not leftover, (
        f"processes left after SIGTERM: {leftover}\n" + (sweep_env / "dagster-dev.log").read_text()[-3000:])
    with socket.socket() as s:  # nothing listens on the port any more (closed connections may linger in TIME_WAIT)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", port))
        s.listen()
