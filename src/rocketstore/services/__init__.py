"""Services written once in Python over the kernels: topics, delay, timers, retention, POP."""
