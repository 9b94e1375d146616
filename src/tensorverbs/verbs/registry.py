"""The providers, each with an availability check, and the choice among them.

A provider is a module named here; it is imported only when asked for, so a missing
optional dependency (pyverbs) makes that provider unavailable, never the package.
"""
from __future__ import annotations

import importlib
import logging

from ..errors import InvalidArgumentError, UnavailableError
from .api import Context, Provider
from .config import RdmaConfig

log = logging.getLogger(__name__)

#: provider name -> "module:class", in order of preference for "auto"
PROVIDERS = {
    "ibverbs": "tensorverbs.verbs.ibverbs:IbverbsProvider",
    "soft": "tensorverbs.verbs.soft:SoftProvider",
}


def get_provider(name: str) -> Provider:
    """The provider called ``name`` (available or not)."""
    try:
        module, cls = PROVIDERS[name].split(":")
    except KeyError:
        raise InvalidArgumentError(
            f"unknown verbs provider {name!r}: expected one of {', '.join(PROVIDERS)}") from None
    return getattr(importlib.import_module(module), cls)()


def choose_provider(config: RdmaConfig) -> Provider:
    """The provider ``config`` asks for. "auto" takes the first available one and logs why;
    an explicit choice that is unavailable is an error, never a silent fallback."""
    if config.provider != "auto":
        provider = get_provider(config.provider)
        ok, reason = provider.availability()
        if not ok:
            raise UnavailableError(
                f"TENSORVERBS_PROVIDER={config.provider} but that provider is unavailable: {reason}")
        return provider
    reasons = []
    for name in PROVIDERS:
        provider = get_provider(name)
        ok, reason = provider.availability()
        if ok:
            log.info("verbs provider %r chosen (%s)%s", name, reason,
                     "; " + "; ".join(reasons) if reasons else "")
            return provider
        reasons.append(f"{name}: {reason}")
    raise UnavailableError("no verbs provider is available: " + "; ".join(reasons))


def open_context(config: RdmaConfig, listen_host: str | None = None) -> Context:
    """Open the device of the chosen provider."""
    return choose_provider(config).open(config, listen_host)
