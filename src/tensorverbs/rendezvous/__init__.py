"""Rendezvous: keys, the local table with tag matching, and the remote-rendezvous base."""
from .key import RendezvousKey, check_name, format_key, parse_key

__all__ = ["RendezvousKey", "check_name", "format_key", "parse_key"]
