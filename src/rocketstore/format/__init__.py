"""The byte formats: record codec and CRC (compiled/pure twins), units, tag filters, checks."""
