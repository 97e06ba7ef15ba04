"""Everything that reads or writes the Markdown: which files are memory, chunking, the memory block
format, safe writes, history, the git hook.
"""
