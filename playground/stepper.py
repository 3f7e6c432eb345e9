"""Kept for code written against round 1: `playground.stepper` is `playground.step`."""

import sys

from playground import step

sys.modules[__name__] = step
