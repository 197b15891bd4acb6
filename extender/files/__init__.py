"""Reading and writing Muster's files: descriptor catalogs and cluster snapshots.

Must NOT talk to the API server or decide anything; it turns bytes on disk into core values
(and back), reporting every problem with the file and document it came from.
"""
