"""The HTTP API: one Starlette app, one module per route group, and the pieces they share
(common.py).
"""
