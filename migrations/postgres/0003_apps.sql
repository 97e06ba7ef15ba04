-- Mem0's app_id is a scope like user, agent and run: memories of two apps never meet.
-- Scoped reads start from the scope's own rows: one index per scope column, so a search or a
-- listing by agent, run or app alone does not scan every memory.
ALTER TABLE memories ADD COLUMN app_id text;
CREATE INDEX memories_app ON memories (ns, app_id) WHERE app_id IS NOT NULL;
CREATE INDEX memories_agent ON memories (ns, agent_id) WHERE agent_id IS NOT NULL;
CREATE INDEX memories_run ON memories (ns, run_id) WHERE run_id IS NOT NULL;
-- A scope's notes are read from its folders: a range of paths in byte order (COLLATE "C"),
-- whatever the database's collation.
CREATE INDEX memory_chunks_file_c ON memory_chunks (source_file COLLATE "C");
