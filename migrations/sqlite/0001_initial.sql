-- memcore index schema v1. The Markdown vault is the source of truth; everything here can be
-- rebuilt from it with `memcore reindex` (except cached embeddings, which only save time).

CREATE TABLE files (
    path         TEXT PRIMARY KEY,          -- vault-relative POSIX path
    content_hash TEXT NOT NULL,             -- sha256 of the file bytes (first 32 hex digits)
    size         INTEGER NOT NULL,
    mtime_ns     INTEGER NOT NULL,
    indexed_at   TEXT NOT NULL
);

CREATE TABLE memory_chunks (
    id              INTEGER PRIMARY KEY,
    source_file     TEXT NOT NULL REFERENCES files(path) ON DELETE CASCADE,
    chunk_index     INTEGER NOT NULL,
    heading_path    TEXT NOT NULL DEFAULT '',   -- "Projects > DiveAdstra"
    start_line      INTEGER NOT NULL,           -- 1-based, inclusive
    end_line        INTEGER NOT NULL,
    content         TEXT NOT NULL,
    fts_text        TEXT NOT NULL,              -- heading + content as full text sees it (CJK segmented)
    content_hash    TEXT NOT NULL,              -- hash of what gets embedded
    embedding       BLOB,                       -- little-endian float32; NULL while pending
    embedding_model TEXT,                       -- model id the embedding came from
    tags            TEXT NOT NULL DEFAULT '[]', -- JSON array
    date            TEXT,                       -- YYYY-MM-DD
    metadata        TEXT NOT NULL DEFAULT '{}', -- JSON object: front matter
    updated_at      TEXT NOT NULL,
    UNIQUE (source_file, chunk_index)
);

CREATE INDEX memory_chunks_model ON memory_chunks (embedding_model);
CREATE INDEX memory_chunks_date ON memory_chunks (date);

CREATE VIRTUAL TABLE memory_fts USING fts5 (
    fts_text,
    content = 'memory_chunks',
    content_rowid = 'id',
    tokenize = 'porter unicode61 remove_diacritics 2'
);

CREATE TRIGGER memory_chunks_ai AFTER INSERT ON memory_chunks BEGIN
    INSERT INTO memory_fts (rowid, fts_text) VALUES (new.id, new.fts_text);
END;

CREATE TRIGGER memory_chunks_ad AFTER DELETE ON memory_chunks BEGIN
    INSERT INTO memory_fts (memory_fts, rowid, fts_text) VALUES ('delete', old.id, old.fts_text);
END;

-- Only text changes touch the full-text index; filling in an embedding does not.
CREATE TRIGGER memory_chunks_au AFTER UPDATE OF fts_text ON memory_chunks BEGIN
    INSERT INTO memory_fts (memory_fts, rowid, fts_text) VALUES ('delete', old.id, old.fts_text);
    INSERT INTO memory_fts (rowid, fts_text) VALUES (new.id, new.fts_text);
END;

-- Embeddings by (what was embedded, which model): unchanged text is never embedded twice.
CREATE TABLE embedding_cache (
    content_hash TEXT NOT NULL,
    model        TEXT NOT NULL,
    embedding    BLOB NOT NULL,
    created_at   TEXT NOT NULL,
    PRIMARY KEY (content_hash, model)
) WITHOUT ROWID;

CREATE TABLE meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
