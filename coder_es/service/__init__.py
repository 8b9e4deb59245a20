"""The async service API used by the CLI and by clients (ACP agent, WebSocket server).

``api``: ``AgentService`` (create / open sessions), ``SessionHandle`` (send a message or resume
-> async iterator of updates; answer a permission; cancel). ``updates``: the update values, each
with ``to_dict()`` for JSON. (Import from the submodules: the agent loop imports ``updates``.)
"""
