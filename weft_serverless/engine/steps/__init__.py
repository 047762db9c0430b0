"""Carrying out durable commands: ``runner`` maps each command type to its handler, the
handler modules carry one kind of step each, and ``scope`` holds what they share."""
