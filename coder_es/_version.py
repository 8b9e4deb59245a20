"""The package version, in a module of its own so that any layer can name it without importing
``coder_es/__init__.py`` (which re-exports the public API from the top layers)."""

__version__ = "0.1.0"
