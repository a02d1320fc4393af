"""Fine-tuning's defaults, in a module without torch, so that the CLI and the
server can offer them before anything heavy is imported."""

MINUTES = 10.0  # the training budget when neither minutes nor steps are given
HOLDOUT = 0.2   # share of images held out for the before/after figures
