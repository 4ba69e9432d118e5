"""Examples shipped with switchboard: a small shop the tool gateway talks to by default."""
