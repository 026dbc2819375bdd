"""Reversible workarounds for upstream export bugs: the registries, then the patches, one module per concern.

Importing this package registers every built-in patch.
"""

from . import (  # noqa: F401  (register their patches)
    attention,
    contiguity,
    delegate_attention,
    delegate_heads,
    grad_mode,
    module_to,
    moe,
    multimodal,
    position_lists,
    program_load,
    repeat_kv,
    rotate_half,
    sliding_window,
    ssm,
    vision,
)
from .registry import (
    FX_NODE_FIXES,
    FX_PROGRAM_FIXES,
    PATCHES,
    apply_fx_node_fixes,
    apply_fx_program_fixes,
    apply_patches,
    patch_attribute,
    register_fx_node_fix,
    register_fx_program_fix,
    register_patch,
)

__all__ = [
    "PATCHES",
    "FX_NODE_FIXES",
    "FX_PROGRAM_FIXES",
    "register_patch",
    "register_fx_node_fix",
    "register_fx_program_fix",
    "apply_patches",
    "apply_fx_node_fixes",
    "apply_fx_program_fixes",
    "patch_attribute",
]
