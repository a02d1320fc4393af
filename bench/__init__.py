"""Measuring metrics: speed (capscope bench) and accuracy against gold labels (capscope evaluate)."""
