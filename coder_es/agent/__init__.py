"""The agent loop: a pure decider over the session's events, wrapped by an effect runner.

- ``state``: ``LoopState``, folded from events one at a time (O(1) per event).
- ``decider``: ``decide(state, ctx) -> Action`` (no I/O), ``recover`` and ``abandon``.
- ``runner``: ``AgentLoop`` carries actions out through the injectable seams (provider, tool
  executor, permission answerer, clock) and records every result as an event.
- ``request``: the request for the next model call (incremental) and its recorded manifest.
- ``prompt``: the system prompt (instructions, git status), recorded once per session.
"""
