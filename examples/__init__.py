"""Runnable example workflows; each module exports a ``workflows`` dict for tooling to find."""
