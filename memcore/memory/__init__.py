"""The Mem0-style memory operations over the vault and the index: add, update, delete, archive,
conversations, infer.
"""
