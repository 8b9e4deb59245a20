"""Read-only views of a session (its tree, its files at a node) that the command line and the
clients both show: below both, so neither imports the other for them."""
