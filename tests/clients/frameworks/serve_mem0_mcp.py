"""Mem0's own MCP server (mem0-mcp-server) on stdio, aimed at memcore:
``MEM0_API_KEY=TOKEN python serve_mem0_mcp.py URL``. It builds ``MemoryClient(api_key=...)``
itself, so hosted.aim points its module at memcore before it starts."""

from __future__ import annotations

import sys

import mem0_mcp_server.server as integration
from hosted import aim

aim(integration, sys.argv[1])
integration.main()
