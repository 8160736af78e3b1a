"""Processes sharing one store: the live page (wake-ups) and joined writers."""
