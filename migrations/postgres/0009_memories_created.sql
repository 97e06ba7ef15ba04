-- Lists in their order (oldest first): an export, or any page after the first, walks this
-- index from where the last page ended (MemoryQuery.after) instead of sorting a namespace's
-- memories again for each page.
CREATE INDEX memories_created ON memories (ns, created, path);
