"""The native core through its Python binding: the detector's semantics, inputs and model, its
queues and dispatcher, the scheduler core, the local-pause guard, the dedup window.
"""
