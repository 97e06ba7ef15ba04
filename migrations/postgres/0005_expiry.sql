-- Mem0's expiration_date and immutable, kept in each memory's comment in its file like its
-- other fields: a memory past its date (an ISO date) is left out of reads, and an immutable
-- one refuses updates through the API. Few memories expire: the index holds only those.
ALTER TABLE memories ADD COLUMN expires text;
ALTER TABLE memories ADD COLUMN immutable boolean NOT NULL DEFAULT false;
CREATE INDEX memories_expires ON memories (ns, expires) WHERE expires IS NOT NULL;
