-- Mem0's app_id is a scope like user, agent and run: memories of two apps never meet.
-- Scoped reads start from the scope's own rows: one index per scope column, so a search or a
-- listing by agent, run or app alone does not scan every memory.
ALTER TABLE memories ADD COLUMN app_id TEXT;
CREATE INDEX memories_app ON memories (app_id) WHERE app_id IS NOT NULL;
CREATE INDEX memories_agent ON memories (agent_id) WHERE agent_id IS NOT NULL;
CREATE INDEX memories_run ON memories (run_id) WHERE run_id IS NOT NULL;
