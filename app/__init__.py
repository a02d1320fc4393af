"""capscope: token- and region-level caption evaluation."""

__version__ = "0.1.0"
