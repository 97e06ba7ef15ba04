-- A vector is kept once: a chunk's row holds it, and the embedding cache only what no chunk
-- holds (a memory's vector was in both, doubling the index). A lookup by what was embedded
-- reads the chunks too, by this index.
CREATE INDEX memory_chunks_hash ON memory_chunks (content_hash);
DELETE FROM embedding_cache WHERE EXISTS (
    SELECT 1 FROM memory_chunks c
    WHERE c.content_hash = embedding_cache.content_hash
      AND c.embedding_model = embedding_cache.model AND c.embedding IS NOT NULL
);
