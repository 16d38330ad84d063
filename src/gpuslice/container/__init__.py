"""What a container is handed to run on its GPU shares, whichever path placed it: below both
the device-plugin path (node/) and the DRA path (dra/), which import it and not each other.

  edits.py    PURE: Layout, and the env and mounts for one region (Allocate answer, CDI spec)
  limits.py   PURE: a DRA claim's shares on this node -> its region's limits
  regions.py  the regions on the host: made, read safely (tenants control them), removed
"""
