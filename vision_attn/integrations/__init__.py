"""Bridges to other libraries; each imports its library only when called."""
