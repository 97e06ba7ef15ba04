"""The SQLite library itself, set up once a process, before Python's sqlite3 module starts it.

SQLite keeps memory statistics unless built without them, and it keeps them under one
process-wide mutex that every allocation takes. memcore's connections each run on a thread of
their own (the writer, and a reader per core), and FTS5 allocates as it reads postings, so two
threads' keyword searches took turns at that one mutex: on 2 cores they ran 1.3x as fast as
one, against 1.9x for two processes. With the statistics off (SQLITE_CONFIG_MEMSTATUS, which
SQLite's documentation recommends for speed) two threads run 1.7x as fast as one, and 12
clients' search p99 went from 75-84 ms to 70-77 (bench/http_api.py, docs/performance.md).
Nothing in Python reads the statistics: the sqlite3 module has no call for them.

The setting can only be made before the library starts, which importing sqlite3 does; so the
``memcore`` package makes it first thing. In a process that imported sqlite3 before memcore,
nothing changes: every search is as fast as before, only two at once are not.
"""

from __future__ import annotations

import sys

_SQLITE_CONFIG_MEMSTATUS = 9  # sqlite3.h
_SQLITE_OK = 0


def without_memory_statistics() -> bool:
    """Switch SQLite's memory statistics off for this process, if it is not started yet.
    True when that took effect; never raises."""
    if "_sqlite3" in sys.modules or sys.platform == "darwin":
        # started already; or Apple's arm64 calls, where a variadic argument (this one)
        # is passed where ctypes does not put it
        return False
    try:
        import ctypes
        import importlib.util

        spec = importlib.util.find_spec("_sqlite3")
        if spec is None or not spec.origin:
            return False
        # Python's own binding, without running it: the library it links is the one it uses
        config = ctypes.CDLL(spec.origin).sqlite3_config
        return bool(config(_SQLITE_CONFIG_MEMSTATUS, ctypes.c_int(0)) == _SQLITE_OK)
    except (ImportError, OSError, AttributeError):  # no ctypes, or a build that hides it
        return False
