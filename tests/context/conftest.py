from __future__ import annotations

import sys
from pathlib import Path

# context_helpers sits next to the tests (tests/ is not a package).
sys.path.insert(0, str(Path(__file__).parent))
