"""What drives the service from outside: the HTTP API (native and Mem0 REST), MCP, the watch
daemon, and the client of a running server.
"""
