"""The load: the traffic shapes and their arrivals, and the work the simulated handlers do, with the ledger every message's life is checked against."""
