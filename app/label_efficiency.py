"""Re-export: the label-efficiency study lives in `capscope.studies.label_efficiency`;
`python -m capscope.label_efficiency` keeps working."""
import sys

from capscope.studies.label_efficiency import *  # noqa: F401,F403
from capscope.studies.label_efficiency import main

if __name__ == "__main__":
    sys.exit(main())
