"""Scoring engine: regions, CLIP features, tokens and pieces, metrics. Imports nothing else of capscope."""
