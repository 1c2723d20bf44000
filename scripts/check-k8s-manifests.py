#!/usr/bin/python3
"""Offline check of the Kubernetes manifests of an EDL job (examples/kubernetes, docs/kubernetes.md).

No cluster is needed, nor reachable here: kubectl's client-side dry run asks the API server for its
OpenAPI document, so it cannot check anything offline. Instead:

1. yamllint (Debian yamllint) on every YAML file;
2. the schema: every object of the kustomization's resources is read into the model classes of the
   Kubernetes Python client (Debian python3-kubernetes: classes generated from the Kubernetes
   OpenAPI document, API 1.22 for 22.6.0). An unknown kind or apiVersion, a field the model does
   not have (a typo, a field of a newer API), a value of the wrong type and a missing required field
   are errors;
3. the references an apply would leave dangling and EDL's own rules, which no schema knows:
   selectors that select the pod templates they must, serviceName / subdomain naming a headless
   Service, priorityClassName / serviceAccountName / configMap / Role references, the store URL
   naming the etcd StatefulSet's pods, $(VAR) in args defined in env, the discovery script mounted
   and executable, the label selector of the discovery script selecting the worker pods, and
   terminationGracePeriodSeconds longer than edl-run's --grace-period plus a training step.

   scripts/check-k8s-manifests.py [--self-test] [DIR]      (default DIR: examples/kubernetes)

Exit 0: every check passed; 1: errors (each printed as FILE: KIND/NAME: problem); 77: a dependency
(python3-kubernetes, python3-yaml, yamllint) is missing and EDL_REQUIRE_DEPS is not 1 (ctest counts
77 as skipped); 2: usage. --self-test runs the checks on broken copies of the manifests and fails
unless each breakage is reported.
"""
import copy
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
YAMLLINT_CONFIG = "{extends: default, rules: {line-length: {max: 120}, document-start: disable}}"
STEP_MARGIN_S = 30  # a training step and the leave, on top of edl-run's --grace-period
EXTERNAL_SECRETS = {"edl-job-secret"}  # created by the user (docs/kubernetes.md)


def missing_dependency(what):
    required = os.environ.get("EDL_REQUIRE_DEPS", "") not in ("", "0")
    print(f"check-k8s-manifests: {what} is missing (Debian python3-kubernetes, python3-yaml, yamllint; "
          f"scripts/install-deps.sh)" + ("" if required else ": skipped"), file=sys.stderr)
    sys.exit(1 if required else 77)


try:
    import yaml
except ImportError:
    missing_dependency("python3-yaml")
try:
    import kubernetes.client as k8s
except ImportError:
    missing_dependency("python3-kubernetes")

PRIMITIVES = {"str": (str,), "int": (int,), "bool": (bool,), "float": (int, float), "object": (str, int, dict, list),
              "datetime": (str,), "date": (str,)}


class Checker:
    def __init__(self):
        self.errors = []

    def error(self, where, what):
        self.errors.append(f"{where}: {what}")

    # --- the schema: the python client's models ------------------------------------------------

    def model_class(self, api_version, kind):
        group, _, version = api_version.rpartition("/")
        name = version[0].upper() + version[1:] + kind
        return getattr(k8s, name, None)

    def build(self, where, value, type_name):
        """Checks value against the model type `type_name`; returns the value as the client holds it."""
        if type_name.startswith("list["):
            if not isinstance(value, list):
                self.error(where, f"expected a list ({type_name}), got {type(value).__name__}")
                return None
            return [self.build(f"{where}[{i}]", v, type_name[5:-1]) for i, v in enumerate(value)]
        if type_name.startswith("dict("):
            if not isinstance(value, dict):
                self.error(where, f"expected a map ({type_name}), got {type(value).__name__}")
                return None
            inner = type_name[5:-1].split(", ", 1)[1]
            return {k: self.build(f"{where}.{k}", v, inner) for k, v in value.items()}
        if type_name in PRIMITIVES:
            ok = isinstance(value, PRIMITIVES[type_name]) and not (type_name == "int" and isinstance(value, bool))
            if not ok:
                self.error(where, f"expected {type_name}, got {type(value).__name__} {value!r}")
            return value
        klass = getattr(k8s, type_name, None)
        if klass is None:
            self.error(where, f"the client has no model {type_name}")
            return None
        if not isinstance(value, dict):
            self.error(where, f"expected an object ({type_name}), got {type(value).__name__}")
            return None
        by_json = {j: p for p, j in klass.attribute_map.items()}
        kwargs = {}
        for key, v in value.items():
            if key not in by_json:
                self.error(where, f"unknown field '{key}' in {type_name}")
                continue
            kwargs[by_json[key]] = self.build(f"{where}.{key}", v, klass.openapi_types[by_json[key]])
        try:
            return klass(**kwargs)  # client-side validation: required fields, some enums
        except (ValueError, TypeError) as e:
            self.error(where, f"{type_name}: {e}")
            return None

    def check_object(self, where, obj):
        if not isinstance(obj, dict) or "apiVersion" not in obj or "kind" not in obj:
            self.error(where, "not a Kubernetes object (no apiVersion / kind)")
            return
        klass = self.model_class(obj["apiVersion"], obj["kind"])
        if klass is None:
            self.error(where, f"unknown kind {obj['kind']} in {obj['apiVersion']}")
            return
        self.build(where, obj, klass.__name__)


def load(path):
    with open(path) as f:
        return [d for d in yaml.safe_load_all(f) if d is not None]


def by_kind(objects, kind):
    return {o["metadata"]["name"]: o for _, o in objects if o.get("kind") == kind and "name" in o.get("metadata", {})}


def pod_templates(objects):
    """(where, owner, template) of every workload's pod template."""
    for where, o in objects:
        if o.get("kind") in ("StatefulSet", "Deployment", "Job", "DaemonSet", "ReplicaSet"):
            yield where, o, o.get("spec", {}).get("template", {})


def selects(selector, labels):
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


def check_references(c, objects, generated_configmaps):
    services = by_kind(objects, "Service")
    headless = {n for n, s in services.items() if s.get("spec", {}).get("clusterIP") == "None"}
    priority = set(by_kind(objects, "PriorityClass"))
    accounts = set(by_kind(objects, "ServiceAccount"))
    roles = by_kind(objects, "Role")
    configmaps = set(by_kind(objects, "ConfigMap")) | generated_configmaps
    templates = list(pod_templates(objects))
    for name, svc in services.items():
        sel = svc.get("spec", {}).get("selector", {})
        if not any(selects(sel, t.get("metadata", {}).get("labels", {})) for _, _, t in templates):
            c.error(f"Service/{name}", f"selector {sel} selects no pod template")
    for where, o in objects:
        if o.get("kind") == "PodDisruptionBudget":
            sel = o["spec"].get("selector", {}).get("matchLabels", {})
            if not any(selects(sel, t.get("metadata", {}).get("labels", {})) for _, _, t in templates):
                c.error(where, f"selector {sel} selects no pod template")
        if o.get("kind") == "RoleBinding":
            ref = o.get("roleRef", {})
            if ref.get("kind") == "Role" and ref.get("name") not in roles:
                c.error(where, f"roleRef names Role {ref.get('name')}, which is not defined")
            for s in o.get("subjects", []):
                if s.get("kind") == "ServiceAccount" and s.get("name") not in accounts:
                    c.error(where, f"subject ServiceAccount {s.get('name')} is not defined")
    for where, owner, t in templates:
        spec, kind = t.get("spec", {}), owner["kind"]
        labels = t.get("metadata", {}).get("labels", {})
        sel = owner["spec"].get("selector", {}).get("matchLabels")
        if kind != "Job" and not selects(sel, labels):
            c.error(where, f"selector {sel} does not select its own pod template (labels {labels})")
        if kind == "StatefulSet" and owner["spec"].get("serviceName") not in headless:
            c.error(where, f"serviceName {owner['spec'].get('serviceName')} is not a headless Service here")
        if "subdomain" in spec and spec["subdomain"] not in headless:
            c.error(where, f"subdomain {spec['subdomain']} is not a headless Service here")
        if "priorityClassName" in spec and spec["priorityClassName"] not in priority:
            c.error(where, f"priorityClassName {spec['priorityClassName']} is not defined")
        if "serviceAccountName" in spec and spec["serviceAccountName"] not in accounts:
            c.error(where, f"serviceAccountName {spec['serviceAccountName']} is not defined")
        for v in spec.get("volumes", []):
            if "configMap" in v and v["configMap"].get("name") not in configmaps:
                c.error(where, f"volume {v['name']}: ConfigMap {v['configMap'].get('name')} is not defined")
        for ctr in spec.get("containers", []):
            check_container(c, f"{where}: container {ctr.get('name')}", ctr, spec, objects)


def flag(args, name):
    """The value of --name=V or --name V in args; None when absent."""
    for i, a in enumerate(args):
        if a == "--":
            break
        if a.startswith(name + "="):
            return a[len(name) + 1:]
        if a == name and i + 1 < len(args):
            return args[i + 1]
    return None


def check_container(c, where, ctr, spec, objects):
    env = {e["name"]: e for e in ctr.get("env", [])}
    args = ctr.get("args", [])
    for a in ctr.get("command", []) + args:
        for var in re.findall(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)", a):
            if var not in env:
                c.error(where, f"$({var}) is not defined in env")
    for e in env.values():
        ref = e.get("valueFrom", {}).get("secretKeyRef")
        if ref and ref.get("name") not in EXTERNAL_SECRETS | set(by_kind(objects, "Secret")):
            c.error(where, f"env {e['name']}: Secret {ref.get('name')} is neither defined nor documented")
    if "edl-run" not in os.path.basename((ctr.get("command") or [""])[0]):
        return
    grace = flag(args, "--grace-period")
    grace = int(grace) if grace is not None else 10
    if spec.get("terminationGracePeriodSeconds", 30) < grace + STEP_MARGIN_S:
        c.error(where, f"terminationGracePeriodSeconds {spec.get('terminationGracePeriodSeconds', 30)} is shorter than "
                       f"edl-run's --grace-period {grace} + {STEP_MARGIN_S} s: the kubelet kills a leaving worker")
    if "EDL_BIND_ADDR" not in env:
        c.error(where, "no EDL_BIND_ADDR: the workers would listen on 127.0.0.1 only")
    if flag(args, "--job-id") is None or ("EDL_JOB_SECRET" not in env and flag(args, "--secret") is None):
        c.error(where, "every pod needs the same --job-id and job secret")
    check_store(c, where, flag(args, "--store"), objects)
    check_discovery(c, where, flag(args, "--host-discovery-script"), ctr, env, objects)


def check_store(c, where, store, objects):
    if not store or not store.startswith("etcd://"):
        c.error(where, f"--store {store!r}: the pods of a job need an external store (etcd://...)")
        return
    sets = by_kind(objects, "StatefulSet")
    for host in store[len("etcd://"):].split(","):
        name = host.split("@")[-1].split(":")[0]
        m = re.fullmatch(r"(.+)-(\d+)\.([a-z0-9-]+)", name)
        if not m:
            continue  # an existing etcd outside the manifests
        ss = sets.get(m.group(1))
        if ss is None or ss["spec"].get("serviceName") != m.group(3) or int(m.group(2)) >= ss["spec"].get("replicas", 1):
            c.error(where, f"--store names {name}, which is no pod of a StatefulSet behind Service {m.group(3)} here")


def check_discovery(c, where, script, ctr, env, objects):
    if script is None:
        return
    mounts = [m["mountPath"].rstrip("/") + "/" for m in ctr.get("volumeMounts", [])]
    if not any(script.startswith(m) for m in mounts):
        c.error(where, f"--host-discovery-script {script} is on no mounted volume")
    selector = env.get("EDL_K8S_SELECTOR", {}).get("value")
    if selector is None:
        c.error(where, "EDL_K8S_SELECTOR (the discovery script's label selector) is not set")
        return
    want = dict(kv.split("=", 1) for kv in selector.split(","))
    workers = [t for _, o, t in pod_templates(objects) if ctr in t.get("spec", {}).get("containers", [])]
    for t in workers:
        if not selects(want, t.get("metadata", {}).get("labels", {})):
            c.error(where, f"EDL_K8S_SELECTOR {selector} does not select the worker pods")


def check_dir(directory, quiet=False):
    c = Checker()
    kust_path = os.path.join(directory, "kustomization.yaml")
    if not os.path.exists(kust_path):
        c.error(directory, "no kustomization.yaml")
        return c.errors
    lint = subprocess.run(["yamllint", "-f", "parsable", "-d", YAMLLINT_CONFIG, directory],
                          capture_output=True, text=True)
    for line in lint.stdout.splitlines():
        c.error("yamllint", line)
    kust = load(kust_path)[0]
    objects, generated = [], set()
    for res in kust.get("resources", []):
        path = os.path.join(directory, res)
        if not os.path.exists(path):
            c.error("kustomization.yaml", f"resource {res} does not exist")
            continue
        for i, obj in enumerate(load(path)):
            name = obj.get("metadata", {}).get("name", f"#{i}") if isinstance(obj, dict) else f"#{i}"
            where = f"{res}: {obj.get('kind', '?') if isinstance(obj, dict) else '?'}/{name}"
            c.check_object(where, obj)
            if isinstance(obj, dict):
                objects.append((where, obj))
    for gen in kust.get("configMapGenerator", []):
        for f in gen.get("files", []):
            path = os.path.join(directory, f.split("=")[-1])
            if not os.path.exists(path):
                c.error("kustomization.yaml", f"configMapGenerator {gen.get('name')}: file {f} does not exist")
            elif not os.access(path, os.X_OK):
                c.error("kustomization.yaml", f"configMapGenerator {gen.get('name')}: {f} is not executable")
        generated.add(gen.get("name"))
    check_references(c, objects, generated)
    if not quiet:
        kinds = sorted({o["kind"] for _, o in objects})
        print(f"check-k8s-manifests: {directory}: {len(objects)} objects ({', '.join(kinds)}), "
              f"{len(c.errors)} problems")
    return c.errors


# --- self-test: each breakage below must be reported ---------------------------------------------

def breakages():
    def field(objs):  # a typo'd field
        objs["workers.yaml"][1]["spec"]["template"]["spec"]["terminationGracePeriodSecond"] = 120
    def wrong_type(objs):
        objs["workers.yaml"][1]["spec"]["completions"] = "three"
    def required(objs):
        del objs["workers.yaml"][1]["spec"]["template"]["spec"]["containers"][0]["name"]
    def grace(objs):
        objs["workers.yaml"][1]["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] = 30
    def priority(objs):
        objs["workers.yaml"][1]["spec"]["template"]["spec"]["priorityClassName"] = "edl-low"
    def selector(objs):
        objs["workers.yaml"][0]["spec"]["selector"]["edl.job"] = "run8"
    def store(objs):
        args = objs["workers.yaml"][1]["spec"]["template"]["spec"]["containers"][0]["args"]
        args[2] = args[2].replace("edl-etcd-2", "edl-etcd-3")
    def kind(objs):
        objs["priority-classes.yaml"][0]["apiVersion"] = "scheduling.k8s.io/v1alpha9"
    return {"unknown field": field, "wrong type": wrong_type, "missing required field": required,
            "grace period": grace, "dangling priorityClassName": priority, "Service selects nothing": selector,
            "store names a missing pod": store, "unknown apiVersion": kind}


def self_test(directory):
    files = ["workers.yaml", "priority-classes.yaml", "etcd.yaml", "rbac.yaml"]
    pristine = {f: load(os.path.join(directory, f)) for f in files}
    if check_dir(directory, quiet=True):
        print("check-k8s-manifests: self-test: the pristine manifests already fail", file=sys.stderr)
        return 1
    failed = 0
    for name, breakage in breakages().items():
        with tempfile.TemporaryDirectory() as tmp:
            objs = copy.deepcopy(pristine)
            breakage(objs)
            for f in os.listdir(directory):
                src = os.path.join(directory, f)
                dst = os.path.join(tmp, f)
                if f in objs:
                    with open(dst, "w") as out:
                        yaml.safe_dump_all(objs[f], out, sort_keys=False, width=1000)
                else:
                    with open(src, "rb") as i, open(dst, "wb") as o:
                        o.write(i.read())
                    os.chmod(dst, os.stat(src).st_mode)
            errors = [e for e in check_dir(tmp, quiet=True) if not e.startswith("yamllint")]
            print(f"check-k8s-manifests: self-test: {name}: " + (errors[0] if errors else "NOT DETECTED"))
            failed += not errors
    return 1 if failed else 0


def main(argv):
    args = [a for a in argv if a != "--self-test"]
    if len(args) > 1 or any(a.startswith("-") for a in args):
        print(__doc__.split("\n\n")[-2], file=sys.stderr)
        return 2
    directory = args[0] if args else os.path.join(ROOT, "examples", "kubernetes")
    if subprocess.run(["sh", "-c", "command -v yamllint"], capture_output=True).returncode != 0:
        missing_dependency("yamllint")
    if "--self-test" in argv:
        return self_test(directory)
    errors = check_dir(directory)
    for e in errors:
        print(e)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
