-- Chunk ids are never reused: a vector graph saved beside the index (search/ann.py) is keyed by
-- chunk id and brought up to date by comparing ids, which is only right if an id always names
-- the same chunk. SQLite's INTEGER PRIMARY KEY would hand a deleted top id out again, so the
-- writer takes ids from this counter instead. index_id names this database, so a graph saved for
-- a deleted and rebuilt index is never mistaken for this one's.
CREATE TABLE chunk_ids (
    id   INTEGER PRIMARY KEY CHECK (id = 1),
    next INTEGER NOT NULL
);
INSERT INTO chunk_ids (id, next) SELECT 1, COALESCE(MAX(id), 0) + 1 FROM memory_chunks;
INSERT OR REPLACE INTO meta (key, value) VALUES ('index_id', lower(hex(randomblob(8))));
