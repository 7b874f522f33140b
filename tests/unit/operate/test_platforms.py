"""doctor's naming of the platform and the pooler (pglock/operate/platforms.py) from the
values each vendor documents, and the ttl held against its failover time (issue 38)."""

from __future__ import annotations

from pathlib import Path

import pytest

from pglock.lock import heartbeat
from pglock.operate import doctor, platforms
from pglock.operate.doctor import Level, Purpose
from pglock.operate.platforms import Reported


def reported(settings: tuple[str, ...] = (), roles: tuple[str, ...] = (),
             aurora: str | None = None) -> Reported:
    return Reported(aurora, frozenset(settings), frozenset(roles))


# What each platform's server reports, as its vendor documents it.
PLATFORMS = [
    # Aurora: aurora_version() (Aurora's user guide); it has RDS's roles and settings too.
    pytest.param(reported(("rds.force_ssl", "rds.extensions"), ("rds_superuser", "rdsadmin"),
                          aurora="16.4.2"),
                 platforms.AURORA, "aurora_version() = 16.4.2", id="aurora"),
    # RDS: the rds_superuser role and rds.* parameters (rds.force_ssl, rds.logical_replication).
    pytest.param(reported(("rds.force_ssl", "rds.logical_replication"), ("rds_superuser",)),
                 platforms.RDS, "the rds_superuser role and rds.* settings", id="rds"),
    pytest.param(reported(("rds.force_ssl",)), platforms.RDS, "rds.* settings",
                 id="rds-settings-only"),
    # Cloud SQL: cloudsqlsuperuser, cloudsql.* flags (cloudsql.iam_authentication).
    pytest.param(reported(("cloudsql.iam_authentication", "cloudsql.enable_pgaudit"),
                          ("cloudsqlsuperuser",)),
                 platforms.CLOUD_SQL, "the cloudsqlsuperuser role and cloudsql.* settings",
                 id="cloud-sql"),
    # Azure flexible server: azure_pg_admin, azure.extensions, azure.accepted_password_auth_method.
    pytest.param(reported(("azure.extensions", "azure.accepted_password_auth_method"),
                          ("azure_pg_admin", "azuresu")),
                 platforms.AZURE,
                 "the azure_pg_admin role and the azuresu role and azure.* settings",
                 id="azure"),
    # Neon: neon_superuser, neon.* settings (neon.timeline_id, neon.tenant_id).
    pytest.param(reported(("neon.tenant_id", "neon.timeline_id"), ("neon_superuser",)),
                 platforms.NEON, "the neon_superuser role and neon.* settings", id="neon"),
    # Supabase: supabase_admin, supautils.* (supautils.reserved_roles).
    pytest.param(reported(("supautils.reserved_roles",), ("supabase_admin",)),
                 platforms.SUPABASE, "the supabase_admin role and supautils.* settings",
                 id="supabase"),
    # CloudNativePG creates streaming_replica; Crunchy's PGO _crunchyrepl.
    pytest.param(reported((), ("streaming_replica",)), platforms.CLOUDNATIVEPG,
                 "the streaming_replica role", id="cloudnativepg"),
    pytest.param(reported((), ("_crunchyrepl",)), platforms.CRUNCHY,
                 "the _crunchyrepl role", id="crunchy"),
]


@pytest.mark.parametrize(("facts", "platform", "clues"), PLATFORMS)
def test_each_platform_is_named_from_what_its_server_reports(
        facts: Reported, platform: platforms.Platform, clues: str) -> None:
    assert platforms.identify(facts) == (platform, clues)


def test_a_server_of_ones_own_is_no_platform() -> None:
    # pgaudit's settings and a replicator role are anybody's.
    assert platforms.identify(reported(("pgaudit.log",), ())) is None


POOLERS = [
    pytest.param("mydb.proxy-abc123.us-east-1.rds.amazonaws.com", "5432", True,
                 "RDS Proxy (it pins a session that takes an advisory lock to one backend)",
                 id="rds-proxy"),
    pytest.param("ep-cool-darkness-123456-pooler.us-east-2.aws.neon.tech", "5432", True,
                 "Neon's pooler (PgBouncer, transaction mode)", id="neon-pooled"),
    pytest.param("ep-cool-darkness-123456.us-east-2.aws.neon.tech", "5432", False, None,
                 id="neon-direct"),
    pytest.param("aws-0-eu-central-1.pooler.supabase.com", "6543", True,
                 "Supabase's pooler (Supavisor, transaction mode)", id="supavisor-transaction"),
    pytest.param("aws-0-eu-central-1.pooler.supabase.com", "5432", False,
                 "Supabase's pooler (Supavisor, session mode)", id="supavisor-session"),
    pytest.param("127.0.0.1", "6432", True,
                 "a transaction- or statement-pooling proxy (PgBouncer, pgcat, PgDog, ...)",
                 id="pgbouncer-transaction"),
    pytest.param("127.0.0.1", "6432", False, None, id="pgbouncer-session-or-direct"),
]


@pytest.mark.parametrize(("host", "port", "changed", "name"), POOLERS)
def test_the_pooler_is_named_from_the_dsn_and_the_sessions(
        host: str, port: str, changed: bool, name: str | None) -> None:
    assert platforms.pooler(host, port, changed) == name


def test_a_ttl_that_does_not_ride_out_the_failover_warns() -> None:
    # RDS Multi-AZ: up to 120 s. The default 1m rides out 23 s; 5m rides out 159 s.
    ttls = {"": (60.0, 10.0), "nightly": (300.0, 10.0), "sync": (120.0, 10.0)}
    found = doctor.failover(platforms.RDS, ttls, Purpose.RUNNER)
    assert found.level is Level.WARN
    assert found.detail == (
        "Amazon RDS for PostgreSQL fails over in up to 120 s; a running command is stopped "
        "by a failover that long at the ttl of the default (1m), sync (2m)")
    assert found.advice.startswith("a ttl of at least 235s ")
    assert heartbeat.rides_out(300, 10) >= 120 > heartbeat.rides_out(120, 10)
    # A reader runs nothing: said, not warned.
    assert doctor.failover(platforms.RDS, ttls, Purpose.READER).level is Level.OK


def test_ttls_that_ride_out_the_failover_are_ok() -> None:
    found = doctor.failover(platforms.CLOUDNATIVEPG, {"": (60.0, 10.0)}, Purpose.OPERATOR)
    assert (found.level, found.detail) == (Level.OK,
                                           "every ttl rides out a failover of 10 s")


def test_the_ttls_come_from_the_jobs_file_and_runs_own(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    config = tmp_path / "config.toml"
    config.write_text('[jobs.nightly]\ncommand = ["true"]\nttl = "5m"\n\n'
                      '[jobs.plain]\ncommand = ["true"]\n')
    monkeypatch.setenv("PGLOCK_CONFIG", str(config))
    monkeypatch.setenv("PGLOCK_TTL", "2m")
    monkeypatch.delenv("PGLOCK_KILL_AFTER", raising=False)
    assert doctor.configured_ttls() == {"": (120.0, 10.0), "nightly": (300.0, 10.0),
                                        "plain": (120.0, 10.0)}


def test_crunchy_fails_over_as_patroni_does_and_is_sized_as_the_page_says() -> None:
    """docs review M1: doctor gave Crunchy a 100 s failover (Patroni's ttl figure read as
    its failover time) while the page said 45 s, and warned a fleet that followed it."""
    assert platforms.CRUNCHY.failover == platforms.PATRONI.failover == 45.0
    # A fleet on the page's ttl for Crunchy (100 s) is not warned.
    assert heartbeat.ttl_for(45.0, 10.0) == 100.0
    found = doctor.failover(platforms.CRUNCHY, {"": (100.0, 10.0)}, Purpose.RUNNER)
    assert found.level is Level.OK


PAGE = Path(__file__).resolve().parents[3] / "docs" / "platforms.md"


@pytest.mark.parametrize("name", sorted(platforms.PLATFORMS))
def test_the_pages_failover_and_ttl_are_generated_from_the_platform_table(name: str) -> None:
    """One figure per platform: the page's cells are written by gen-docs from
    platforms.py (its --check, tests/cli/test_docs.py, fails on drift)."""
    page = PAGE.read_text()
    platform = platforms.PLATFORMS[name]
    assert f"<!-- gen:failover:{name} -->{platform.source}<!-- /gen -->" in page
    if platform.failover is not None:
        assert f"<!-- gen:platform-ttl:{name} -->" in page
