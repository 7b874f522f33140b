"""Where the database lives: the managed service or cluster manager, and the pooler in
front of it, named from what the server and the DSN report (doctor's `platform`,
`failover` and `pooling` checks; docs/platforms.md has a row for each).

The naming is a pure function of what was reported, so that each platform's documented
values can be tested without the platform: the settings a vendor's build defines
(`rds.*`, `cloudsql.*`, `azure.*`, `neon.*`, Supabase's `supautils.*`), the roles it
creates (`rds_superuser`, `cloudsqlsuperuser`, `azure_pg_admin`, `neon_superuser`,
`supabase_admin`, CloudNativePG's `streaming_replica`, Crunchy's `_crunchyrepl`), Aurora's
`aurora_version()`, and for the pooler the DSN's host and port and whether one
connection's server session changed between two transactions.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Platform:
    """A managed service or cluster manager, and how long its failovers take."""

    name: str
    # The longest failover its vendor or its users report, in seconds (None: no figure
    # to hold a ttl against), and where that figure comes from. docs/platforms.md's
    # failover and ttl columns are generated from these two (scripts/doc_figures.py), so
    # doctor and the page cannot give two figures.
    failover: float | None
    source: str


AURORA = Platform("Amazon Aurora PostgreSQL", 60.0,
                  "30-60 s observed, plus the clients' DNS cache (DNS TTL 5 s)")
RDS = Platform("Amazon RDS for PostgreSQL", 120.0,
               "typically 60-120 s for a Multi-AZ DB instance (AWS); a Multi-AZ DB cluster "
               "fails over faster")
CLOUD_SQL = Platform("Google Cloud SQL for PostgreSQL", 120.0,
                     "an HA instance: about 60 s to detect the failure, then the standby's "
                     "promotion (summaries quote 60-120 s)")
AZURE = Platform("Azure Database for PostgreSQL flexible server", 120.0,
                 "zone-redundant or same-zone HA: 60-120 s of downtime (Microsoft)")
NEON = Platform("Neon", 120.0,
                "a Postgres crash or VM failure: seconds; a node failure: 1-2 min; a zone: "
                "1-10 min (Neon)")
SUPABASE = Platform("Supabase", None,
                    "no automatic failover on a single instance (an outage); a read replica "
                    "is promoted by hand")
CLOUDNATIVEPG = Platform("CloudNativePG", 10.0,
                         "the primary's -rw service switched within 10 s (CloudNativePG's "
                         "end-to-end tests), plus failoverDelay (default 0)")
# Patroni leaves nothing in the server to recognise it by: its figure is the docs' and
# Crunchy's, which runs it. F = Patroni's ttl + loop_wait + the promotion (docs/ha.md).
PATRONI = Platform("Patroni", 45.0,
                   "an unplanned failover: up to Patroni's ttl + loop_wait + the promotion, "
                   "about 45 s with its defaults (ttl 30 s, loop_wait 10 s)")
CRUNCHY = Platform("Crunchy Postgres for Kubernetes (Patroni)", PATRONI.failover,
                   "Patroni's: up to its ttl + loop_wait + the promotion, about 45 s with "
                   "its defaults (ttl 30 s, loop_wait 10 s)")
# By the names docs/platforms.md's markers use (gen:failover:NAME, gen:platform-ttl:NAME).
PLATFORMS = {"aurora": AURORA, "rds": RDS, "cloud-sql": CLOUD_SQL, "azure": AZURE,
             "neon": NEON, "supabase": SUPABASE, "cloudnativepg": CLOUDNATIVEPG,
             "patroni": PATRONI, "crunchy": CRUNCHY}

# Settings whose names a vendor's build defines, by prefix; the roles it creates.
SETTING_PREFIXES = ("rds.", "cloudsql.", "azure.", "neon.", "supautils.")
ROLES = ("rds_superuser", "rdsadmin", "cloudsqlsuperuser", "azure_pg_admin", "azuresu",
         "neon_superuser", "supabase_admin", "streaming_replica", "_crunchyrepl")


@dataclass(frozen=True)
class Reported:
    """What the server says of itself (REPORTED's answer)."""

    # aurora_version()'s answer; None where the function does not exist.
    aurora_version: str | None = None
    # The names of the settings with one of SETTING_PREFIXES, and of the ROLES present.
    settings: frozenset[str] = field(default_factory=frozenset)
    roles: frozenset[str] = field(default_factory=frozenset)

    def prefixed(self, prefix: str) -> bool:
        return any(name.startswith(prefix) for name in self.settings)


# One statement: the vendor's settings and roles, and whether aurora_version() exists
# (asked for only where it does: elsewhere calling it is an error).
REPORTED = """
SELECT array(SELECT name FROM pg_settings WHERE name LIKE ANY(%(prefixes)s) ORDER BY 1),
       array(SELECT rolname::text FROM pg_roles WHERE rolname = ANY(%(roles)s) ORDER BY 1),
       to_regproc('aurora_version') IS NOT NULL
"""
# aurora_version()'s answer as doctor shows it: Aurora's are short (16.4.2); a function of
# that name elsewhere may answer anything, which is cut here and shown escaped.
AURORA_SHOWN = 60
AURORA_VERSION = "SELECT left(aurora_version()::text, %(most)s)"


def aurora_answer(value: object) -> str:
    """aurora_version()'s answer as a clue: one line, printable, at most AURORA_SHOWN
    characters; NULL as NULL."""
    from pglock.settings.text import escaped

    if value is None:
        return "NULL"
    text = str(value)
    cut = text[:AURORA_SHOWN] + ("..." if len(text) > AURORA_SHOWN else "")
    return escaped(cut)


def identify(reported: Reported) -> tuple[Platform, str] | None:
    """The platform, and what gave it away; None: nothing a vendor leaves behind (a
    self-run server, Patroni, or a platform doctor does not know)."""
    if reported.aurora_version is not None:
        # Aurora has RDS's settings and roles too: its own function comes first.
        return AURORA, f"aurora_version() = {reported.aurora_version}"
    if "rds_superuser" in reported.roles or reported.prefixed("rds."):
        return RDS, _clues(reported, "rds.", ("rds_superuser", "rdsadmin"))
    if "cloudsqlsuperuser" in reported.roles or reported.prefixed("cloudsql."):
        return CLOUD_SQL, _clues(reported, "cloudsql.", ("cloudsqlsuperuser",))
    if "azure_pg_admin" in reported.roles or reported.prefixed("azure."):
        return AZURE, _clues(reported, "azure.", ("azure_pg_admin", "azuresu"))
    if "neon_superuser" in reported.roles or reported.prefixed("neon."):
        return NEON, _clues(reported, "neon.", ("neon_superuser",))
    if "supabase_admin" in reported.roles or reported.prefixed("supautils."):
        return SUPABASE, _clues(reported, "supautils.", ("supabase_admin",))
    if "_crunchyrepl" in reported.roles:
        return CRUNCHY, "the _crunchyrepl role"
    if "streaming_replica" in reported.roles:
        return CLOUDNATIVEPG, "the streaming_replica role"
    return None


def _clues(reported: Reported, prefix: str, roles: tuple[str, ...]) -> str:
    found = [f"the {role} role" for role in roles if role in reported.roles]
    if reported.prefixed(prefix):
        found.append(f"{prefix}* settings")
    return " and ".join(found)


def pooler(host: str | None, port: str | None, session_changed: bool) -> str | None:
    """The pooler in front of the server, named when the DSN's host or port says which;
    `session_changed`: one connection's server session changed between two transactions
    (transaction or statement pooling). None: no pooler seen (a direct connection, or
    session pooling, which changes nothing for pglock)."""
    host = (host or "").lower()
    if ".proxy-" in host and host.endswith(".rds.amazonaws.com"):
        return "RDS Proxy (it pins a session that takes an advisory lock to one backend)"
    if "-pooler." in host and host.endswith(".neon.tech"):
        return "Neon's pooler (PgBouncer, transaction mode)"
    if host.endswith(".pooler.supabase.com"):
        mode = "transaction" if port == "6543" else "session"
        return f"Supabase's pooler (Supavisor, {mode} mode)"
    if session_changed:
        return "a transaction- or statement-pooling proxy (PgBouncer, pgcat, PgDog, ...)"
    return None
