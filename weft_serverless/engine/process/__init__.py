"""What one engine process holds in memory: its activity threads, the attempts it runs, warm
generators, services, clock skew, telemetry and tracing.

Nothing here is stored; it sits just above ``persistence``.
"""
