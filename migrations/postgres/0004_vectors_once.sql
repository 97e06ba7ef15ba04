-- A vector is kept once: a chunk's row holds it, and the embedding cache only what no chunk
-- holds (a memory's vector was in both, doubling the index). A lookup by what was embedded
-- reads the chunks too, by this index.
CREATE INDEX memory_chunks_hash ON memory_chunks (ns, content_hash);
DELETE FROM embedding_cache e WHERE EXISTS (
    SELECT 1 FROM memory_chunks c
    WHERE c.ns = e.ns AND c.content_hash = e.content_hash
      AND c.embedding_model = e.model AND c.embedding IS NOT NULL
);
