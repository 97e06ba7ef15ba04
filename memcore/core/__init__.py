"""What every layer shares and none owns: value types, errors, settings, the version, text
segmentation and vector maths. Imports nothing else from memcore.
"""
