-- Mem0's expiration_date and immutable, kept in each memory's comment in its file like its
-- other fields: a memory past its date (an ISO date) is left out of reads, and an immutable
-- one refuses updates through the API. Few memories expire: the index holds only those.
ALTER TABLE memories ADD COLUMN expires TEXT;
ALTER TABLE memories ADD COLUMN immutable INTEGER NOT NULL DEFAULT 0;
CREATE INDEX memories_expires ON memories (expires) WHERE expires IS NOT NULL;
