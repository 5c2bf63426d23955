"""Worker processes: palace workers (one SQLite file + vector index each) and embedders."""
