"""Storage port and adapters: the index database."""
