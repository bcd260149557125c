"""Least-privilege NFD-style label writer: feature files in, own Node labels out."""
