"""Small datasets that work without network access (see ``data/README.md``)."""
from . import mnist

__all__ = ["mnist"]
