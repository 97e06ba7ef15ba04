-- The nodes (memcore serve and watch processes) that share a namespace, so that `status` on
-- any of them lists the others and says which holds the node roles (the watcher, catch-up,
-- expiry archiving, forgetting). A node refreshes its row every few seconds; a row not
-- refreshed for long is a node that died. Who holds the roles is not stored: it is the node
-- whose connection (backend_pid) holds the namespace's roles advisory lock in pg_locks.
CREATE TABLE memcore_nodes (
    ns text NOT NULL,
    node text NOT NULL,
    host text NOT NULL,
    pid integer NOT NULL,
    kind text NOT NULL,
    url text NOT NULL DEFAULT '',
    backend_pid integer NOT NULL,
    started_at timestamptz NOT NULL DEFAULT now(),
    seen_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (ns, node)
);
