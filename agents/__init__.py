"""The realtime agent's side of a call: what it runs next to the audio loop (see README.md)."""
