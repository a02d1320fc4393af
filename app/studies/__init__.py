"""Research studies run on capscope as a whole (the label-efficiency study)."""
