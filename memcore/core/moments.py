"""Times as memcore keeps them: ISO 8601 in UTC, to the second, and the UTC day (expiry dates
are UTC days). One reading of "Unix seconds or an ISO time" for every caller: a memory's
``timestamp``, a filter's bound."""

from __future__ import annotations

import datetime as dt


def utc_moment(value: object) -> str:
    """Unix seconds, or an ISO date or date and time (UTC when it names no zone), as ISO 8601
    in UTC to the second. Raises ValueError for anything else (a bool is not a number here)."""
    try:
        if isinstance(value, int | float) and not isinstance(value, bool):
            moment = dt.datetime.fromtimestamp(value, dt.UTC)
        elif isinstance(value, str):
            moment = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
            if moment.tzinfo is None:
                moment = moment.replace(tzinfo=dt.UTC)
        else:
            raise ValueError(f"not a time: {value!r}")
    except (OverflowError, OSError) as exc:
        raise ValueError(f"not a time: {value!r}") from exc
    return moment.astimezone(dt.UTC).isoformat(timespec="seconds")


def utc_today() -> str:
    """Today's date in UTC, as an ISO date."""
    return dt.datetime.now(dt.UTC).date().isoformat()
