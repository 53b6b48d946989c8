"""The wire to the core: STOMP frames, beat decoding and signatures, the native reader and intake,
the ingest-lag guard, hostile input and fuzzing.
"""
