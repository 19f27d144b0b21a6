"""The SQLite store, the lineage graph, resume and export."""

from hipevolve.archive.store import Archive, ArchiveFull, evaluation_key

__all__ = ["Archive", "ArchiveFull", "evaluation_key"]
