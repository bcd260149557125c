"""The benchmarks: run on demand as ``python -m benchmarks PIECE...`` from the repository root, never as
tests (benchmarks/README.md). __main__.py is the entry point, catalogue.py names the pieces, pieces/ holds
one module per comparison and support/ what they share; each imports only those below it."""
