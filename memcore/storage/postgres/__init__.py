"""The Store port on PostgreSQL + pgvector: the store (connections, snapshots, writes) and its
queries.
"""
