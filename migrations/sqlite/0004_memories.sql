-- Memories written through the API (or by hand in a memory file): one row per memory, pointing
-- at its chunk. Derived from the Markdown like everything else here: `reindex` rebuilds it.
CREATE TABLE memories (
    memory_id TEXT PRIMARY KEY,
    chunk_id  INTEGER NOT NULL REFERENCES memory_chunks(id) ON DELETE CASCADE,
    path      TEXT NOT NULL,
    user_id   TEXT,
    agent_id  TEXT,
    run_id    TEXT,
    category  TEXT NOT NULL,
    key       TEXT,
    created   TEXT NOT NULL,
    updated   TEXT NOT NULL,
    metadata  TEXT NOT NULL DEFAULT '{}'
);
CREATE INDEX memories_chunk ON memories (chunk_id);
CREATE INDEX memories_scope ON memories (user_id, agent_id, run_id, category);
CREATE INDEX memories_key ON memories (key);
CREATE INDEX memories_path ON memories (path);
