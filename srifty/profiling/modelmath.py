"""What a model's math runs in and how many FLOPs one forward does.

Read inside the first DDP forward (so inside the script's autocast context) by the recorder's
hooks: the autocast dtype and TF32 switches decide which GPU units a float32 model may use, and
the forward's FLOPs with the convolutions' share say which of those switches matter.
"""

from __future__ import annotations

from typing import Any

import torch


def math_precision() -> dict[str, Any]:
    """What the model's math runs in, read inside its forward (so inside the script's autocast
    context): the autocast dtype of the first device type with autocast on (None when off),
    PyTorch's float32 matmul precision ("high"/"medium" let matmuls use TF32 tensor cores) and
    whether cuDNN may run float32 convolutions in TF32 (PyTorch's default: it may)."""
    try:
        cudnn_tf32: bool | None = bool(torch.backends.cudnn.allow_tf32)
    except (AttributeError, RuntimeError):  # pragma: no cover - a build without the flag
        cudnn_tf32 = None
    autocast = None
    for device in ("cuda", "cpu", "xpu"):
        try:
            if torch.is_autocast_enabled(device):
                autocast = str(torch.get_autocast_dtype(device)).replace("torch.", "")
                break
        except (RuntimeError, TypeError, AttributeError):  # a device type this build does not know
            continue
    return {"autocast_dtype": autocast, "float32_matmul_precision": torch.get_float32_matmul_precision(),
            "cudnn_allow_tf32": cudnn_tf32}


def forward_flops(counts: dict[Any, int]) -> dict[str, Any]:
    """Summarise one forward's FLOPs as torch.utils.flop_counter counts them (convolutions,
    matmuls and attention, per aten op): the total and the convolutions' share, which decides
    whether TF32 settings matter to a float32 model (cuDNN convolutions and cuBLAS matmuls
    follow different switches)."""
    total = sum(int(v) for v in counts.values())
    conv = sum(int(v) for op, v in counts.items() if "conv" in str(op))
    return {"forward_flops": total, "conv_flop_share": conv / total if total else None}


class _FlopCount:
    """Counts the FLOPs of one forward pass: entered by the DDP forward pre-hook, left by the
    post-hook (torch.utils.flop_counter.FlopCounterMode). Best effort: a model the counter cannot
    trace leaves the figures unknown rather than failing the profile."""

    def __init__(self) -> None:
        self.mode: Any = None

    def start(self) -> None:
        try:
            from torch.utils.flop_counter import FlopCounterMode

            self.mode = FlopCounterMode(display=False)
            self.mode.__enter__()
        except Exception:  # noqa: BLE001 - never let the counter break the user's job
            self.mode = None

    def stop(self) -> dict[str, Any] | None:
        mode, self.mode = self.mode, None
        if mode is None:
            return None
        try:
            mode.__exit__(None, None, None)
            return forward_flops(mode.get_flop_counts().get("Global", {}))
        except Exception:  # noqa: BLE001
            return None

