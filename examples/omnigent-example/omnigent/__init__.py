"""A small stand-in for Omnigent: a backend server and a helper host daemon."""

__version__ = "0.1.0"
