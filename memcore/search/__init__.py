"""Answering a query: the searcher, score fusion (pure), the context block, and memory strength
(FSRS-6).
"""
