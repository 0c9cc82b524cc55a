"""The typed part of an update's ``metadata``: the keys attacks read, checked once where an update is made.

``metadata`` is free-form (client id, defense, rounds), but what the server is told beside the update
and attacks use — ``labels``, ``label_counts``, ``batch_labels`` (Dimitrov et al. Table 1 / Table 8 threat
models), ``model`` (the zoo name and seed that ``fedleak attack`` rebuilds), ``client_index`` — has a type.
A string where an attack expects label indices (``"labels": "abc"`` in an edited ``update.json``) is one
:class:`~fedleak.errors.FedleakError` line naming the key, through the strict model of
:mod:`fedleak.config.boundary`, not a ``TypeError`` inside an attack.
"""

from __future__ import annotations

from typing import Annotated, Optional

from pydantic import BaseModel, ConfigDict, Field

from ..config.boundary import MAX_INT, MAX_SEED, validate

_Label = Annotated[int, Field(strict=True, ge=0, le=MAX_INT)]


class _ModelMeta(BaseModel):
    model_config = ConfigDict(strict=True, extra="allow")
    name: Optional[Annotated[str, Field(min_length=1, max_length=10_000)]] = None
    seed: Optional[Annotated[int, Field(strict=True, ge=0, le=MAX_SEED)]] = None


class UpdateMetadata(BaseModel):
    """The keys of ``Update.metadata`` that attacks and the CLI read (others pass unchecked)."""

    model_config = ConfigDict(strict=True, extra="allow")
    labels: Optional[list[_Label]] = None
    label_counts: Optional[list[_Label]] = None
    batch_labels: Optional[list[list[list[_Label]]]] = None
    model: Optional[_ModelMeta] = None
    spec: Optional[dict] = None
    client_index: Optional[Annotated[int, Field(strict=True, ge=0, le=MAX_INT)]] = None


def check_metadata(metadata: dict, where: str = "Update.metadata") -> None:
    """Raise one line naming the key if a known metadata key has the wrong type."""
    validate(UpdateMetadata, metadata, where=where)
