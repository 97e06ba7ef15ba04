"""Disk state vs index state -> which files to read, which to drop. Pure."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

from memcore.models import DiskFile, FileState


@dataclass(frozen=True, slots=True)
class ChangePlan:
    to_read: tuple[DiskFile, ...]  # new, or size/mtime changed (content may still be the same)
    to_delete: tuple[str, ...]  # indexed but gone from disk
    unchanged: tuple[str, ...]

    @property
    def empty(self) -> bool:
        return not self.to_read and not self.to_delete


def plan_changes(
    disk: Sequence[DiskFile],
    index: Mapping[str, FileState],
    full: bool = False,
    scope: Collection[str] | None = None,
) -> ChangePlan:
    """Compare a scan with the index. ``scope`` limits the plan to these paths (watch events);
    ``full`` rereads every file on disk (a rebuild)."""
    on_disk = {f.path: f for f in disk if scope is None or f.path in scope}
    known = index if scope is None else {p: s for p, s in index.items() if p in scope}
    to_read, unchanged = [], []
    for path, f in on_disk.items():
        state = known.get(path)
        if full or state is None or state.size != f.size or state.mtime_ns != f.mtime_ns:
            to_read.append(f)
        else:
            unchanged.append(path)
    to_delete = sorted(p for p in known if p not in on_disk)
    return ChangePlan(tuple(to_read), tuple(to_delete), tuple(unchanged))
