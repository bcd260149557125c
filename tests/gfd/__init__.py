"""Tests of the gfd package."""
