"""Typed, versioned artifacts: the one base every JSON file viasd-adapt writes derives from.

A mask, a tuned-settings file, a bench or search report is read back by other commands, other
versions of viasd-adapt and people. Each is a pydantic model deriving from :class:`Artifact`, so:

* the file says what it is (``format``) and which schema wrote it (``version``);
* a file of an unknown, newer ``version`` is refused by name (not half read);
* a bad field is refused with a sentence naming the file and the field
  (``tuned.json: field 'points.0.ll_drop': Input should be a valid number``), never a stack trace;
* older files (an earlier ``version``, or fields added since) still load: every field added after
  version 1 has a default.

Subclasses set :attr:`Artifact.FORMAT`, :attr:`Artifact.VERSION` and :attr:`Artifact.WHAT`, and
read with :func:`load_artifact` (or :meth:`Artifact.from_json` for data already parsed).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Annotated, Any, ClassVar, TypeVar

from pydantic import BaseModel, BeforeValidator, ConfigDict, PlainSerializer, ValidationError, model_serializer

from viasd_adapt.errors import ConfigError
from viasd_adapt.io import read_text, write_json
from viasd_adapt.core.settings import TierSettings

A = TypeVar("A", bound="Artifact")


class Record(BaseModel):
    """A typed part of an artifact (a measured point, a budget): extra fields kept, so a file
    written by a newer revision round-trips. Dumps every field, defaults included."""

    model_config = ConfigDict(extra="allow", populate_by_name=True, arbitrary_types_allowed=True)


class SparseRecord(Record):
    """A :class:`Record` that writes back only the fields it was given (plus extras), not a default
    for every field it could have had: for parts whose files are often partial (a hand-written
    tuned point with only ``settings``, an empty budget), so that such a file keeps its shape."""

    @model_serializer(mode="wrap")
    def _as_written(self, handler):
        data = handler(self)
        kept = set(self.model_fields_set) | set(self.model_extra or {})
        return {key: value for key, value in data.items() if key in kept}


def _tier_settings(value: Any) -> TierSettings:
    """A :class:`TierSettings` from its JSON object; the message says what is wrong with which setting."""
    if isinstance(value, TierSettings):
        return value
    if not isinstance(value, dict):
        raise ValueError("tier settings must be a JSON object")
    try:
        return TierSettings(**value)
    except TypeError as err:
        raise ValueError(f"has settings this version does not know: {err}") from None
    except ConfigError as err:
        raise ValueError(f"a bad setting: {err} (fix the file or write it again)") from None


#: A :class:`TierSettings` field of an artifact: a JSON object on disk, validated by TierSettings itself.
TierSettingsField = Annotated[TierSettings, BeforeValidator(_tier_settings),
                              PlainSerializer(lambda settings: settings.to_dict(), return_type=dict)]


class Artifact(BaseModel):
    """Base of every on-disk artifact: a ``format`` tag, a schema ``version``, typed fields.

    Unknown extra fields are kept (``extra="allow"``) so that a file written by a newer minor
    revision of the same version round-trips instead of losing what this version does not know.
    """

    model_config = ConfigDict(extra="allow", validate_assignment=False, populate_by_name=True, arbitrary_types_allowed=True)

    #: The ``format`` tag every file of this kind carries, e.g. ``"viasd-adapt/tuned-settings"``.
    FORMAT: ClassVar[str] = ""
    #: The newest schema version this code reads and writes.
    VERSION: ClassVar[int] = 1
    #: How errors name a file of this kind ("tuned-settings file", "mask file", ...).
    WHAT: ClassVar[str] = "artifact"
    #: Whether files of this kind were once written without a ``format`` tag (``build_report.json``,
    #: ``viasd tune --json``, ``pair.json``): such a file is read as version 1 of this format.
    READS_UNTAGGED: ClassVar[bool] = False

    format: str = ""
    version: int = 1

    def model_post_init(self, _context: Any) -> None:
        # Written files always say what they are, whatever the caller set.
        if not self.format:
            object.__setattr__(self, "format", self.FORMAT)

    # ------------------------------------------------------------------ writing
    def to_json(self) -> dict[str, Any]:
        """The JSON form written to disk (plain dicts, lists, numbers, strings)."""
        data = self.model_dump(mode="json")
        data["format"] = self.FORMAT
        data["version"] = self.VERSION
        return data

    def save(self, path: str | os.PathLike) -> Path:
        """Writes the artifact atomically (a failed write leaves an existing file as it was)."""
        return write_json(path, self.to_json(), what=self.WHAT)

    # ------------------------------------------------------------------ reading
    @classmethod
    def check_header(cls, data: Any, source: str) -> None:
        """Refuses data that is not this kind of artifact, or of a version this code does not read.

        Called before the fields are validated, so a future file is refused for its version (what
        the user can act on), not for the first field that changed meaning."""
        if cls.READS_UNTAGGED and isinstance(data, dict) and "format" not in data:
            data = {**data, "format": cls.FORMAT}
        if not isinstance(data, dict) or data.get("format") != cls.FORMAT:
            raise ConfigError(f"{source} is not a viasd-adapt {cls.WHAT} (missing or wrong 'format'; "
                              f"expected {cls.FORMAT!r})")
        version = data.get("version", 1)
        if isinstance(version, bool) or not isinstance(version, int) or not 1 <= version <= cls.VERSION:
            raise ConfigError(f"{source}: 'version' {version!r} is not one this viasd-adapt reads "
                              f"(1 to {cls.VERSION}); upgrade viasd-adapt or write the file again")

    @classmethod
    def from_json(cls: type[A], data: Any, source: str | None = None) -> A:
        """Parses already-decoded JSON, with errors naming ``source`` and the field."""
        source = source or cls.WHAT
        cls.check_header(data, source)
        return validate(cls, data, source)

    @classmethod
    def load(cls: type[A], path: str | os.PathLike) -> A:
        return load_artifact(path, cls)


def validate(model: type[BaseModel], data: Any, source: str) -> Any:
    """``model.model_validate(data)``, with a :class:`ConfigError` naming ``source`` and each bad
    field (``"tuned.json: field 'points.0.ll_drop': Input should be a valid number, got 'x'"``)."""
    try:
        return model.model_validate(data)
    except ValidationError as err:
        raise ConfigError(f"{source}: " + describe_errors(err)) from None


def describe_errors(err: ValidationError, limit: int = 4) -> str:
    """One line naming every bad field (at most ``limit``) of a pydantic ValidationError."""
    parts = []
    for problem in err.errors()[:limit]:
        where = ".".join(str(part) for part in problem.get("loc", ())) or "(top level)"
        message = problem.get("msg", "invalid")
        # pydantic prefixes custom errors with "Value error, "; the field name already says what.
        message = message.removeprefix("Value error, ")
        given = problem.get("input")
        custom = problem.get("type") == "value_error"  # our own validators' messages say what they got
        shown = "" if custom or isinstance(given, (dict, list)) or problem.get("type") == "missing" else f", got {given!r}"
        # a message that already names its field ("'ratio' 0.3 disagrees with 'mask'") is kept as is
        named = message.startswith(f"'{where}'") or custom and message.startswith("'")
        parts.append(f"{message}" if named else f"field '{where}': {message}{shown}")
    more = len(err.errors()) - limit
    if more > 0:
        parts.append(f"and {more} more")
    return "; ".join(parts)


def read_json(path: str | os.PathLike, what: str) -> Any:
    """The decoded JSON of ``path``, with one clear error for a missing, unreadable or invalid file."""
    text = read_text(path, what)
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        raise ConfigError(f"{what} {path} is not valid JSON: {err}") from None


def load_artifact(path: str | os.PathLike, model: type[A]) -> A:
    """Reads ``path`` as a ``model`` artifact: its format and version checked, each field typed,
    any error naming the file and the field."""
    data = read_json(path, model.WHAT)
    return model.from_json(data, source=str(path))


__all__ = ["Artifact", "Record", "SparseRecord", "TierSettingsField", "describe_errors", "load_artifact", "read_json", "validate"]
