"""Bulk operations on the runs a listing filter matches, advanced a page at a time (ADR 0031)."""
