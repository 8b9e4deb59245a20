"""coder_es: the event-sourced core of an AI coding agent."""

__version__ = "0.1.0"
