"""The version of perfgate, written into every file it makes."""

__version__ = "0.1.0"
