"""Running trials: one trial's life (pending -> task -> scores -> cleared), its scoring, trials run
ahead on threads, and the processes and machines that share a run (pytest-xdist, CI shards)."""
