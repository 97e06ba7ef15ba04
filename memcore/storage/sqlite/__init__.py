"""The Store port on SQLite: the store (connections, snapshots, writes, vectors in memory) and its
queries.
"""
