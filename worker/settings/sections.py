"""Sections of the settings that the host does not read itself, and the schemas their readers declare.

As in Dramatiq, a part with settings of its own (Spark's ``spark:``) declares a :class:`SectionSchema`.
The loader (:mod:`.config`) keeps such a section as given, with where each value came from.
At start, every declared section's problems are listed with the rest (:func:`problems`).
A section nothing declares is refused by name.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from dataclasses import MISSING, dataclass, field, fields
from typing import Any

from worker.settings.schema import ConfigError, ConfigErrors, Setting, raise_all, unknown


@dataclass(frozen=True, slots=True)
class Section:
    """A top-level section as given: the file's mapping with the environment's values over it.

    ``origins`` says where each key path (relative to the section; ``()`` is
    the section itself) was given: ``host.yaml:12`` or ``environment
    WORKER__spark__master``.
    """

    name: str
    values: Mapping[str, Any] = field(default_factory=dict)
    origins: Mapping[tuple[str, ...], str] = field(default_factory=dict)

    def where(self, *path: str) -> str:
        """Where the value at ``path`` was given; for a mapping given key by key (from the environment), where its
        first key was; else where the section was."""
        for candidate in (path, *(key for key in self.origins if key[: len(path)] == path), ()):
            if candidate in self.origins:
                return self.origins[candidate]
        return next(iter(self.origins.values()), "")


@dataclass(frozen=True, slots=True)
class SectionSchema:
    """The keys of one section and how each is read, declared by the part that reads it.

    ``into`` is the dataclass the values become: each :class:`Setting`'s
    ``attr`` is one of its fields, and its defaults are the section's
    (the settings reference shows them).
    """

    name: str
    keys: Mapping[str, Setting]
    into: type
    #: What the section is for, one line: refusals and the settings reference name its reader by it.
    about: str = ""

    def read(self, section: Section | None) -> dict[str, Any]:
        """The values ``section`` gives, by ``into``'s field names; ConfigErrors listing every problem, each
        naming ``<section>.<key>`` and where it was given."""
        if section is None:
            return {}
        values: dict[str, Any] = {}
        errors: list[ConfigError] = []
        for key, value in section.values.items():
            dotted = f"{self.name}.{key}"
            setting = self.keys.get(key)
            try:
                if setting is None:
                    raise ConfigError(
                        dotted, unknown(dotted, (f"{self.name}.{k}" for k in self.keys), "known keys"), section.where(key)
                    )
                values[setting.attr] = setting.read(dotted, value, section.where(key))
            except ConfigError as exc:
                errors.append(exc)
        raise_all(errors)
        return values

    def defaults(self) -> dict[str, Any]:
        """Each key's default, as ``into`` gives it, by key."""
        by_attr = {item.name: item for item in fields(self.into)}
        found = {}
        for key, setting in self.keys.items():
            item = by_attr[setting.attr]
            found[key] = item.default if item.default_factory is MISSING else item.default_factory()
        return found


def gather(
    given: Mapping[str, Any], origins: Mapping[tuple[str, ...], str], overrides: Iterable[tuple[tuple[str, ...], Any, str]]
) -> dict[str, Section]:
    """The sections ``given`` in the file (name to its mapping, or None for one whose keys are all commented out),
    with ``overrides`` from the environment over them: (key path with the section's name first, value, variable).

    ``origins`` is the file:line of every key path in the file. A key path's parts are the variable's ``__``-parts
    as they are, so that ``WORKER__spark__conf__spark.sql.shuffle.partitions`` sets one Spark property.
    """
    trees = {name: copy.deepcopy(dict(value or {})) for name, value in given.items()}
    where = {name: {path[1:]: at for path, at in origins.items() if path[0] == name} for name in given}
    for path, value, at in overrides:
        name, *keys = path
        node = trees.setdefault(name, {})
        for key in keys[:-1]:
            child = node.get(key)
            node[key] = child = child if isinstance(child, dict) else {}
            node = child
        node[keys[-1]] = value
        where.setdefault(name, {})[tuple(keys)] = at
    return {name: Section(name, tree, where[name]) for name, tree in trees.items()}


def problems(sections: Mapping[str, Section], declared: Iterable[SectionSchema], own: Iterable[str]) -> list[str]:
    """A line for each problem in a declared section, and for each section nothing declares (with what it most
    likely misspells among the declared and ``own``, the loader's own sections)."""
    schemas = {schema.name: schema for schema in declared}
    found: list[str] = []
    for name, section in sections.items():
        if name not in schemas:
            known = [*schemas, *own]
            found.append(
                str(ConfigError(name, unknown(name, known, "top-level keys read", what="section"), section.where()))
            )
    for schema in schemas.values():
        try:
            schema.read(sections.get(schema.name))
        except ConfigError as exc:
            found += [str(error) for error in (exc.errors if isinstance(exc, ConfigErrors) else [exc])]
    return found
