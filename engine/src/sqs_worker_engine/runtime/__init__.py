"""The per-queue runtime: a message's life from receive to settled (pool, admission, leases, settling)."""
