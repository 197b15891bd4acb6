"""The ``muster`` command: parse arguments, call the core and adapters, render."""
