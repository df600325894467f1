"""End-to-end, fault, security and first-hour scenarios: real nanobot, real worker processes, real Redis."""
