"""The build side: what reads the pages, schedules them, keeps the cache and writes the site.
No page's process imports it, so an edit here re-runs no page (ARCHITECTURE.md)."""
