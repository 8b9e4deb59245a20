"""The implementation of the public Python API (``import coder_es``); import from ``coder_es``.

A thin facade over the service layer (``coder_es.service``), the branching commands, the audit
trail, search and replay: ``store`` (``Store``, ``open_store``), ``session`` (``Session``, a
turn's ``TurnResult``), ``own_loop`` (``OwnLoop``: a loop of the user's own recorded as events),
``rules`` (``allow`` / ``ask`` / ``deny``), ``cassettes`` (record and replay). Names not exported
by ``coder_es`` are private by convention, whatever module they live in.
"""
