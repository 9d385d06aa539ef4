"""The ``viasd`` command line: one module per sub-command group, registered in :mod:`.main`."""
