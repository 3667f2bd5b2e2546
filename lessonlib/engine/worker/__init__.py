"""What runs in a page's process, and what the build shares with it (blocks, errors, the store).
A page's manifest lists the modules of it that the page ran with: an edit re-runs those pages."""
