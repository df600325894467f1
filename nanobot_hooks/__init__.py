"""nanobot_hooks: loaded inside nanobot; triggers summary jobs and applies finished summaries between turns."""
