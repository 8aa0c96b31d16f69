"""Datasets on disk: examples of the transformation tasks, vocabularies, splits."""
