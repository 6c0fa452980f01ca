"""The client API: connections and cursors (PEP 249), sessions that turn statements into plans, settings, and both ends of a standalone coordinator's client protocol."""
