-- Files that could not be indexed (binary, invalid UTF-8, too large), with the size and mtime
-- they had then: an unchanged skipped file is not read (or reported) again, and `status`
-- lists them. A file that indexes fine later, or disappears, leaves this table.
CREATE TABLE skipped_files (
    path     TEXT PRIMARY KEY,
    reason   TEXT NOT NULL,
    size     INTEGER NOT NULL,
    mtime_ns INTEGER NOT NULL,
    since    TEXT NOT NULL
);
