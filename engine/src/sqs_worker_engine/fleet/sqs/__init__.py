"""SQS and CloudWatch as the fleet meets them: the queue, the lagging counts and one-minute datapoints its readers see, metric math, and the list prices of it all."""
