"""Front ends that drive sessions for other programs: an Agent Client Protocol agent (editors
speak it over stdio) and a WebSocket server (web UIs, scripts). Both sit on the service API
(``coder_es.service.api``); what they share lives in small modules here:

- ``runtime``: the store, provider choice, per-workspace services and config hot reload;
- ``history``: a session's conversation on the path root->head, as plain items;
- ``filters``: the server-side approve / deny rules of ``[serve.rules]``;
- ``branch_ops``: fork / switch / rewind / tree for a session that has a live handle.

The wire formats are documented in docs/clients.md.
"""
