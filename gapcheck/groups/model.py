"""``ModelSource``: where the model comes from (a checkpoint, a factory, or both) and how strictly it loads."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Optional

from gapcheck.errors import UsageError
from gapcheck.groups.base import Group, Opt

_MAX_KEY = 1000  # characters of --state-dict-key (a key of a checkpoint's dict, not a document)


@dataclass(frozen=True)
class ModelSource(Group):
    checkpoint: Path | None = None
    factory: str | None = None
    unsafe_pickle: bool = False
    strict: bool = True
    state_dict_key: str | None = None

    OPTIONS: ClassVar[tuple[Opt, ...]] = (
        Opt("checkpoint", "--checkpoint", "State dict (.pt/.pth/.safetensors) or TorchScript archive.", Optional[Path]),
        Opt("factory", "--model", "Factory building the model: 'pkg.module:callable' or 'path/file.py:callable'."),
        Opt("unsafe_pickle", "--unsafe-pickle", "Allow loading a full pickled module (runs code from the file!).", bool),
        # --non-strict sets strict=False (the CLI inverts flags whose field is the positive form)
        Opt("strict", "--non-strict", "Load a checkpoint whose keys do not all match (the mismatch is reported).", bool),
        Opt("state_dict_key", "--state-dict-key", "The checkpoint's top-level key holding the weights, e.g. "
            "state_dict_ema (default: state_dict, model_state_dict, model or module, the first present).",
            metavar="KEY"),
    )

    @property
    def given(self) -> bool:
        return self.checkpoint is not None or self.factory is not None

    def check(self) -> None:
        if self.checkpoint is not None and Path(self.checkpoint).is_dir():
            raise UsageError(f"checkpoint {self.checkpoint} is a directory", parameter="checkpoint")
        key = self.state_dict_key
        if key is not None and (not isinstance(key, str) or not key or len(key) > _MAX_KEY
                                or not key.isprintable()):
            raise UsageError(f"the state dict key must be 1 to {_MAX_KEY} printable characters",
                             parameter="state_dict_key")

    def require(self) -> ModelSource:
        if not self.given:
            raise UsageError("give --checkpoint (a state dict needs --model too) or --model module:callable")
        return self

    def load(self) -> Any:
        """The loaded model (``gapcheck.model.loading.LoadedModel``: module, kind, key report)."""
        from gapcheck.model.loading import load_model

        self.require()
        return load_model(self.checkpoint, self.factory, unsafe_pickle=self.unsafe_pickle, strict=self.strict,
                          state_dict_key=self.state_dict_key)

    def resolved_factory(self) -> Any:
        """The factory callable (the export cache keys by its source), or None."""
        if not isinstance(self.factory, str):
            return self.factory
        from gapcheck.model.factory import resolve_callable

        return resolve_callable(self.factory)
