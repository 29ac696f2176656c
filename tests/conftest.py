"""Suite-wide settings."""

import os

# Test apps refresh stored readings explicitly (refresh_all) so results do not depend on timing;
# the background refresher is tested on its own with the setting turned back on.
os.environ.setdefault("CALMON_REFRESH_IN_SERVICE", "false")
