"""Annotation store: SQLAlchemy models and sessions. Imports nothing else of capscope."""
