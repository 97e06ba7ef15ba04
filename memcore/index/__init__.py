"""Keeping the index in line with the vault: change planning (pure), preparing files into rows, the
indexer, the watcher and its debounce, copying an index.
"""
