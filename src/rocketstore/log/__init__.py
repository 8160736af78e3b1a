"""The CommitLog: segments, the append core (twins), shared appends between processes, recovery."""
