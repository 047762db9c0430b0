"""What a run stores and how it is read back: its records, step slots, head, timers, wake-up, index
entries, retry history and event log.

The lowest layer of the engine: it imports nothing of the engine above it.
"""
