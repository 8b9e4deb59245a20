"""The tools the model can call: read, write, edit, bash, grep, find.

``base`` defines ``Tool``, ``ToolContext`` and ``ToolResult``; ``schema`` turns a tool's typed
input (a dataclass) into the JSON schema the model sees and parses arguments against it;
``registry`` holds the tools and the ``ToolExecutor`` seam; ``output`` caps what the model sees.
"""
