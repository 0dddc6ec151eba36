"""Makes one package importable under a second name with the same module objects."""
import sys


def alias(source, target):
    """Points sys.modules[target] and every loaded sys.modules[target + '.x'] at the source's
    modules, so `import target.x` yields source.x itself (not a second copy of it)."""
    prefix = source + '.'
    for name, module in list(sys.modules.items()):
        if name == source:
            sys.modules[target] = module
        elif name.startswith(prefix):
            sys.modules[target + name[len(source):]] = module
