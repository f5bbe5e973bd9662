"""Names: publication keys and attempt identities, staging-branch names, the job's locations."""
