"""The process shell: the worker, its settings, signals, the health server, and the wiring of the pieces."""
