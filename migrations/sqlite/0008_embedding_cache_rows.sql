-- The embedding cache as a rowid table. WITHOUT ROWID keeps each row in its primary key's
-- b-tree, whose rows should stay under a twentieth of a page: a 1.5 KB vector spilled every
-- row to an overflow page, and the cache took 4.7 KB for each 1 KB vector.
CREATE TABLE embedding_cache_rows (
    content_hash TEXT NOT NULL,
    model        TEXT NOT NULL,
    embedding    BLOB NOT NULL,
    created_at   TEXT NOT NULL
);
INSERT INTO embedding_cache_rows (content_hash, model, embedding, created_at)
    SELECT content_hash, model, embedding, created_at FROM embedding_cache;
DROP TABLE embedding_cache;
ALTER TABLE embedding_cache_rows RENAME TO embedding_cache;
CREATE UNIQUE INDEX embedding_cache_key ON embedding_cache (content_hash, model);
