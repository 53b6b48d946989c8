"""The package as a whole: its public surface, the docs' examples, the shared helpers (_validate,
_exit).
"""
