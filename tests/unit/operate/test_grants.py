"""The SQL of `pglock init --print-grants`: what each role is granted, and that the run
path's functions it names are the ones sql/functions.sql creates and revokes from PUBLIC."""

from __future__ import annotations

import re
from importlib import resources

from pglock.operate import roles


def _functions() -> str:
    return resources.files("pglock.db").joinpath("sql/functions.sql").read_text()


def _signatures(text: str) -> set[str]:
    return {re.sub(r"\s+", " ", s) for s in re.findall(r"\{schema\}\.(\w+\([^)]*\))", text)}


def _created() -> set[str]:
    """The signatures (argument types, without their defaults) of the functions the file
    creates."""
    found = re.findall(r"CREATE OR REPLACE FUNCTION \{schema\}\.(\w+)\(([^)]*)\)", _functions())
    return {f"{name}({', '.join(_type(p) for p in params.split(',') if p.strip())})"
            for name, params in found}


def _type(parameter: str) -> str:
    return re.sub(r"\s+DEFAULT\s.*$", "", parameter.split(None, 1)[1].strip())


def _revoked() -> set[str]:
    """What the file revokes from PUBLIC."""
    revokes = [part.split("FROM PUBLIC", 1)[0]
               for part in _functions().split("REVOKE ALL ON FUNCTION")[1:]]
    return set().union(*map(_signatures, revokes))


def test_every_function_is_revoked_from_public() -> None:
    assert _revoked() == _created()


def test_the_runner_gets_the_functions_revoked_from_public() -> None:
    revoked = _revoked()
    assert set(roles.RUN_FUNCTIONS) <= revoked
    # The helpers the functions use are nobody's to call.
    assert revoked - set(roles.RUN_FUNCTIONS) == {
        "advisory_key(text)", "session_holds(text)", "incarnation()", "timeline()",
        "sighting()", "next_token(bigint, bigint)", "advisory_horizon(interval)",
        "granted(bigint, interval)", "keeps(bigint, timestamptz, timestamptz)", "evict(text)",
        "takeable({schema}.locks, text, text, text, boolean, bigint)",
        "seat_takeable({schema}.seats, text, boolean, bigint)",
        "attend(text, text, text, text, timestamptz, interval, boolean, boolean, boolean, "
        "interval, boolean)",
        "record_start(text, timestamptz, text, text, integer, text, bigint, text, text, text, "
        "timestamptz, interval, integer, integer, text, text, text, integer, integer, "
        "interval)",
        # A job's roster (candidates): the reader's to call, for `pglock hosts --next`.
        "roster_key(text, text)", "roster(text, integer)"}


def test_each_role_is_granted_what_it_needs_and_no_more() -> None:
    text = roles.grants("pglock", {"pglock_runner": ["web1"], "pglock_reader": ["mon"],
                                   "pglock_operator": ['o"p']}).as_string(None)
    lines = [line for line in text.splitlines() if line.startswith("GRANT")]
    runner = [line for line in lines if line.endswith(" TO pglock_runner;")]
    assert all(" EXECUTE " in line or line.startswith(("GRANT USAGE ON SCHEMA",
                                                       "GRANT SELECT ")) for line in runner)
    assert not any(re.search(r"INSERT|UPDATE|DELETE|holder_id", line) for line in runner)
    reader = [line for line in lines if line.endswith(" TO pglock_reader;")]
    # The reader executes two functions: the fencing guard (docs/lease.md, "Fencing") and
    # a job's roster (`pglock hosts --next`), which reads with its own rights.
    allowed = (".fence(text, text, bigint)", ".roster(text, integer)")
    assert not any(re.search(r"INSERT|UPDATE|DELETE|EXECUTE|holder_id", line)
                   for line in reader if not any(name in line for name in allowed))
    assert sum(" EXECUTE " in line for line in reader) == 2
    assert 'GRANT "pglock_runner" TO "web1";' in lines
    assert 'GRANT "pglock_operator" TO "o""p";' in lines
    assert "CREATE ROLE \"pglock_reader\" NOLOGIN;" in text
