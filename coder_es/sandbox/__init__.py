"""Shell commands as transactions: each command runs in its own namespaces with the workspace as
an overlay; its exact changes (the upper directory) are merged into the workspace afterwards.

``namespaces``: the sandbox (unshare, PID 1 script, mounts); ``upper``: reading a command's
changes; ``transaction``: planning, journaling, applying and recovering them; ``probe``: whether
the sandbox works here (else the stat-index fallback) and the settings of one session.
"""

from coder_es.sandbox.probe import Availability, SandboxSettings, availability
from coder_es.sandbox.transaction import Applied, Transaction, recover

__all__ = ["Applied", "Availability", "SandboxSettings", "Transaction", "availability", "recover"]
