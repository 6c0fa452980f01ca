"""The ``qengine`` command line (see :mod:`qengine.cli.main`)."""
