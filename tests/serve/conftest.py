"""The dashboard's fixtures: one seeded fleet per module (its seeding runs real pglock
processes), and the application over it, in process."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator

import psycopg
import pytest
from conftest import Env
from psycopg import sql
from starlette.testclient import TestClient

from pglock.serve.auth import Auth
from pglock.serve.pool import Pool
from pglock.serve.site import Site
from pglock.serve.web import build
from serve.fleet import seed


@pytest.fixture(scope="module")
def fleet(dsn: str, tmp_path_factory: pytest.TempPathFactory,
          request: pytest.FixtureRequest) -> Iterator[Env]:
    """A schema seeded with every state, many idle jobs and hostile names."""
    name = "s_" + re.sub(r"\W", "_", request.node.name)[:40].lower() + f"_{os.getpid()}"
    env = Env(dsn, name, tmp_path_factory.mktemp("fleet"))
    seed(env)
    yield env
    env.close()
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(name)))


# Every pool made, closed after each test and again after its module (an open connection
# left to the collector is a ResourceWarning, an error here): a module's `web` client
# outlives the test that first used it, and its pool opens connections again for the next.
POOLS: list[Pool] = []


@pytest.fixture(autouse=True)
def _pools_closed() -> Iterator[None]:
    yield
    for pool in POOLS:
        pool.close()


@pytest.fixture(autouse=True, scope="module")
def _pools_dropped() -> Iterator[None]:
    yield
    while POOLS:
        POOLS.pop().close()


def client(env: Env, auth: Auth | None = None, *, actions: bool = False,
           conninfo: str | None = None, origins: frozenset[str] = frozenset()) -> TestClient:
    """The application over the schema, called in process."""
    pool = Pool(conninfo or env.dsn, timeout=3)
    POOLS.append(pool)
    site = Site(pool, env.schema, "test-db", auth or Auth(), actions, origins=origins)
    return TestClient(build(site), raise_server_exceptions=True)


@pytest.fixture(scope="module")
def web(fleet: Env) -> TestClient:
    return client(fleet)
