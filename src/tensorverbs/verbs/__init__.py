"""The verbs layer: one object model (:mod:`.api`, :mod:`.model`), several providers."""
from .api import CompletionQueue, Context, MemoryRegion, ProtectionDomain, Provider, QueuePair
from .config import RdmaConfig
from .model import (
    SGE, Access, DeviceAttr, PortAttr, QPEndpoint, QPState, RecvWR, SendWR, WcOpcode, WcStatus,
    WorkCompletion, WrOpcode,
)
from .registry import choose_provider, get_provider, open_context

__all__ = [
    "Access", "CompletionQueue", "Context", "DeviceAttr", "MemoryRegion", "PortAttr",
    "ProtectionDomain", "Provider", "QPEndpoint", "QPState", "QueuePair", "RdmaConfig", "RecvWR",
    "SGE", "SendWR", "WcOpcode", "WcStatus", "WorkCompletion", "WrOpcode", "choose_provider",
    "get_provider", "open_context",
]
