"""What shows the ``fundamentals`` library: the console demo and the demo report's section.

Not part of the library: ``fundamentals`` never imports this package (only its ``__main__``
does, lazily, for the ``demo`` command).
"""
