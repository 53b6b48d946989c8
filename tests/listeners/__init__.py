"""Listeners and their events: base classes, ListenerSet, queued and lossless listeners, event
batches, the Parquet event log.
"""
