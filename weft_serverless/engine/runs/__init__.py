"""A run's state changes, each one batch through the one write path (``commit``): starts, status
transitions, concurrency slots, finalizers, the events outbox and the event log, signals,
updates, operator control, admission and retention.
"""
