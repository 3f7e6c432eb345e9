"""Silence the warnings optional libraries print on import (imported first by playground).

transformers imports torchao, when it is installed, on its own import; torchao then warns that
its CUDA-only extensions do not load on a CPU machine, and torch that an Enum is registered twice.
Noise on every start, and none of it is ours to fix.
"""

import logging

for name in ("torchao", "torch.utils._pytree"):
    logging.getLogger(name).setLevel(logging.ERROR)
