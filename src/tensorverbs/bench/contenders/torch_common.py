"""What the torch contenders share: the availability check and the rendezvous address."""
from __future__ import annotations

import importlib.util
import warnings

from ...local_cluster import free_port


def available(feature: str) -> tuple[bool, str]:
    """Whether torch is installed and has ``torch.distributed`` (and ``feature`` of it)."""
    if importlib.util.find_spec("torch") is None:
        return False, "torch is not installed (pip install 'tensorverbs[torch]')"
    import torch
    import torch.distributed as dist

    if not dist.is_available():
        return False, f"torch {torch.__version__} was built without torch.distributed"
    if feature == "rpc":
        from torch.distributed import rpc

        if not rpc.is_available():
            return False, f"torch {torch.__version__} was built without torch.distributed.rpc"
    return True, f"torch {torch.__version__}"


def link() -> dict:
    """The rendezvous address torch.distributed peers meet at."""
    return {"init_method": f"tcp://127.0.0.1:{free_port()}"}


def quiet() -> None:
    """Silence torch's warning about its own use of a gloo group (rpc and gloo set-up)."""
    warnings.filterwarnings("ignore", category=UserWarning, module="torch.distributed")
