"""The Kubernetes manifests: every overlay renders, validates against the Kubernetes schemas
offline, and points at things that exist (HTTP routes, CLI commands, settings, config maps)."""

from __future__ import annotations

import copy
import ipaddress
import re
import shlex
from pathlib import Path

import kubernetes_validate
import pytest
import typer
import yaml
from kustomize_lite import KustomizeError, render, strategic_merge

REPO = Path(__file__).resolve().parents[2]
K8S = REPO / "k8s"
OVERLAYS = sorted(p.name for p in (K8S / "overlays").iterdir() if (p / "kustomization.yaml").is_file())
K8S_VERSION = "1.30"  # the oldest minor the manifests promise to work on (CronJob timeZone, HPA v2, ...)
GATEWAY = {"app.kubernetes.io/name": "switchboard", "app.kubernetes.io/component": "gateway"}


@pytest.fixture(scope="module", params=OVERLAYS)
def rendered(request):
    return request.param, render(K8S / "overlays" / request.param)


def _one(objs, kind, name=None):
    found = [o for o in objs if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)]
    assert len(found) == 1, f"expected one {kind} {name or ''}, found {len(found)}"
    return found[0]


def _pod_spec(obj):
    spec = obj["spec"]
    return spec["jobTemplate"]["spec"]["template"]["spec"] if obj["kind"] == "CronJob" else spec["template"]["spec"]


def _workloads(objs):
    return [o for o in objs if o["kind"] in ("Deployment", "Job", "CronJob")]


def _matches(selector: dict, labels: dict) -> bool:
    return all(labels.get(k) == v for k, v in selector.items())


def served_paths(home: Path) -> set[str]:
    """Paths the gateway serves, from its OpenAPI document (health, metrics and API routes are all in it)."""
    from router.app.factory import create_app
    from router.app.settings import Settings

    return set(create_app(Settings(home=home, log_json=False)).openapi()["paths"])


@pytest.fixture(scope="module")
def app_paths(tmp_path_factory):
    paths = served_paths(tmp_path_factory.mktemp("home"))
    assert "/v1/messages" in paths
    return paths


def _cli_command(args: list[str]):
    """Resolve ``switchboard <args>`` against the real CLI and parse its options (nothing runs).

    Raises on an unknown command or option, or a missing argument, like the CLI itself would.
    """
    from router.cli import app

    cmd = typer.main.get_command(app)
    ctx = cmd.make_context("switchboard", [], resilient_parsing=True)
    rest = list(args)
    while hasattr(cmd, "get_command"):  # a group: the next word names a subcommand
        assert rest and not rest[0].startswith("-"), f"`switchboard {' '.join(args)}`: no subcommand"
        name = rest.pop(0)
        sub = cmd.get_command(ctx, name)
        assert sub is not None, f"`switchboard {' '.join(args)}`: no command {name!r}"
        cmd = sub
        ctx = cmd.make_context(name, [] if hasattr(cmd, "get_command") else rest, parent=ctx,
                               resilient_parsing=hasattr(cmd, "get_command"))
    return cmd


# --------------------------------------------------------------------------------- render & schema


def test_every_overlay_renders_and_validates(rendered):
    name, objs = rendered
    kinds = {o["kind"] for o in objs}
    assert {"Deployment", "Service", "HorizontalPodAutoscaler", "PodDisruptionBudget", "ConfigMap", "Job",
            "CronJob", "NetworkPolicy", "ServiceAccount", "Namespace"} <= kinds, name
    for obj in objs:
        # strict: unknown fields are errors too, not only wrong types
        kubernetes_validate.validate(obj, K8S_VERSION, strict=True)
    namespaces = {o["metadata"].get("namespace") for o in objs if o["kind"] != "Namespace"}
    assert namespaces == {_one(objs, "Namespace")["metadata"]["name"]}


def test_the_schema_check_is_not_vacuous(rendered):
    _, objs = rendered
    dep = copy.deepcopy(_one(objs, "Deployment"))
    dep["spec"]["replicas"] = "two"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(dep, K8S_VERSION, strict=True)
    dep = copy.deepcopy(_one(objs, "Deployment"))
    _pod_spec(dep)["containers"][0]["livenessProbes"] = {}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(dep, K8S_VERSION, strict=True)


def test_renderer_refuses_what_it_does_not_implement(tmp_path):
    (tmp_path / "kustomization.yaml").write_text("resources: []\nnamePrefix: x-\n")
    with pytest.raises(KustomizeError, match="namePrefix"):
        render(tmp_path)


def test_strategic_merge_by_merge_key():
    base = {"containers": [{"name": "a", "env": [{"name": "X", "value": "1"}, {"name": "Y", "value": "2"}]}]}
    strategic_merge(base, {"containers": [{"name": "a", "env": [{"name": "Y", "value": "3"}]},
                                          {"name": "b", "image": "i"}]})
    assert base == {"containers": [{"name": "a", "env": [{"name": "X", "value": "1"}, {"name": "Y", "value": "3"}]},
                                   {"name": "b", "image": "i"}]}


# --------------------------------------------------------------------------------- the gateway


def test_gateway_deployment_is_highly_available_and_hardened(rendered):
    name, objs = rendered
    dep = _one(objs, "Deployment", "switchboard")
    assert dep["spec"]["replicas"] >= 2
    assert _matches(dep["spec"]["selector"]["matchLabels"], dep["spec"]["template"]["metadata"]["labels"])
    pod = _pod_spec(dep)
    assert pod["securityContext"]["runAsNonRoot"] is True and pod["securityContext"]["runAsUser"] != 0
    assert pod["automountServiceAccountToken"] is False
    keys = {c["topologyKey"] for c in pod["topologySpreadConstraints"]}
    assert {"kubernetes.io/hostname", "topology.kubernetes.io/zone"} <= keys
    for c in pod["topologySpreadConstraints"]:
        assert _matches(c["labelSelector"]["matchLabels"], dep["spec"]["template"]["metadata"]["labels"])
    (gw,) = pod["containers"]
    assert gw["securityContext"]["allowPrivilegeEscalation"] is False
    assert gw["securityContext"]["readOnlyRootFilesystem"] is True
    assert gw["securityContext"]["capabilities"]["drop"] == ["ALL"]
    for part in ("requests", "limits"):
        assert {"cpu", "memory"} <= gw["resources"][part].keys()
    assert re.fullmatch(r"[\w.-]+(/[\w.-]+)+:[\w.-]+", gw["image"]) and not gw["image"].endswith(":latest")
    if name == "prod":
        hard = [c for c in pod["topologySpreadConstraints"] if c["whenUnsatisfiable"] == "DoNotSchedule"]
        assert [c["topologyKey"] for c in hard] == ["kubernetes.io/hostname"]
        assert dep["spec"]["replicas"] >= 3


def test_probes_point_at_real_endpoints_on_the_served_port(rendered, app_paths):
    _, objs = rendered
    dep = _one(objs, "Deployment", "switchboard")
    (gw,) = _pod_spec(dep)["containers"]
    ports = {p["name"]: p["containerPort"] for p in gw["ports"]}
    settings = _one(objs, "ConfigMap", next(o["metadata"]["name"] for o in objs
                                             if o["metadata"]["name"].startswith("switchboard-settings")))
    assert ports["http"] == int(settings["data"]["SWITCHBOARD_PORT"])
    assert gw["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert gw["livenessProbe"]["httpGet"]["path"] == "/healthz"
    for probe in ("readinessProbe", "livenessProbe", "startupProbe"):
        get = gw[probe]["httpGet"]
        assert get["path"] in app_paths, f"{probe} {get['path']} is not a route of the app"
        assert get["port"] in ports or get["port"] in ports.values()
    ann = dep["spec"]["template"]["metadata"]["annotations"]
    assert ann["prometheus.io/path"] in app_paths and int(ann["prometheus.io/port"]) == ports["http"]


def test_service_hpa_pdb_and_networkpolicy_select_the_gateway(rendered):
    name, objs = rendered
    dep = _one(objs, "Deployment", "switchboard")
    pod_labels = dep["spec"]["template"]["metadata"]["labels"]
    svc = _one(objs, "Service", "switchboard")
    assert _matches(svc["spec"]["selector"], pod_labels)
    (gw,) = _pod_spec(dep)["containers"]
    assert svc["spec"]["ports"][0]["targetPort"] in {p["name"] for p in gw["ports"]}
    hpa = _one(objs, "HorizontalPodAutoscaler")
    assert hpa["apiVersion"] == "autoscaling/v2"
    assert hpa["spec"]["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment", "name": "switchboard"}
    assert 2 <= hpa["spec"]["minReplicas"] <= dep["spec"]["replicas"] <= hpa["spec"]["maxReplicas"]
    pdb = _one(objs, "PodDisruptionBudget")
    assert _matches(pdb["spec"]["selector"]["matchLabels"], pod_labels)
    assert 1 <= pdb["spec"]["minAvailable"] < hpa["spec"]["minReplicas"], "a PDB that blocks every drain"
    netpol = _one(objs, "NetworkPolicy")
    assert set(netpol["spec"]["policyTypes"]) == {"Ingress", "Egress"}
    for w in _workloads(objs):
        labels = (w["spec"]["jobTemplate"]["spec"]["template"] if w["kind"] == "CronJob"
                  else w["spec"]["template"])["metadata"]["labels"]
        assert _matches(netpol["spec"]["podSelector"]["matchLabels"], labels), w["metadata"]["name"]
    egress_ports = {p["port"] for rule in netpol["spec"]["egress"] for p in rule.get("ports", [])}
    assert {53, 5432, 9200, 443} <= egress_ports


def _selects(selector: dict | None, labels: dict) -> bool:
    """A label selector (matchLabels only; the manifests use no matchExpressions) against labels."""
    assert set(selector or {}) <= {"matchLabels"}, selector
    return _matches((selector or {}).get("matchLabels", {}), labels)


def egress_allows(netpol: dict, *, port: int, protocol: str = "TCP", ip: str, pod: dict | None = None,
                  namespace: dict | None = None) -> bool:
    """Whether the policy lets its pods open ``ip:port``, as Kubernetes reads it: a rule without ``to`` reaches
    every address; a peer with only ``podSelector`` means pods of the policy's own namespace; ``ipBlock`` is
    the address minus its exceptions. ``pod``/``namespace``: labels of the destination when it is a pod
    (``namespace`` None = the policy's namespace)."""
    own = namespace is None
    ns_labels = namespace or {"kubernetes.io/metadata.name": netpol["metadata"].get("namespace", "")}
    address = ipaddress.ip_address(ip)

    def peer_ok(peer: dict) -> bool:
        if "ipBlock" in peer:
            block = peer["ipBlock"]
            return (address in ipaddress.ip_network(block["cidr"])
                    and not any(address in ipaddress.ip_network(x) for x in block.get("except", [])))
        if pod is None:
            return False
        if "namespaceSelector" in peer:
            return _selects(peer["namespaceSelector"], ns_labels) and _selects(peer.get("podSelector"), pod)
        return own and _selects(peer.get("podSelector"), pod)

    for rule in netpol["spec"].get("egress", []):
        ports = rule.get("ports")
        if ports and not any(p.get("port") == port and p.get("protocol", "TCP") == protocol for p in ports):
            continue
        if not rule.get("to") or any(peer_ok(peer) for peer in rule["to"]):
            return True
    return False


def test_networkpolicy_egress_reaches_only_the_named_services(rendered):
    """Issue 34: egress reached any address on 5432/9200 and the cluster's own network on 443. Now each port
    goes to the pods of the service named (the example CloudNativePG and ECK clusters, kube-dns, labelled tool
    servers) and 443 to public addresses only."""
    _, objs = rendered
    netpol = _one(objs, "NetworkPolicy")
    assert all(rule.get("to") for rule in netpol["spec"]["egress"]), "an egress rule open to every address"
    pg_name = yaml.safe_load((K8S / "examples" / "cloudnativepg-cluster.yaml").read_text())["metadata"]["name"]
    es_name = yaml.safe_load((K8S / "examples" / "eck-elasticsearch.yaml").read_text())["metadata"]["name"]
    postgres = {"cnpg.io/cluster": pg_name, "cnpg.io/instanceRole": "primary"}     # labels the operators set
    elastic = {"elasticsearch.k8s.elastic.co/cluster-name": es_name}
    dns = {"k8s-app": "kube-dns"}
    kube_system = {"kubernetes.io/metadata.name": "kube-system"}
    tools = {"switchboard.io/tool-server": "true", "app": "shop"}
    other = {"app": "something-else"}

    def allows(**kw) -> bool:
        return egress_allows(netpol, **kw)

    # what must work
    assert allows(port=53, protocol="UDP", ip="10.96.0.10", pod=dns, namespace=kube_system)
    assert allows(port=53, protocol="TCP", ip="10.96.0.10", pod=dns, namespace=kube_system)
    assert allows(port=5432, ip="10.1.2.3", pod=postgres)
    assert allows(port=9200, ip="10.1.2.4", pod=elastic)
    assert allows(port=8000, ip="10.1.2.5", pod=tools)
    for public in ("149.154.167.220", "157.240.22.35", "54.172.60.0", "101.226.129.166"):   # channel APIs
        assert allows(port=443, ip=public), public
    # what must not
    assert not allows(port=5432, ip="10.1.2.9", pod=other)                    # another pod of the namespace
    assert not allows(port=5432, ip="10.1.2.3", pod=postgres, namespace={"kubernetes.io/metadata.name": "x"})
    assert not allows(port=5432, ip="203.0.113.7") and not allows(port=9200, ip="203.0.113.7")  # the internet
    assert not allows(port=9200, ip="10.1.2.9", pod=other)
    assert not allows(port=53, protocol="UDP", ip="8.8.8.8")                  # DNS only through kube-dns
    assert not allows(port=53, protocol="UDP", ip="10.1.2.9", pod=dns)        # "kube-dns" outside kube-system
    assert not allows(port=8000, ip="10.1.2.9", pod=other)
    for private in ("10.0.0.1", "10.96.0.1", "172.16.0.1", "172.31.255.254", "192.168.1.1", "100.64.0.1",
                    "169.254.169.254", "127.0.0.1", "0.0.0.1"):
        assert not allows(port=443, ip=private), private                      # the cluster, nodes, metadata
        assert not allows(port=443, ip=private, pod=other), private
    assert not allows(port=80, ip="93.184.216.34") and not allows(port=22, ip="93.184.216.34")


def test_the_egress_check_is_not_vacuous():
    """The policy as it was (ports without peers, 443 to 0.0.0.0/0 but the metadata address) fails the check."""
    old = {"metadata": {"namespace": "switchboard"}, "spec": {"egress": [
        {"ports": [{"port": 5432, "protocol": "TCP"}, {"port": 9200, "protocol": "TCP"}]},
        {"to": [{"ipBlock": {"cidr": "0.0.0.0/0", "except": ["169.254.169.254/32"]}}],
         "ports": [{"port": 443, "protocol": "TCP"}]}]}}
    assert egress_allows(old, port=5432, ip="203.0.113.7")
    assert egress_allows(old, port=443, ip="10.96.0.1")
    assert not egress_allows(old, port=443, ip="169.254.169.254")


# --------------------------------------------------------------------------------- jobs and CLI


def test_container_args_are_real_switchboard_commands(rendered):
    _, objs = rendered
    seen = set()
    for w in _workloads(objs):
        for c in _pod_spec(w)["containers"]:
            cmd = _cli_command(c["args"])
            seen.add(cmd.name)
    assert {"serve", "migrate", "rebuild"} <= seen


def test_cli_resolution_rejects_unknown_commands_and_options():
    with pytest.raises(AssertionError, match="no command 'migrat'"):
        _cli_command(["db", "migrat"])
    with pytest.raises(Exception, match="No such option"):
        _cli_command(["db", "migrate", "--no-such-option"])
    assert _cli_command(["db", "migrate", "--json"]).name == "migrate"


def test_migrations_job(rendered):
    _, objs = rendered
    job = _one(objs, "Job", "switchboard-migrate")
    (c,) = _pod_spec(job)["containers"]
    assert c["args"][:2] == ["db", "migrate"]
    assert job["spec"]["backoffLimit"] >= 1 and job["spec"]["ttlSecondsAfterFinished"] > 0
    assert _pod_spec(job)["securityContext"]["runAsNonRoot"] is True


def test_nightly_rebuild_cronjob(rendered):
    name, objs = rendered
    cj = _one(objs, "CronJob", "switchboard-rebuild")
    spec = cj["spec"]
    assert spec["concurrencyPolicy"] == "Forbid"
    assert len(spec["schedule"].split()) == 5
    assert spec["successfulJobsHistoryLimit"] >= 1 and spec["failedJobsHistoryLimit"] >= 1
    assert 1 <= spec["jobTemplate"]["spec"]["backoffLimit"] <= 6
    pod = _pod_spec(cj)
    assert pod["restartPolicy"] == "Never"
    (c,) = pod["containers"]
    assert c["args"][:2] == ["index", "rebuild"] and "--source" in c["args"]
    source = c["args"][c["args"].index("--source") + 1]
    mounts = {m["mountPath"]: m for m in c["volumeMounts"]}
    assert source in mounts and mounts[source].get("readOnly") is True
    vol = next(v for v in pod["volumes"] if v["name"] == mounts[source]["name"])
    _one(objs, "PersistentVolumeClaim", vol["persistentVolumeClaim"]["claimName"])
    assert spec.get("suspend", False) is (name == "dev")


# --------------------------------------------------------------------------------- config and secrets


def _secret_examples() -> dict[str, set[str]]:
    docs = yaml.safe_load_all((K8S / "examples" / "secrets.example.yaml").read_text())
    return {d["metadata"]["name"]: set(d.get("stringData", {})) for d in docs if d and d["kind"] == "Secret"}


def test_secret_examples_validate_and_hold_no_real_secret():
    for doc in yaml.safe_load_all((K8S / "examples" / "secrets.example.yaml").read_text()):
        if doc:
            kubernetes_validate.validate(doc, K8S_VERSION, strict=True)
            for value in doc.get("stringData", {}).values():
                assert "CHANGE_ME" in value or value.startswith("<"), value


def test_every_reference_resolves(rendered):
    """ConfigMaps come from the render; Secrets are documented in examples/ with the same keys."""
    _, objs = rendered
    configmaps = {o["metadata"]["name"]: o for o in objs if o["kind"] == "ConfigMap"}
    secrets = _secret_examples()
    for w in _workloads(objs):
        pod = _pod_spec(w)
        assert pod["serviceAccountName"] in {o["metadata"]["name"] for o in objs if o["kind"] == "ServiceAccount"}
        for c in pod["containers"]:
            for src in c.get("envFrom", []):
                if "configMapRef" in src:
                    assert src["configMapRef"]["name"] in configmaps
                if "secretRef" in src:
                    assert src["secretRef"]["name"] in secrets
            for env in c.get("env", []):
                ref = env.get("valueFrom", {}).get("secretKeyRef")
                if ref:
                    assert ref["key"] in secrets.get(ref["name"], set()), f"{ref} is not documented"
            volumes = {v["name"]: v for v in pod.get("volumes", [])}
            for m in c.get("volumeMounts", []):
                assert m["name"] in volumes
                if "configMap" in volumes[m["name"]]:
                    assert volumes[m["name"]]["configMap"]["name"] in configmaps


def _known_settings() -> set[str]:
    from router.app.settings import Settings

    names = {f"SWITCHBOARD_{f.upper()}" for f in Settings.model_fields}
    try:
        from handoff.config import HandoffConfig

        names |= {f"SWITCHBOARD_HANDOFF_{f.upper()}" for f in HandoffConfig.model_fields}
    except ImportError:  # pragma: no cover - handoff ships with the gateway
        pass
    return names


def test_environment_names_are_real_settings(rendered):
    """A typo in a SWITCHBOARD_* name would be silently ignored by pydantic-settings."""
    _, objs = rendered
    known = _known_settings()
    used = set()
    for o in objs:
        if o["kind"] == "ConfigMap" and o["metadata"]["name"].startswith("switchboard-settings"):
            used |= set(o["data"])
    for w in _workloads(objs):
        for c in _pod_spec(w)["containers"]:
            used |= {e["name"] for e in c.get("env", [])}
    for doc in yaml.safe_load_all((K8S / "examples" / "secrets.example.yaml").read_text()):
        if doc and doc["metadata"]["name"] == "switchboard-channels":
            used |= set(doc["stringData"])
    unknown = {n for n in used if n.startswith("SWITCHBOARD_")} - known
    assert not unknown, f"not settings of the gateway: {sorted(unknown)}"


def test_settings_configmap_is_accepted_by_the_gateway(rendered, monkeypatch):
    _, objs = rendered
    cm = next(o for o in objs if o["metadata"]["name"].startswith("switchboard-settings"))
    for k, v in cm["data"].items():
        monkeypatch.setenv(k, v)
    from router.app.settings import Settings

    s = Settings(_env_file=None)
    assert s.host == "0.0.0.0" and str(s.intents_file).startswith("/etc/switchboard/")


def test_policy_files_in_the_configmap_load(rendered, tmp_path):
    _, objs = rendered
    cm = next(o for o in objs if o["metadata"]["name"].startswith("switchboard-policy"))
    assert {"intents.yaml", "escalation.yaml"} <= set(cm["data"])
    from router.classify.intents import load_intents

    (tmp_path / "intents.yaml").write_text(cm["data"]["intents.yaml"], encoding="utf-8")
    config = load_intents(tmp_path / "intents.yaml")
    assert len(config.intents) >= 5
    from router.turn.escalation import load_policy

    (tmp_path / "escalation.yaml").write_text(cm["data"]["escalation.yaml"], encoding="utf-8")
    assert load_policy(tmp_path / "escalation.yaml").escalation.refund_amount_over > 0
    # the mounted files are where the settings say
    dep = _one(objs, "Deployment", "switchboard")
    (gw,) = _pod_spec(dep)["containers"]
    mount = next(m for m in gw["volumeMounts"] if m["name"] == "policy")["mountPath"]
    settings_cm = next(o for o in objs if o["metadata"]["name"].startswith("switchboard-settings"))
    assert settings_cm["data"]["SWITCHBOARD_INTENTS_FILE"] == f"{mount}/intents.yaml"
    assert settings_cm["data"]["SWITCHBOARD_POLICY_FILE"] == f"{mount}/escalation.yaml"


def test_readme_documents_the_data_services():
    text = (K8S / "README.md").read_text()
    for needle in ("CloudNativePG", "pgvector", "ECK", "kubectl apply -k", "switchboard-pg-app",
                   "switchboard-elasticsearch", "switchboard-channels"):
        assert needle in text, needle
    commands = re.findall(r"`switchboard ([^`]+)`", text)
    assert len(commands) >= 3
    for cmd in commands:
        _cli_command(shlex.split(cmd))


def test_nightly_retention_cronjob(rendered):
    _, objs = rendered
    cj = _one(objs, "CronJob", "switchboard-retention")
    spec = cj["spec"]
    assert spec["concurrencyPolicy"] == "Forbid" and len(spec["schedule"].split()) == 5
    (c,) = _pod_spec(cj)["containers"]
    assert _cli_command(c["args"]).name == "run" and c["args"][:2] == ["retention", "run"]
    assert any(e["name"] == "SWITCHBOARD_DATABASE_URL" for e in c["env"])


@pytest.mark.parametrize("name", ["intents.yaml", "escalation.yaml"])
def test_the_policy_config_map_is_the_bundled_policy(name):
    """A deployment starts from the policy the gateway ships and is tested with: a stale copy in k8s/ would
    route by last season's intents (no small talk, no refund status) without anyone noticing."""
    shipped = (REPO / "router" / "samples" / name).read_text(encoding="utf-8")
    deployed = (K8S / "base" / "config" / name).read_text(encoding="utf-8")
    assert deployed == shipped, f"k8s/base/config/{name} differs from router/samples/{name}: run `make k8s-config`"
