"""`gfd fleet`: the cluster's GPU nodes at a glance, from one paginated LIST of Nodes (and, on a DRA
cluster, of ResourceSlices). ``summary`` is the pure part (Nodes in, groups and problems out); ``cli`` reads
the cluster and prints."""
