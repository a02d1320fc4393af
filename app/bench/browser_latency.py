"""Re-export: browser latency is measured on the UI side, in
`capscope.ui.browser_latency`; `python -m capscope.bench.browser_latency` keeps working."""
import sys

from capscope.ui.browser_latency import *  # noqa: F401,F403
from capscope.ui.browser_latency import main

if __name__ == "__main__":
    sys.exit(main())
