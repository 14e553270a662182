"""InternVL3 / InternVL3.5 (``internvl``): filled in below."""
