"""Fuzz targets over everything that parses outside input (see :mod:`tests.fuzz.targets`).

Run them with atheris through ``scripts/fuzz``; the suite runs the same checks on generated
frames (``tests/ingest/test_fuzz_*.py``).
"""
