"""Loading a local model folder (what ``save_pretrained`` writes); the hub is never used."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .errors import export_failed, usage_error


def check_model_folder(path: str) -> Path:
    """A folder with config.json, or a usage error that says what a model folder is."""
    folder = Path(path)
    if not folder.exists():
        raise usage_error(
            f"{path}: no such folder. Pass a local model folder, i.e. what "
            "model.save_pretrained(folder) writes (the hub is not used)."
        )
    if not folder.is_dir():
        raise usage_error(f"{path} is a file, not a folder. Pass the folder that holds config.json and the weights.")
    if not (folder / "config.json").is_file():
        raise usage_error(
            f"{path} has no config.json, so it is not a model folder. Write one with "
            "model.save_pretrained(folder) (or config.save_pretrained + weights) and pass that folder."
        )
    return folder


def auto_class_for(config: Any) -> Any:
    """The Auto model class that builds ``config.architectures[0]``.

    Each Auto class maps ``model_type`` to one class name; the first whose mapping names the saved
    architecture is the one that rebuilds exactly what was saved (head included). The architecture's
    own class stands in where no listed Auto class names it, and AutoModel where nothing does.
    """
    import transformers
    from transformers.models.auto import modeling_auto as ma

    candidates = [
        (transformers.AutoModelForCausalLM, ma.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES),
        (transformers.AutoModelForSeq2SeqLM, ma.MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES),
        (transformers.AutoModelForSpeechSeq2Seq, ma.MODEL_FOR_SPEECH_SEQ_2_SEQ_MAPPING_NAMES),
        (transformers.AutoModelForImageTextToText, ma.MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES),
    ]
    architectures = list(getattr(config, "architectures", None) or [])
    model_type = str(getattr(config, "model_type", ""))

    def names(value: Any) -> tuple[str, ...]:
        return tuple(value) if isinstance(value, (list, tuple)) else (value,)

    for arch in architectures:
        for auto_cls, mapping in candidates:
            if arch in names(mapping.get(model_type, ())):
                return auto_cls
        direct = getattr(transformers, arch, None)
        if isinstance(direct, type) and hasattr(direct, "from_pretrained"):
            return direct
    return transformers.AutoModel


def load_model(path: Path, attn_implementation: str | None = None) -> Any:
    """Config and weights from the local folder only (``local_files_only``: never the hub)."""
    from transformers import AutoConfig

    try:
        config = AutoConfig.from_pretrained(str(path), local_files_only=True)
    except Exception as exc:
        raise usage_error(
            f"{path}/config.json could not be read as a transformers config: {type(exc).__name__}: "
            f"{exc}. Write the folder with save_pretrained."
        ) from exc
    model_cls = auto_class_for(config)
    kwargs: dict[str, Any] = {"local_files_only": True}
    if attn_implementation:
        kwargs["attn_implementation"] = attn_implementation
    try:
        model = model_cls.from_pretrained(str(path), **kwargs)
    except Exception as exc:
        raise export_failed(
            f"could not load the model in {path} with {model_cls.__name__}: {type(exc).__name__}: "
            f"{exc}. Check that the folder holds the weights save_pretrained wrote."
        ) from exc
    return model.eval()
