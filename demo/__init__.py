"""The demo world: synthetic scenes with known truth, and the trainers for capscope's own models."""
