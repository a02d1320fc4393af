"""Studies run on capscope as a whole: label efficiency, long captions, the
region rule, diagnose's recovery of planted errors."""
