"""Where the package's own files are: Hydra configs and chat templates ship inside the package.

In a source checkout `src/posttrain/conf` and `src/posttrain/chat_templates` are links to the top-level `conf/`
and `chat_templates/` (the layout researchers edit); an installed wheel holds copies. Everything that needs one
of these directories reads it from here.
"""

from __future__ import annotations

from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent
CONF_DIR = PACKAGE_DIR / "conf"
CHAT_TEMPLATE_DIR = PACKAGE_DIR / "chat_templates"
ACCELERATE_DIR = CONF_DIR / "accelerate"
HW_DIR = CONF_DIR / "hw"
