"""horovod.torch is hvd.torch: the same module objects, so state (handles, the optimizer's
hooks) is shared whichever name a script imports."""
import sys

import hvd.torch
from hvd import _alias

_alias.alias('hvd.torch', __name__)
