"""What the database says of the jobs: the one job model; status, history, check, metrics."""
