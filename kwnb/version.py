"""kwnb's version, in a module of its own so that any part can name it without importing the package's API."""
__version__ = "0.1.0"
