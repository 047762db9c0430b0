"""The parts ``Engine`` composes: each a class built from the runtime and the session, whose
methods the facade's one-line hand-offs call (starts, interactions, run control, async
activities, schedules, bulk operations, run search).
"""
