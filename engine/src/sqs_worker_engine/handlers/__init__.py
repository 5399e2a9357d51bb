"""What a handler sees: the router, the job, its outcomes, batches."""
