"""CloudFormation as a SAM ``template.yaml`` is written: short tags read, a queue trigger's intrinsics resolved.

YAML readers refuse tags such as ``!Ref`` and ``!GetAtt``; they are read here into their long form.
:class:`Resolver` works out queue names, environment variables, parameter defaults and pseudo parameters.
What needs a deployed stack (another stack's export, a condition) is :class:`Unresolvable`, listed as a problem.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

#: The account id pseudo parameter, where no deployed stack tells it (the one every AWS emulator uses).
ACCOUNT_ID = "000000000000"


class Unresolvable(ValueError):
    """A value that only a deployed stack could give (an import, a condition, an unknown name)."""


class _TemplateLoader(yaml.SafeLoader):
    """YAML with CloudFormation's short tags, each read as its long form."""


def _short_form(loader: yaml.SafeLoader, suffix: str, node: yaml.Node) -> dict[str, Any]:
    if isinstance(node, yaml.ScalarNode):
        value: Any = loader.construct_scalar(node)
    elif isinstance(node, yaml.SequenceNode):
        value = loader.construct_sequence(node, deep=True)
    else:
        value = loader.construct_mapping(node, deep=True)  # type: ignore[arg-type]
    if suffix == "Ref":
        return {"Ref": value}
    if suffix == "GetAtt" and isinstance(value, str):  # !GetAtt Resource.Attribute
        value = value.split(".", 1)
    return {f"Fn::{suffix}": value}


_TemplateLoader.add_multi_constructor("!", _short_form)


def read_template(path: Path) -> dict[str, Any]:
    """The template at ``path`` as plain data, its short tags in their long forms. Raises ValueError."""
    try:
        data = yaml.load(path.read_text(encoding="utf-8"), Loader=_TemplateLoader)  # noqa: S506 - a SafeLoader
    except yaml.YAMLError as exc:
        raise ValueError(f"{path.name} is not YAML: {exc}") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path.name} is not a template (no mapping at its top)")
    return data


@dataclass
class Resolver:
    """Works out the values of a template's intrinsic functions that can be known before deployment."""

    template: Mapping[str, Any]
    region: str
    stack_name: str
    #: Each resource's value for ``!Ref`` / ``!GetAtt`` beyond its logical id, by the caller (a queue's name).
    names: dict[str, str] = field(default_factory=dict)
    #: A queue's URL from its name, as ``!Ref`` of an ``AWS::SQS::Queue`` gives it (CloudFormation returns the URL);
    #: None: the URL of SQS's own form in the region, with :data:`ACCOUNT_ID`.
    queue_url: Callable[[str], str] | None = None

    @property
    def resources(self) -> Mapping[str, Any]:
        return self.template.get("Resources") or {}

    def pseudo(self, name: str) -> str | None:
        return {
            "AWS::Region": self.region,
            "AWS::AccountId": ACCOUNT_ID,
            "AWS::StackName": self.stack_name,
            "AWS::Partition": "aws",
            "AWS::URLSuffix": "amazonaws.com",
            "AWS::NoValue": "",
        }.get(name)

    def ref(self, name: str) -> str:
        """``!Ref``: a parameter's value (its default), a pseudo parameter, a queue's URL (what CloudFormation returns
        for an ``AWS::SQS::Queue``, and what handlers pass as ``QueueUrl``), or another resource's name."""
        if (value := self.pseudo(name)) is not None:
            return value
        parameters = self.template.get("Parameters") or {}
        if name in parameters:
            if "Default" not in (parameters[name] or {}):
                raise Unresolvable(f"parameter {name} has no Default")
            return str(parameters[name]["Default"])
        if name in self.resources:
            if (self.resources[name] or {}).get("Type") == "AWS::SQS::Queue":
                return self.url(self.names.get(name, name))
            return self.names.get(name, name)
        raise Unresolvable(f"!Ref {name} names no parameter or resource")

    def url(self, queue: str) -> str:
        """The URL of the queue named ``queue``."""
        if self.queue_url is not None:
            return self.queue_url(queue)
        return f"https://sqs.{self.region}.amazonaws.com/{ACCOUNT_ID}/{queue}"

    def get_att(self, resource: str, attribute: str) -> str:
        """``!GetAtt``: an SQS queue's ``Arn``, ``QueueName`` or ``QueueUrl`` (as ``!Ref`` gives it)."""
        if resource not in self.resources:
            raise Unresolvable(f"!GetAtt {resource}.{attribute} names no resource")
        name = self.names.get(resource, resource)
        if attribute == "Arn":
            return f"arn:aws:sqs:{self.region}:{ACCOUNT_ID}:{name}"
        if attribute == "QueueName":
            return name
        if attribute == "QueueUrl":
            return self.url(name)
        raise Unresolvable(f"!GetAtt {resource}.{attribute} is known only to a deployed stack")

    def resolve(self, value: Any) -> Any:
        """``value`` with every intrinsic function in it worked out. Raises Unresolvable."""
        if isinstance(value, list):
            return [self.resolve(item) for item in value]
        if not isinstance(value, dict):
            return value
        if len(value) == 1:
            ((key, argument),) = value.items()
            if key == "Ref":
                return self.ref(str(argument))
            if key == "Fn::GetAtt":
                parts = argument if isinstance(argument, list) else str(argument).split(".", 1)
                return self.get_att(str(parts[0]), str(self.resolve(parts[1])))
            if key == "Fn::Sub":
                return self._sub(argument)
            if key == "Fn::Join":
                separator, items = argument
                return str(separator).join(str(item) for item in self.resolve(items))
            if key == "Fn::Select":
                index, items = argument
                return self.resolve(items)[int(self.resolve(index))]
            if key.startswith("Fn::") or key == "Condition":
                raise Unresolvable(f"{key} is known only to a deployed stack")
        return {key: self.resolve(item) for key, item in value.items()}

    def _sub(self, argument: Any) -> str:
        text, variables = (argument[0], argument[1]) if isinstance(argument, list) else (argument, {})
        variables = {name: self.resolve(given) for name, given in (variables or {}).items()}

        def one(match: re.Match[str]) -> str:
            name = match.group(1)
            if name.startswith("!"):  # ${!Literal} is written out as ${Literal}
                return "${" + name[1:] + "}"
            if name in variables:
                return str(variables[name])
            if "." in name and not name.startswith("AWS::"):
                resource, attribute = name.split(".", 1)
                return self.get_att(resource, attribute)
            return self.ref(name)

        return re.sub(r"\$\{([^}]+)\}", one, str(text))
