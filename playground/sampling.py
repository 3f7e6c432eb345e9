"""Kept for code written against round 1: `playground.sampling` is `playground.engine.sampling`."""

import sys

from playground.engine import sampling

sys.modules[__name__] = sampling
