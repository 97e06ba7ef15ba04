"""Disk state vs index state -> which files to read, which to drop. Pure."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

from memcore.core.models import DiskFile, FileState, SkippedFile


@dataclass(frozen=True, slots=True)
class ChangePlan:
    to_read: tuple[DiskFile, ...]  # new, or size/mtime changed (content may still be the same)
    to_delete: tuple[str, ...]  # indexed but gone from disk
    unchanged: tuple[str, ...]
    still_skipped: tuple[str, ...] = ()  # could not be indexed, and not changed since

    @property
    def empty(self) -> bool:
        return not self.to_read and not self.to_delete


def plan_changes(
    disk: Sequence[DiskFile],
    index: Mapping[str, FileState],
    full: bool = False,
    scope: Collection[str] | None = None,
    skipped: Mapping[str, SkippedFile] | None = None,
) -> ChangePlan:
    """Compare a scan with the index. ``scope`` limits the plan to these paths (watch events);
    ``full`` rereads every file on disk (a rebuild). A ``skipped`` file (one that could not be
    indexed) is read again only once its size or mtime changes."""
    on_disk = {f.path: f for f in disk if scope is None or f.path in scope}
    known = index if scope is None else {p: s for p, s in index.items() if p in scope}
    skipped = skipped or {}
    to_read, unchanged, still_skipped = [], [], []
    for path, f in on_disk.items():
        state = known.get(path)
        skip = skipped.get(path)
        if not full and skip is not None and (skip.size, skip.mtime_ns) == (f.size, f.mtime_ns):
            still_skipped.append(path)
        elif full or state is None or state.size != f.size or state.mtime_ns != f.mtime_ns:
            to_read.append(f)
        else:
            unchanged.append(path)
    gone = {p for p in known if p not in on_disk}
    gone |= {p for p in skipped if p not in on_disk and (scope is None or p in scope)}
    return ChangePlan(tuple(to_read), tuple(sorted(gone)), tuple(unchanged), tuple(still_skipped))
