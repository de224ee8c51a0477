"""Validates examples/*.yaml against the committed CRDs' openAPIV3Schemas, strictly: unknown fields
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
    schemas = {}  # (group, version, kind) -> strict schema, for every committed CRD
    for path in sorted(glob.glob("crds/*.yaml")):
        crd = next(d for d in yaml.safe_load_all(open(path)) if d)
        for v in crd["spec"]["versions"]:
            key = (crd["spec"]["group"], v["name"], crd["spec"]["names"]["kind"])
            schemas[key] = strict(v["schema"]["openAPIV3Schema"])
    groups = {g for g, _, _ in schemas}
    failed = 0
    checked = set()
    for path in sorted(glob.glob("examples/*.yaml")):
        for doc in yaml.safe_load_all(open(path)):
            if not doc or doc["apiVersion"].split("/")[0] not in groups:
                continue
            group, version = doc["apiVersion"].split("/")
            schema = schemas.get((group, version, doc["kind"]))
            if schema is None:
                print(f"{path}: unknown kind {doc['kind']} in {doc['apiVersion']}")
                failed += 1
                continue
            body = {k: v for k, v in doc.items() if k not in ("apiVersion", "kind", "metadata")}
            errors = list(jsonschema.Draft7Validator(schema).iter_errors(body))
            for e in errors:
                print(f"{path}: {'/'.join(map(str, e.path))}: {e.message}")
            failed += bool(errors)
            checked.add(doc["kind"])
    print(f"validate_examples: kinds checked {sorted(checked)}, {failed} invalid")
    # Every CRD has at least one example.
    missing = {k for _, _, k in schemas} - checked
    if missing:
        print(f"validate_examples: no example of {sorted(missing)}")
    return 1 if failed or missing else 0


if __name__ == "__main__":
    sys.exit(main())
