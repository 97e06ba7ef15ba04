-- What each write that bumped a namespace's generation did to its chunks: the ids it added
-- (or gave another vector) and the ids it removed (or took a vector from). A process holding
-- the namespace's vectors in memory (below storage.ann_min_vectors) catches up with other
-- machines' writes from these rows, without reading every id again. Rows older than the last
-- few thousand generations are pruned; a process that fell further behind, or a generation
-- without a row (a write by an older memcore), compares ids instead.
CREATE TABLE vector_changes (
    ns text NOT NULL,
    generation bigint NOT NULL,
    added bigint[] NOT NULL,
    removed bigint[] NOT NULL,
    PRIMARY KEY (ns, generation)
);
