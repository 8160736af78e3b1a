"""Files on disk: mapped segments, flushing, the checkpoint, config JSON, the store directory."""
