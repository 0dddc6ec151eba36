"""Framework-independent parts of hvd's Python layer: lifecycle, topology, exceptions."""
