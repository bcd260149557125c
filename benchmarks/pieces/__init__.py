"""One module per comparison; benchmarks/catalogue.py names the pieces each one measures. A piece imports
benchmarks.support and the tests' harness, never another piece or the catalogue."""
