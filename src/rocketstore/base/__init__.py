"""Helpers every layer uses: clocks, argument checks, background threads, the failure log."""
