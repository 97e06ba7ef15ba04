-- A memory id found in more than one place (a memory file copied or moved by hand: the new copy
-- is indexed before the old file's deletion). One place is its home, in `memories`: the smallest
-- path, so the choice does not depend on the order files are indexed in. The others wait here,
-- and the next one takes over when the home goes, so a moved file keeps every memory's id.
CREATE TABLE memory_copies (
    memory_id TEXT NOT NULL,
    chunk_id  INTEGER NOT NULL PRIMARY KEY REFERENCES memory_chunks(id) ON DELETE CASCADE,
    path      TEXT NOT NULL
);
CREATE INDEX memory_copies_id ON memory_copies (memory_id, path);
