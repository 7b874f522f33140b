"""The locks: a lease row or an advisory session lock, kept alive, and the record of runs."""
