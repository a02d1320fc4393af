"""Pictures of scored regions, drawn with PIL (`draw`): the web UI's overlays
and the `diagnose` report's, the same way."""
