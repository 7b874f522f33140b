"""Every page and its JSON, in process, over a seeded fleet on the real server: what a
person reads, the status --json fields, hostile names as text, failures as one line."""

from __future__ import annotations

import json
import logging
import re

import pytest
from conftest import Env
from starlette.testclient import TestClient

from pglock.serve.site import CSP
from serve.conftest import client
from serve.fleet import BULK, RTL, SCRIPT, SILENT_HOST

PAGES = ["/", "/?all=1", "/job?name=nightly-backup", "/timeline", "/timeline?range=7d",
         "/timeline?range=1h&job=nightly-backup", "/calendar", "/calendar?days=90",
         "/calendar?job=nightly-backup", "/audit", "/audit?job=paused-job", "/run?id=2",
         "/hosts"]
APIS = ["/api/fleet", "/api/job?name=nightly-backup", "/api/timeline?range=7d",
        "/api/calendar?job=nightly-backup&days=90", "/api/audit", "/api/run?id=2",
        "/api/hosts"]


@pytest.mark.parametrize("path", PAGES + APIS)
def test_every_page_answers_with_the_strict_headers(web: TestClient, path: str) -> None:
    response = web.get(path)
    assert response.status_code == 200, response.text
    assert response.headers["content-security-policy"] == CSP
    assert response.headers["x-frame-options"] == "DENY"
    assert response.headers["x-content-type-options"] == "nosniff"
    # Nothing from elsewhere: no CDN, no inline script or style.
    assert not re.search(r"(src|href)=\"(https?:)?//", response.text)
    if path.startswith("/api/"):
        # Names as they are (a JSON string), never taken for HTML (nosniff).
        assert response.headers["content-type"] == "application/json"
    else:
        assert "<script>" not in response.text and "style=" not in response.text


def test_the_fleet_lists_the_jobs_in_trouble_worst_first_and_counts_the_idle(
        web: TestClient) -> None:
    page = web.get("/").text
    order = [page.index(f">{name}<") for name in
             ("dead-job", "stale-job", "overdue-job", "cleared-job", "running-job",
              "paused-job", "held-job")]
    assert order == sorted(order)
    for state in ("dead", "stale", "failed", "overdue", "cleared", "running", "paused",
                  "held", "idle"):
        assert f'class="pill s-{state}"' in page
    assert "bulk-007" not in page and "idle jobs are not listed" in page
    assert "bulk-007" in web.get("/?all=1").text
    # Success over 24 h and 7 d: the failed hostile job's 0%.
    assert re.search(r"failed</span>.*?0%</td>", page, re.S)


def test_the_fleet_json_is_status_json(web: TestClient, fleet: Env) -> None:
    mine = web.get("/api/fleet").json()
    done = fleet.run("status", "--json")
    theirs = json.loads(done.stdout)
    assert set(mine) == set(theirs)
    assert [job["job"] for job in mine["jobs"]] == [job["job"] for job in theirs["jobs"]]
    assert len(mine["jobs"]) == BULK + 11
    for a, b in zip(mine["jobs"], theirs["jobs"], strict=True):
        assert set(a) == set(b)
        assert (a["state"], a["last_run"], a["paused"], a["dead"]) == (
            b["state"], b["last_run"], b["paused"], b["dead"])


def test_hostile_names_and_texts_are_shown_as_text(web: TestClient) -> None:
    for path in ("/", "/?all=1", "/audit", "/timeline?range=1h", "/hosts",
                 "/job?name=nightly-backup"):
        page = web.get(path).text
        assert SCRIPT not in page
        assert "\u202e" not in page
    page = web.get("/").text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "<bdi>\\u202eevil-rtl\\u202c.sh</bdi>" in page
    job = web.get("/job", params={"name": SCRIPT})
    assert job.status_code == 200 and SCRIPT not in job.text
    run_id = job.text.split('href="/run?id=')[1].split('"')[0]
    output = web.get(f"/run?id={run_id}").text
    assert "&lt;b&gt;bold&lt;/b&gt; &amp; &lt;img src=x&gt;" in output
    assert "<b>bold" not in output and "<img" not in output
    rtl = web.get("/job", params={"name": RTL})
    assert rtl.status_code == 200 and "\u202e" not in rtl.text
    assert web.get("/api/job", params={"name": SCRIPT}).json()["jobs"][0]["job"] == SCRIPT


def test_the_job_page_charts_durations_with_percentiles_and_retries(web: TestClient) -> None:
    page = web.get("/job?name=nightly-backup&runs=60").text
    chart = page.split('<svg class="chart durations"')[1].split("</svg>")[0]
    assert chart.count('<rect class="run') == 60
    assert 'class="run o-failed"' in chart and 'class="run o-timed_out"' in chart
    assert '<line class="p50"' in chart and '<line class="p95"' in chart
    assert '<circle class="retry"' in chart
    assert page.count("<time>") == 5  # the next slots of its schedule
    assert page.count('href="/run?id=') == 60
    document = web.get("/api/job?name=nightly-backup&runs=60").json()
    assert len(document["runs"]) == 60 and len(document["next_slots"]) == 5
    assert document["summary"]["p50"] < document["summary"]["p95"]
    assert document["jobs"][0]["schedule"]["expression"] == "0 */8 * * *"


def test_the_job_page_says_who_paused_why_and_shows_its_audit_rows(web: TestClient) -> None:
    page = web.get("/job?name=paused-job").text
    assert "paused by" in page and "&lt;i&gt;maintenance&lt;/i&gt;" in page
    audit = page.split("<h2>Audit</h2>")[1]
    assert ">pause<" in audit
    dead = web.get("/job?name=dead-job").text
    assert "dead: slot" in dead and "disk full &lt;oops&gt;" in dead


def test_the_timeline_has_a_lane_per_job_and_zooms_by_range(web: TestClient) -> None:
    week = web.get("/api/timeline?range=7d").json()
    assert "nightly-backup" in week["lanes"]
    assert all(run["job"] in week["lanes"] for run in week["runs"])
    hour = web.get("/api/timeline?range=1h").json()
    assert len(hour["runs"]) < len(week["runs"])
    chosen = web.get("/api/timeline", params={"range": "7d", "job": "nightly-backup"}).json()
    assert chosen["lanes"] == ["nightly-backup"]
    page = web.get("/timeline?range=7d").text
    assert page.count('<rect class="lane"') == len(week["lanes"])
    assert "earlier</a>" in page


def test_the_calendar_colours_days_by_outcome(web: TestClient) -> None:
    days = web.get("/api/calendar?job=nightly-backup&days=90").json()["days"]
    assert len(days) == 90
    looks = {day["look"] for day in days}
    assert {"succeeded", "failed", "none"} <= looks
    fleet = web.get("/api/calendar").json()["days"]
    assert len(fleet) == 30 and sum(sum(d["outcomes"].values()) for d in fleet) > 100
    page = web.get("/calendar?days=90").text
    assert page.count('<rect class="day') == 90


def test_the_audit_log_lists_the_actions(web: TestClient) -> None:
    actions = web.get("/api/audit").json()["actions"]
    assert [a["action"] for a in actions] == ["pause"]
    assert actions[0]["reason"] == "<i>maintenance</i>"


@pytest.mark.parametrize(("path", "status", "line"), [
    ("/job?name=nope", 404, "no job named &#39;nope&#39; has run here"),
    ("/job", 400, "name the job"),
    ("/job?name=a%01b", 400, "contains a control character"),
    ("/timeline?range=forever", 400, "range"),
    ("/timeline?range=1s", 400, "is not within 1m..31d"),
    ("/timeline?end=0001-01-01T00:00%2B14:00", 400,
     "end: 0001-01-01T00:00+14:00 is more than 36500d in the past"),
    ("/calendar?days=3", 400, "days: 3 is not within 7..366"),
    ("/run?id=x", 400, "id: &#39;x&#39; is not a whole number"),
    ("/run?id=999999", 404, "no run 999999"),
])
def test_bad_requests_get_one_line(web: TestClient, path: str, status: int, line: str) -> None:
    response = web.get(path)
    assert response.status_code == status
    assert line in response.text and "Traceback" not in response.text


def test_a_database_error_is_one_line_on_the_page_and_in_the_log_without_the_password(
        fleet: Env, caplog: pytest.LogCaptureFixture) -> None:
    down = client(fleet, conninfo="host=127.0.0.1 port=1 user=x password=sekrit dbname=x")
    with caplog.at_level(logging.WARNING, logger="pglock.serve"):
        page = down.get("/")
        api = down.get("/api/fleet")
    assert page.status_code == 503 and api.status_code == 503
    assert 'role="alert"' in page.text and "sekrit" not in page.text
    assert "sekrit" not in api.text and list(api.json()) == ["error"]
    assert caplog.records and all("sekrit" not in r.getMessage() for r in caplog.records)
    assert all(r.exc_info is None for r in caplog.records)
    assert "Traceback" not in page.text + caplog.text


def test_an_unknown_path_is_a_404_with_the_strict_headers(web: TestClient) -> None:
    response = web.get("/nothing-here")
    assert response.status_code == 404
    assert response.headers["content-security-policy"] == CSP


def test_one_run_is_one_run_on_the_job_page(env: Env) -> None:
    assert env.run("run", "--job", "once", "--min-hold", "0", "--", "true").returncode == 0
    page = client(env).get("/job", params={"name": "once"}).text
    assert "1 run shown" in page and "1 runs" not in page


def test_the_hosts_page_shows_the_census_and_its_json_is_hosts_json(
        web: TestClient, fleet: Env) -> None:
    """Each host, its version (an older one marked), its jobs and when it last attempted
    each, the silent one first and marked; the JSON is `pglock hosts --json`."""
    page = web.get("/hosts").text
    shown = "&lt;b&gt;gone&lt;/b&gt;\\u202e"
    assert SILENT_HOST not in page and shown in page
    assert page.index(shown) < page.index(">web-1<") < page.index(">web-2<")
    assert 'class="pill h-silent">silent' in page and "older</span>" in page
    assert "pglock <bdi>0.0.9</bdi> on 1" in page
    mine = web.get("/api/hosts").json()
    done = fleet.run("hosts", "--json")
    assert (done.returncode, done.stderr) == (0, ""), done
    theirs = json.loads(done.stdout)
    del mine["now"], theirs["now"]
    assert mine == {**theirs, "database": mine["database"]}
    by_name = {host["host"]: host for host in mine["hosts"]}
    assert by_name[SILENT_HOST]["silent_jobs"] == ["nightly-backup"]
    assert by_name["old-host"]["skewed"] and not by_name["web-1"]["skewed"]
    assert {job["job"] for job in by_name["web-1"]["jobs"]} == {"nightly-backup", "tidy-tmp"}


def test_a_job_page_lists_its_hosts(web: TestClient) -> None:
    page = web.get("/job", params={"name": "nightly-backup"}).text
    assert "hosts of nightly-backup: 2 hosts fire it (old-host, web-1); silent: " in page
    assert page.count('<tr class="a-') == 3 and "(every job)" in page
    document = web.get("/api/job", params={"name": "nightly-backup"}).json()
    assert document["jobs"][0]["hosts"]["attending"] == ["old-host", "web-1"]
    assert [h["host"] for h in document["jobs"][0]["hosts"]["silent"]] == [SILENT_HOST]
