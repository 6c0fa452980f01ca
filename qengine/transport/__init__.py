"""How processes talk: Arrow Flight actions carrying the cluster token, and the encodings of schemas and tables in their bodies."""
