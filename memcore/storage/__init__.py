"""The index database: the Store port, its SQLite and PostgreSQL adapters, schema migrations and
the in-process ANN graph.
"""
