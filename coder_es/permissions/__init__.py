"""Permission rules (allow / ask / deny with glob patterns), agent presets and their evaluation.

``rules``: the rule syntax (``TOOL`` or ``TOOL:PATTERN``) and matching; ``presets``: ``build``,
``plan``, ``explore``; ``policy``: ``Policy.evaluate`` in its documented order, and
``PermissionAnswer`` for answers to an "ask".
"""
