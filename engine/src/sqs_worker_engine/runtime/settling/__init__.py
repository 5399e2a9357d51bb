"""A message's receipt handle, and settling with it: the lease book and its keeper, the decisions, the settler and its acker."""
