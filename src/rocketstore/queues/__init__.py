"""What is derived from the CommitLog: ConsumeQueues, the index (twins), dispatch and checks."""
