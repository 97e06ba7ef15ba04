-- A counter every write transaction bumps. A reader's snapshot records it, so the in-memory
-- vector matrix knows which state of the database it reflects, including writes made by
-- another process (a `memcore reindex` while the daemon runs).
CREATE TABLE generation (
    id    INTEGER PRIMARY KEY CHECK (id = 1),
    value INTEGER NOT NULL
);
INSERT INTO generation (id, value) VALUES (1, 0);
