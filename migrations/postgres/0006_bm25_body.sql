-- The text that keyword search ranks, as one column (heading and content, Chinese segmented by
-- memcore): pg_textsearch's BM25 index takes a column, not an expression. Filled only where
-- the server has pg_textsearch (see PostgresStore); NULL elsewhere, where the tsvector serves.
ALTER TABLE memory_chunks ADD COLUMN body text;
