"""The SQLite store, the lineage graph, resume and export."""
