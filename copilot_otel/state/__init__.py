"""What survives a restart: the SQLite checkpoint of read positions and the lanes that share it."""
