"""Driving a run: the replay-and-carry-out loop, the replay-only path that queries take, the
ownership-guarded drive, the queue of runs to drive, and the calls from outside that drive a run
(updates, queries, async completions).
"""
