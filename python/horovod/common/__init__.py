"""horovod.common is hvd.common (the same module objects)."""
import hvd.common.basics  # noqa: F401
import hvd.common.exceptions  # noqa: F401
from hvd import _alias

_alias.alias('hvd.common', __name__)
