"""The process shell: the worker's lifecycle and the wiring of its pieces, over its settings, what it asks of its host, and what its platform reads of it."""
