"""A YAML loader that keeps line numbers and understands CloudFormation's
short-form intrinsic tags (!Ref, !GetAtt, !Sub, ...), turning each into the
long form ({"Ref": x}, {"Fn::GetAtt": [...]}, ...) the way CloudFormation does.

Mappings load as LineDict: a dict whose .lines maps each key to its 1-based
line, and whose .line is the line where the mapping starts."""

import yaml


class LineDict(dict):
    line = 0

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.lines = {}


class LineList(list):
    line = 0


class Loader(yaml.SafeLoader):
    pass


def _mapping(loader, node):
    loader.flatten_mapping(node)
    d = LineDict()
    d.line = node.start_mark.line + 1
    for k_node, v_node in node.value:
        key = loader.construct_object(k_node, deep=True)
        if key in d:
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key '{key}'", k_node.start_mark)
        d[key] = loader.construct_object(v_node, deep=True)
        d.lines[key] = k_node.start_mark.line + 1
    return d


def _sequence(loader, node):
    lst = LineList(loader.construct_object(n, deep=True) for n in node.value)
    lst.line = node.start_mark.line + 1
    return lst


Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _mapping)
Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_SEQUENCE_TAG, _sequence)

# Short form -> long form key. !Ref and !Condition keep their own names.
CFN_TAGS = {
    "Ref": "Ref", "Condition": "Condition",
    "GetAtt": "Fn::GetAtt", "Sub": "Fn::Sub", "Join": "Fn::Join", "Select": "Fn::Select",
    "If": "Fn::If", "Equals": "Fn::Equals", "FindInMap": "Fn::FindInMap", "GetAZs": "Fn::GetAZs",
    "Base64": "Fn::Base64", "Split": "Fn::Split", "ImportValue": "Fn::ImportValue",
    "Cidr": "Fn::Cidr", "Not": "Fn::Not", "And": "Fn::And", "Or": "Fn::Or",
}


def _make_tag(long_name, short):
    def construct(loader, node):
        if isinstance(node, yaml.ScalarNode):
            value = loader.construct_scalar(node)
            # !GetAtt Res.Attr is the short form of [Res, Attr].
            if short == "GetAtt":
                value = LineList(value.split(".", 1))
                value.line = node.start_mark.line + 1
        elif isinstance(node, yaml.SequenceNode):
            value = _sequence(loader, node)
        else:
            value = _mapping(loader, node)
        d = LineDict({long_name: value})
        d.line = node.start_mark.line + 1
        d.lines[long_name] = d.line
        return d
    return construct


for _short, _long in CFN_TAGS.items():
    Loader.add_constructor("!" + _short, _make_tag(_long, _short))


def load_all(text):
    return list(yaml.load_all(text, Loader=Loader))
