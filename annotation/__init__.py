"""Annotation workflow over db/ and metrics/: import, queue, labels, agreement, export."""
