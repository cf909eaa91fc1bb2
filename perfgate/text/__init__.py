"""Text: how quantities are written, and how untrusted text is made inert (the lowest layer)."""
