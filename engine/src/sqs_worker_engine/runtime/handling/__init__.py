"""Running a handler: the message prepared as a job, the handler called in its executor (the process pool among them), the job's span."""
