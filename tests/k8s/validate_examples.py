"""Validates examples/*.yaml against the committed CRD's openAPIV3Schema, strictly: unknown fields
are errors (additionalProperties: false wherever the schema lists properties), as the API server's
strict field validation does. CEL rules are checked by the API server part of e2e.sh."""
import copy
import glob
import sys

import jsonschema
import yaml


def strict(schema):
    s = copy.deepcopy(schema)

    def walk(node):
        if isinstance(node, dict):
            if "properties" in node and "additionalProperties" not in node \
                    and not node.get("x-kubernetes-preserve-unknown-fields"):
                node["additionalProperties"] = False
            if node.get("x-kubernetes-int-or-string"):
                node.pop("type", None)
                node["anyOf"] = [{"type": "integer"}, {"type": "string"}]
            for v in node.values():
                walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)

    walk(s)
    return s


def main():
    crd = next(d for d in yaml.safe_load_all(open("crds/messagequeueclusters.conveyor.dev.yaml")) if d)
    kind = crd["spec"]["names"]["kind"]
    group = crd["spec"]["group"]
    versions = {v["name"]: strict(v["schema"]["openAPIV3Schema"]) for v in crd["spec"]["versions"]}
    failed = 0
    checked = 0
    for path in sorted(glob.glob("examples/*.yaml")):
        for doc in yaml.safe_load_all(open(path)):
            if not doc or doc.get("kind") != kind:
                continue
            gv = doc["apiVersion"].split("/")
            if gv[0] != group or gv[1] not in versions:
                print(f"{path}: unknown apiVersion {doc['apiVersion']}")
                failed += 1
                continue
            body = {k: v for k, v in doc.items() if k not in ("apiVersion", "kind", "metadata")}
            errors = list(jsonschema.Draft7Validator(versions[gv[1]]).iter_errors(body))
            for e in errors:
                print(f"{path}: {'/'.join(map(str, e.path))}: {e.message}")
            failed += bool(errors)
            checked += 1
    print(f"validate_examples: {checked} checked, {failed} invalid")
    return 1 if failed or not checked else 0


if __name__ == "__main__":
    sys.exit(main())
