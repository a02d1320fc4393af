"""Scoring engine: regions, CLIP features, tokens and pieces, metrics, `Scorer`.
Imports nothing of capscope's but capscope.common."""
