"""Kernel tasks: the on-disk format (spec), the shipped starters, extraction."""
