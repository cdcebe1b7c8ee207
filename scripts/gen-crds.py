#!/usr/bin/env python3
"""Write the CustomResourceDefinitions kvrs needs from KubeVirt's published OpenAPI document.

Usage: scripts/gen-crds.py [--check] SWAGGER_JSON OUT_DIR

SWAGGER_JSON is KubeVirt v1.9.0's `api/openapi-spec/swagger.json` (the same document
scripts/gen-api-types.py reads), for example from a clone of kubevirt/kubevirt:

    git -C kubevirt show v1.9.0:api/openapi-spec/swagger.json > /tmp/kubevirt-swagger.json
    scripts/gen-crds.py /tmp/kubevirt-swagger.json bins/deploy/crds

One `apiextensions.k8s.io/v1` CRD per file, `OUT_DIR/<plural>.<group>.yaml`. The CRD facts
(names, short names, categories, scope, versions, subresources, printer columns) are those
virt-operator v1.9.0 installs; the validation schema is the swagger definition of the kind with
every `$ref` resolved, turned into a structural schema:

- the root `metadata` is `type: object`; an embedded ObjectMeta (a template's metadata) is a
  free-form object, as the apiserver does not validate embedded metadata anyway;
- Quantity and IntOrString (and any `[string, integer|number]` type) become
  `x-kubernetes-int-or-string` with the `anyOf: [integer, string]` form;
- a `[T, "null"]` type becomes `type: T` plus `nullable: true`;
- RawExtension-like free-form objects and recursive types keep unknown fields;
- swagger defaults are dropped (they are openapi-gen's zero values, and the apiserver would
  apply them), so are the patch-strategy extensions CRDs do not know; a `listType=map` whose
  keys are not all required falls back to no list type, since the apiserver refuses it;
- descriptions are dropped below the root to keep each file well under the 256 KiB that
  client-side `kubectl apply` can store in its last-applied annotation.

The output is deterministic: keys sorted, lists in the swagger's order. Every schema is checked
against the structural-schema rules before anything is written; `--check` additionally parses
the written files back with PyYAML (when installed) and compares them with what was generated.
Python 3 standard library only.
"""
import hashlib
import json
import os
import re
import sys

KUBEVIRT_VERSION = "v1.9.0"
# sha256 of KubeVirt v1.9.0's api/openapi-spec/swagger.json; a different document is accepted
# (with a warning) and named in every file's header, so the committed files say what made them.
SWAGGER_SHA256 = "2c12b9c092941cff4dddabc65567e44a42c70d6b6c8a70d1c2a644f4960743c5"

META = "k8s.io.apimachinery.pkg.apis.meta.v1."
QUANTITY = "k8s.io.apimachinery.pkg.api.resource.Quantity"
INT_OR_STRING = "k8s.io.apimachinery.pkg.util.intstr.IntOrString"
OBJECT_META = META + "ObjectMeta"
# Definitions whose JSON is arbitrary: kept as objects that preserve unknown fields.
FREE_FORM = {
    "k8s.io.apimachinery.pkg.runtime.RawExtension",
    META + "FieldsV1",
    "k8s.io.apiextensions-apiserver.pkg.apis.apiextensions.v1.JSON",
    "k8s.io.apiextensions-apiserver.pkg.apis.apiextensions.v1.JSONSchemaProps",
}
# The pattern Kubernetes' own CRD generator puts on quantities (resource.Quantity's syntax).
QUANTITY_PATTERN = (
    r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?"
    r"(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$"
)
SCALARS = {"string", "integer", "number", "boolean"}
# Schema keywords carried over from the swagger as they are.
KEEP = ("enum", "format", "maxItems", "maxLength", "maximum", "minItems", "minLength", "minimum",
        "nullable", "pattern")

# kubevirt.io serves v1 (storage) and the deprecated v1alpha3 with the same schema.
CORE_VERSIONS = [
    {"name": "v1", "served": True, "storage": True},
    {"name": "v1alpha3", "served": True, "storage": False, "deprecated": True,
     "deprecationWarning":
         "kubevirt.io/v1alpha3 is now deprecated and will be removed in a future release."},
]
INSTANCETYPE_VERSIONS = [{"name": "v1beta1", "served": True, "storage": True}]


def column(name, typ, path, description=None, priority=None):
    c = {"name": name, "type": typ, "jsonPath": path}
    if description:
        c["description"] = description
    if priority:
        c["priority"] = priority
    return c


AGE = column("Age", "date", ".metadata.creationTimestamp")
PHASE = column("Phase", "string", ".status.phase")


def ready(path_type):
    return ".status.conditions[?(@.type=='%s')].status" % path_type


# What virt-operator v1.9.0 installs for each kind (pkg/virt-operator/resource/generate/
# components/crds.go). `status`: whether the version has the status subresource; the VMI has
# none, so its status is written through the main resource.
CRDS = [
    {
        "definition": "v1.VirtualMachine", "group": "kubevirt.io", "kind": "VirtualMachine",
        "plural": "virtualmachines", "singular": "virtualmachine", "shortNames": ["vm", "vms"],
        "categories": ["all"], "scope": "Namespaced", "versions": CORE_VERSIONS, "status": True,
        "columns": [AGE,
                    column("Status", "string", ".status.printableStatus", "Human Readable Status"),
                    column("Ready", "string", ready("Ready"))],
    },
    {
        "definition": "v1.VirtualMachineInstance", "group": "kubevirt.io",
        "kind": "VirtualMachineInstance", "plural": "virtualmachineinstances",
        "singular": "virtualmachineinstance", "shortNames": ["vmi", "vmis"],
        "categories": ["all"], "scope": "Namespaced", "versions": CORE_VERSIONS, "status": False,
        "columns": [AGE, PHASE,
                    column("IP", "string", ".status.interfaces[0].ipAddress"),
                    column("NodeName", "string", ".status.nodeName"),
                    column("Ready", "string", ready("Ready")),
                    column("Live-Migratable", "string", ready("LiveMigratable"), priority=1),
                    column("Paused", "string", ready("Paused"), priority=1)],
    },
    {
        "definition": "v1.VirtualMachineInstanceMigration", "group": "kubevirt.io",
        "kind": "VirtualMachineInstanceMigration", "plural": "virtualmachineinstancemigrations",
        "singular": "virtualmachineinstancemigration", "shortNames": ["vmim", "vmims"],
        "categories": ["all"], "scope": "Namespaced", "versions": CORE_VERSIONS, "status": True,
        "columns": [column("Phase", "string", ".status.phase",
                           "The current phase of VM instance migration"),
                    column("VMI", "string", ".spec.vmiName",
                           "The name of the VMI to perform the migration on")],
    },
    {
        "definition": "v1.KubeVirt", "group": "kubevirt.io", "kind": "KubeVirt",
        "plural": "kubevirts", "singular": "kubevirt", "shortNames": ["kv", "kvs"],
        "categories": ["all"], "scope": "Namespaced", "versions": CORE_VERSIONS, "status": True,
        "columns": [AGE, PHASE], "labels": {"operator.kubevirt.io": ""},
    },
    {
        "definition": "v1beta1.VirtualMachineInstancetype", "group": "instancetype.kubevirt.io",
        "kind": "VirtualMachineInstancetype", "plural": "virtualmachineinstancetypes",
        "singular": "virtualmachineinstancetype",
        "shortNames": ["vminstancetype", "vminstancetypes", "vmf", "vmfs"],
        "categories": ["all"], "scope": "Namespaced", "versions": INSTANCETYPE_VERSIONS,
        "status": False, "conversionNone": True,
    },
    {
        "definition": "v1beta1.VirtualMachineClusterInstancetype",
        "group": "instancetype.kubevirt.io", "kind": "VirtualMachineClusterInstancetype",
        "plural": "virtualmachineclusterinstancetypes",
        "singular": "virtualmachineclusterinstancetype",
        "shortNames": ["vmclusterinstancetype", "vmclusterinstancetypes", "vmcf", "vmcfs"],
        "scope": "Cluster", "versions": INSTANCETYPE_VERSIONS, "status": False,
        "conversionNone": True,
    },
    {
        "definition": "v1beta1.VirtualMachinePreference", "group": "instancetype.kubevirt.io",
        "kind": "VirtualMachinePreference", "plural": "virtualmachinepreferences",
        "singular": "virtualmachinepreference",
        "shortNames": ["vmpref", "vmprefs", "vmp", "vmps"],
        "categories": ["all"], "scope": "Namespaced", "versions": INSTANCETYPE_VERSIONS,
        "status": False, "conversionNone": True,
    },
    {
        "definition": "v1beta1.VirtualMachineClusterPreference",
        "group": "instancetype.kubevirt.io", "kind": "VirtualMachineClusterPreference",
        "plural": "virtualmachineclusterpreferences",
        "singular": "virtualmachineclusterpreference", "shortNames": ["vmcp", "vmcps"],
        "scope": "Cluster", "versions": INSTANCETYPE_VERSIONS, "status": False,
        "conversionNone": True,
    },
    {
        # Read by the migration controller (a VMI's migration configuration); no short names
        # or categories, as virt-operator installs it.
        "definition": "v1alpha1.MigrationPolicy", "group": "migrations.kubevirt.io",
        "kind": "MigrationPolicy", "plural": "migrationpolicies", "singular": "migrationpolicy",
        "scope": "Cluster", "versions": [{"name": "v1alpha1", "served": True, "storage": True}],
        "status": True,
    },
]


# --- swagger definition -> structural schema ---------------------------------------------------

def int_or_string(quantity=False):
    s = {"anyOf": [{"type": "integer"}, {"type": "string"}], "x-kubernetes-int-or-string": True}
    if quantity:
        s["pattern"] = QUANTITY_PATTERN
    return s


def free_form():
    return {"type": "object", "x-kubernetes-preserve-unknown-fields": True}


def first_sentence(text):
    text = " ".join(text.split())
    m = re.match(r"(.+?[.!?])(\s|$)", text)
    return m.group(1) if m else text


class Converter:
    def __init__(self, definitions):
        self.defs = definitions
        self.notes = []  # what was changed from the swagger beyond the routine, for the log

    def ref(self, node, stack, path):
        name = node["$ref"].rsplit("/", 1)[-1]
        if name == QUANTITY:
            return int_or_string(quantity=True)
        if name == INT_OR_STRING:
            return int_or_string()
        if name == OBJECT_META:
            # An embedded object's metadata (the root's is handled by the caller).
            return dict(free_form(), nullable=True)
        if name in FREE_FORM:
            return free_form()
        if name in stack:
            self.notes.append("%s: recursive %s cut (keeps unknown fields)" % (path, name))
            return free_form()
        if name not in self.defs:
            raise SystemExit("gen-crds: %s: $ref to unknown definition %s" % (path, name))
        return self.schema(self.defs[name], stack + (name,), path)

    def schema(self, node, stack, path):
        if "$ref" in node:
            return self.ref(node, stack, path)
        out = {k: node[k] for k in KEEP if k in node}
        types = node.get("type")
        if isinstance(types, list):
            rest = [t for t in types if t != "null"]
            if "null" in types:
                out["nullable"] = True
            if "string" in rest and ("integer" in rest or "number" in rest):
                out.pop("format", None)
                out.update(int_or_string())
                return out
            if len(rest) != 1:
                raise SystemExit("gen-crds: %s: cannot express type %s" % (path, types))
            types = rest[0]
        if types is None:
            if "properties" in node or "additionalProperties" in node:
                types = "object"
            else:
                return dict(out, **free_form())
        if node.get("format") == "int-or-string":
            out.pop("format", None)
            out.update(int_or_string())
            return out
        out["type"] = types
        if types == "object":
            props = node.get("properties")
            extra = node.get("additionalProperties")
            if props:
                out["properties"] = {k: self.schema(v, stack, path + "." + k)
                                     for k, v in props.items()}
                required = [r for r in node.get("required", []) if r in props]
                if required:
                    out["required"] = sorted(set(required))
                if extra not in (None, False):
                    self.notes.append("%s: additionalProperties beside properties dropped" % path)
            elif isinstance(extra, dict) and extra:
                out["additionalProperties"] = self.schema(extra, stack, path + ".*")
            elif extra is True or extra == {}:
                out["x-kubernetes-preserve-unknown-fields"] = True
            # else: an empty struct (`bridge: {}`), a plain object with nothing inside.
            if node.get("x-kubernetes-map-type") in ("atomic", "granular"):
                out["x-kubernetes-map-type"] = node["x-kubernetes-map-type"]
        elif types == "array":
            items = node.get("items")
            out["items"] = self.schema(items, stack, path + "[]") if items else free_form()
            self.list_type(node, out, path)
        return out

    def list_type(self, node, out, path):
        kind = node.get("x-kubernetes-list-type")
        if kind is None:
            return
        items = out["items"]
        if kind == "atomic":
            out["x-kubernetes-list-type"] = kind
        elif kind == "set":
            if items.get("type") in SCALARS and not items.get("nullable"):
                out["x-kubernetes-list-type"] = kind
            else:
                self.notes.append("%s: listType=set on non-scalar items dropped" % path)
        elif kind == "map":
            keys = node.get("x-kubernetes-list-map-keys") or []
            props = items.get("properties", {})
            ok = (items.get("type") == "object" and keys and not items.get("nullable")
                  and all(k in items.get("required", []) and props.get(k, {}).get("type")
                          in SCALARS for k in keys))
            if ok:
                out["x-kubernetes-list-type"] = kind
                out["x-kubernetes-list-map-keys"] = list(keys)
            else:
                self.notes.append("%s: listType=map on keys %s that are not all required; "
                                  "list type dropped" % (path, keys))

    def root(self, name):
        node = self.defs[name]
        s = self.schema(node, (name,), name)
        s["properties"]["metadata"] = {"type": "object"}
        if node.get("description"):
            s["description"] = first_sentence(node["description"])
        return s


# --- structural-schema check (what the apiserver would refuse) ---------------------------------

def structural_errors(s, path, root=True):
    errs = []
    if not isinstance(s, dict):
        return ["%s: not a schema object" % path]
    if "$ref" in s:
        errs.append("%s: $ref" % path)
    ios = s.get("x-kubernetes-int-or-string") is True
    puf = s.get("x-kubernetes-preserve-unknown-fields")
    if puf is not None and puf is not True:
        errs.append("%s: x-kubernetes-preserve-unknown-fields must be true" % path)
    if ios:
        if "type" in s:
            errs.append("%s: int-or-string with a type" % path)
        if s.get("anyOf") != [{"type": "integer"}, {"type": "string"}]:
            errs.append("%s: int-or-string without anyOf [integer, string]" % path)
    elif "type" not in s and not puf:
        errs.append("%s: no type" % path)
    elif "anyOf" in s or "allOf" in s or "oneOf" in s or "not" in s:
        errs.append("%s: logical junctor outside int-or-string" % path)
    if "type" in s and s["type"] not in SCALARS | {"object", "array"}:
        errs.append("%s: bad type %r" % (path, s["type"]))
    if "properties" in s and "additionalProperties" in s:
        errs.append("%s: both properties and additionalProperties" % path)
    if ("properties" in s or "additionalProperties" in s) and s.get("type") != "object":
        errs.append("%s: properties on a non-object" % path)
    if "items" in s and s.get("type") != "array":
        errs.append("%s: items on a non-array" % path)
    if s.get("type") == "array" and "items" not in s:
        errs.append("%s: array without items" % path)
    if "default" in s:
        errs.append("%s: default" % path)
    for r in s.get("required", []):
        if r not in s.get("properties", {}):
            errs.append("%s: required %s is not a property" % (path, r))
    lt = s.get("x-kubernetes-list-type")
    if lt is not None:
        items = s.get("items", {})
        if lt not in ("atomic", "set", "map"):
            errs.append("%s: list type %r" % (path, lt))
        if lt == "set" and items.get("type") not in SCALARS:
            errs.append("%s: set of non-scalars" % path)
        if lt == "map":
            keys = s.get("x-kubernetes-list-map-keys") or []
            if not keys or items.get("type") != "object":
                errs.append("%s: list map without keys or object items" % path)
            for k in keys:
                if k not in items.get("required", []):
                    errs.append("%s: list map key %s not required" % (path, k))
    elif "x-kubernetes-list-map-keys" in s:
        errs.append("%s: list map keys without listType=map" % path)
    if root:
        meta = s.get("properties", {}).get("metadata")
        if meta != {"type": "object"}:
            errs.append("%s.metadata: root metadata must be just type: object" % path)
        if s.get("type") != "object":
            errs.append("%s: root must be an object" % path)
    for k, v in s.get("properties", {}).items():
        errs += structural_errors(v, path + "." + k, False)
    if isinstance(s.get("additionalProperties"), dict):
        errs += structural_errors(s["additionalProperties"], path + ".*", False)
    if "items" in s:
        errs += structural_errors(s["items"], path + "[]", False)
    return errs


# --- CRD objects --------------------------------------------------------------------------------

def crd(spec, schema):
    versions = []
    for v in spec["versions"]:
        version = dict(v)
        version["schema"] = {"openAPIV3Schema": schema}
        if spec.get("columns"):
            version["additionalPrinterColumns"] = spec["columns"]
        if spec["status"]:
            version["subresources"] = {"status": {}}
        versions.append(version)
    names = {"kind": spec["kind"], "listKind": spec["kind"] + "List", "plural": spec["plural"],
             "singular": spec["singular"]}
    if spec.get("shortNames"):
        names["shortNames"] = spec["shortNames"]
    if spec.get("categories"):
        names["categories"] = spec["categories"]
    body = {"group": spec["group"], "names": names, "scope": spec["scope"],
            "versions": versions}
    if spec.get("conversionNone"):
        body["conversion"] = {"strategy": "None"}
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "%s.%s" % (spec["plural"], spec["group"]),
                     "labels": spec.get("labels", {"kubevirt.io": ""})},
        "spec": body,
    }


# --- YAML writer (block style, keys sorted, strings quoted unless plainly safe) -----------------

PLAIN = re.compile(r"^[A-Za-z_][A-Za-z0-9_./-]*$")
RESERVED = {"y", "yes", "n", "no", "true", "false", "on", "off", "null"}


def scalar(v):
    if v is True:
        return "true"
    if v is False:
        return "false"
    if v is None:
        return "null"
    if isinstance(v, (int, float)):
        return json.dumps(v)
    if PLAIN.match(v) and v.lower() not in RESERVED:
        return v
    return json.dumps(v)


def inline(v):
    if isinstance(v, dict) and not v:
        return "{}"
    if isinstance(v, list) and not v:
        return "[]"
    if isinstance(v, (dict, list)):
        return None
    return scalar(v)


def block(v, ind):
    pad = " " * ind
    lines = []
    if isinstance(v, dict):
        for k in sorted(v):
            one = inline(v[k])
            if one is not None:
                lines.append("%s%s: %s" % (pad, scalar(k), one))
            elif isinstance(v[k], dict):
                lines.append("%s%s:" % (pad, scalar(k)))
                lines += block(v[k], ind + 2)
            else:
                lines.append("%s%s:" % (pad, scalar(k)))
                lines += block(v[k], ind)
    else:
        for item in v:
            one = inline(item)
            if one is not None:
                lines.append("%s- %s" % (pad, one))
            else:
                sub = block(item, ind + 2)
                lines.append(pad + "- " + sub[0][ind + 2:])
                lines += sub[1:]
    return lines


def to_yaml(obj, header):
    return "".join("# %s\n" % h for h in header) + "\n".join(block(obj, 0)) + "\n"


def main(argv):
    check = "--check" in argv
    args = [a for a in argv if a != "--check"]
    if len(args) != 2:
        sys.exit(__doc__.split("\n\n")[1])
    swagger_path, out_dir = args
    raw = open(swagger_path, "rb").read()
    digest = hashlib.sha256(raw).hexdigest()
    if digest != SWAGGER_SHA256:
        print("gen-crds: warning: %s is not KubeVirt %s's swagger.json (sha256 %s)"
              % (swagger_path, KUBEVIRT_VERSION, digest), file=sys.stderr)
    defs = json.loads(raw)["definitions"]
    conv = Converter(defs)
    outputs = {}
    for spec in CRDS:
        if spec["definition"] not in defs:
            print("gen-crds: %s not in the swagger; no CRD for %s"
                  % (spec["definition"], spec["kind"]), file=sys.stderr)
            continue
        schema = conv.root(spec["definition"])
        errs = structural_errors(schema, spec["kind"])
        if errs:
            sys.exit("gen-crds: %s schema is not structural:\n  %s" % (spec["kind"],
                                                                      "\n  ".join(errs)))
        obj = crd(spec, schema)
        header = [
            "Generated by scripts/gen-crds.py from KubeVirt %s's api/openapi-spec/swagger.json"
            % KUBEVIRT_VERSION,
            "swagger sha256: %s" % digest,
            "Do not edit: regenerate as bins/deploy/README.md says.",
        ]
        outputs[obj["metadata"]["name"] + ".yaml"] = (obj, to_yaml(obj, header))
    for note in sorted(set(conv.notes)):
        print("gen-crds: note: " + note, file=sys.stderr)
    os.makedirs(out_dir, exist_ok=True)
    for name, (_, text) in sorted(outputs.items()):
        with open(os.path.join(out_dir, name), "w", newline="\n") as f:
            f.write(text)
    if check:
        try:
            import yaml
        except ImportError:
            sys.exit("gen-crds: --check needs PyYAML (python3 -c 'import yaml' fails)")
        for name, (obj, _) in sorted(outputs.items()):
            with open(os.path.join(out_dir, name)) as f:
                back = yaml.safe_load(f)
            if back != obj:
                sys.exit("gen-crds: --check: %s does not read back as generated" % name)
            size = len(json.dumps(back, separators=(",", ":")))
            print("gen-crds: check: %s reads back (%d bytes as compact JSON)" % (name, size),
                  file=sys.stderr)


if __name__ == "__main__":
    main(sys.argv[1:])
