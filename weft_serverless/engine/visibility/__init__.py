"""Finding runs: list and count filters, checked before anything is read, and the listing read a
page at a time (ADR 0030).
"""
