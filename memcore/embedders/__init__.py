"""Embedder port and adapters: text in, unit float32 vectors out."""
