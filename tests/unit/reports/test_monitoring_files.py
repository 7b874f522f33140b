"""The shipped monitoring kit (monitoring/) against the exposition: every series the rules
and the dashboard name is one `pglock metrics` exports, so a rename breaks the build,
not the alerts."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from pglock.reports import jobs, metrics

from ..jobfactory import NOW

KIT = Path(__file__).resolve().parents[3] / "monitoring"
SERIES = re.compile(r"\bpglock_[a-z0-9_]+")


def exported() -> set[str]:
    """The series names of the exposition, read from its TYPE lines (every family is
    declared even without jobs); a histogram's are its _bucket, _sum and _count."""
    names = set()
    for line in metrics.render(jobs.Snapshot(NOW, [])).splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split()
            suffixes = ("_bucket", "_sum", "_count") if kind == "histogram" else ("",)
            names.update(name + suffix for suffix in suffixes)
    return names


def rule_expressions() -> list[str]:
    rules = yaml.safe_load((KIT / "pglock.rules.yml").read_text())
    return [rule["expr"] for group in rules["groups"] for rule in group["rules"]]


def dashboard_expressions() -> list[str]:
    found: list[str] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                if key in ("expr", "query", "definition") and isinstance(value, str):
                    found.append(value)
                walk(value)
        elif isinstance(node, list):
            for item in node:
                walk(item)

    walk(json.loads((KIT / "pglock.dashboard.json").read_text()))
    return found


@pytest.mark.parametrize("where", ["rules", "dashboard"])
def test_every_series_named_is_exported(where: str) -> None:
    expressions = rule_expressions() if where == "rules" else dashboard_expressions()
    named = {name for expr in expressions for name in SERIES.findall(expr)}
    assert len(named) >= 8
    assert named - exported() == set()


def test_every_rule_says_how_bad_and_what_to_run() -> None:
    rules = yaml.safe_load((KIT / "pglock.rules.yml").read_text())
    alerts = [rule for group in rules["groups"] for rule in group["rules"]]
    assert {rule["alert"] for rule in alerts} == {
        "PglockJobFailed", "PglockJobDead", "PglockJobOverdue", "PglockJobStale",
        "PglockJobSlow", "PglockJobPausedLong", "PglockJobDurationRegression",
        "PglockHostSilent", "PglockVersionSkew", "PglockMetricsStale", "PglockMetricsAbsent"}
    for rule in alerts:
        assert rule["labels"]["severity"] in ("warning", "critical"), rule["alert"]
        assert rule["annotations"]["summary"], rule["alert"]
        assert "`pglock " in rule["annotations"]["description"], rule["alert"]
        if rule["alert"].startswith("PglockJob"):
            assert "--job {{ $labels.job }}" in rule["annotations"]["description"]


def test_the_dashboard_asks_for_its_data_source() -> None:
    board = json.loads((KIT / "pglock.dashboard.json").read_text())
    variables = {v["name"]: v for v in board["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    panels = [p for p in board["panels"] if p["type"] != "row"]
    assert all(p["datasource"]["uid"] == "${datasource}" for p in panels)
    assert all(t["datasource"]["uid"] == "${datasource}" for p in panels for t in p["targets"])
    ids = [p["id"] for p in board["panels"]]
    assert len(ids) == len(set(ids))
