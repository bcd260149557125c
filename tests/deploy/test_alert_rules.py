"""The chart's alerts (metrics.prometheusRule) and Grafana dashboard (metrics.grafanaDashboard), rendered by
the real helm and checked by promtool, built from Prometheus' pinned Go module (scripts/peers/prometheus):
the rules load, every alert fires after its for: with its labels and annotations and stays quiet on
healthy nodes (tests/deploy/alerts/rules_test.yaml), breaking any alert fails its unit test, each alert
has its runbook in docs/alerts.md, and the rules and the dashboard read only metrics the programs serve."""

from __future__ import annotations

import copy
import itertools
import json
import re
import shlex
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.deploy.chart import CHART, HELMS, REPO, Tools, by_kind, documents, one, render, run_helm

TOOLS = Tools(bin=REPO / ".cache" / "tools" / "bin")  # helm, installed by scripts/install-tools.sh
PROMTOOL = REPO / ".cache" / "peers" / "prometheus" / "promtool"
UNIT_TESTS = Path(__file__).resolve().parent / "alerts" / "rules_test.yaml"
ALERTS_DOC = REPO / "docs" / "alerts.md"
DASHBOARD = CHART / "dashboards" / "gpu-labeller.json"
RUNBOOKS = "https://github.com/gpu-labeller/gpu-labeller/blob/main/docs/alerts.md"

# What the unit tests' series assume: the chart's ServiceMonitor (its job, the node label it adds).
VALUES: dict[str, Any] = {
    "metrics": {"serviceMonitor": {"enabled": True}, "prometheusRule": {"enabled": True}},
    "networkPolicy": {"metricsFrom": [{"podSelector": {"matchLabels": {"app": "prometheus"}}}]},
}
# Series the rules read from Prometheus itself and from kube-state-metrics.
FOREIGN = {"up", "kube_node_labels"}


def promtool(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    if not PROMTOOL.exists():  # never a skip: CI builds it
        pytest.fail(
            f"not built: {PROMTOOL}; build it with `scripts/peers/build.sh prometheus`", pytrace=False
        )
    return subprocess.run(
        [str(PROMTOOL), *args], cwd=cwd, capture_output=True, text=True, timeout=300, check=False
    )


def rule_object(values: dict[str, Any], tmp: Path, which: str = "helm3") -> dict[str, Any]:
    return one(documents(render(TOOLS, which, values, tmp)), "PrometheusRule")


def alerts_of(rule: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {r["alert"]: r for group in rule["spec"]["groups"] for r in group["rules"]}


def write_rules(groups: list[dict[str, Any]], where: Path) -> None:
    """The rule file promtool reads, and the unit tests beside it (they name it rules.yaml)."""
    (where / "rules.yaml").write_text(yaml.safe_dump({"groups": groups}, sort_keys=False))
    shutil.copy(UNIT_TESTS, where / UNIT_TESTS.name)


@pytest.fixture(scope="module")
def rule(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return rule_object(VALUES, tmp_path_factory.mktemp("render"))


@pytest.fixture(scope="module")
def unit_tests() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load(UNIT_TESTS.read_text())
    return loaded


def served_metrics() -> set[str]:
    """Every series name gfd's and nfd-lite's /metrics serve (counters with _total), from their registries."""
    from gfd.metrics import PrometheusMetrics
    from nfd_lite.metrics import WriterMetrics

    names = set()
    for registry in (PrometheusMetrics().registry, WriterMetrics().registry):
        for line in registry.exposition().decode().splitlines():
            if line.startswith("# TYPE "):
                _, _, name, kind = line.split()
                names.add(name + "_total" if kind == "counter" else name)
    return names


def metric_names(expr: str) -> set[str]:
    """The series names a PromQL expression reads: identifiers outside label matchers and strings that are
    followed by a selector, a range, an operator or the end, and are no function or keyword."""
    bare = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    bare = re.sub(r"\{[^}]*\}", "", bare)  # label matchers
    bare = re.sub(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", bare)
    keywords = {"and", "or", "unless", "offset", "bool"}
    return {
        word
        for word in re.findall(r"(?<![\w$:])([a-zA-Z_:][\w:]*)(?![\w:]|\s*\()", bare)
        if word not in keywords
    }


def test_rules_load_in_promtool(rule: dict[str, Any], tmp_path: Path) -> None:
    write_rules(rule["spec"]["groups"], tmp_path)
    done = promtool("check", "rules", "rules.yaml", cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"SUCCESS: {len(alerts_of(rule))} rules found" in done.stdout


def test_every_alert_passes_its_unit_tests(rule: dict[str, Any], tmp_path: Path) -> None:
    write_rules(rule["spec"]["groups"], tmp_path)
    done = promtool("test", "rules", UNIT_TESTS.name, cwd=tmp_path)
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-3000:]
    assert "SUCCESS" in done.stdout


def test_every_alert_is_tested_firing_and_quiet_and_in_a_healthy_fleet(
    rule: dict[str, Any], unit_tests: dict[str, Any]
) -> None:
    firing: set[str] = set()
    quiet: set[str] = set()
    for test in unit_tests["tests"]:
        for case in test["alert_rule_test"]:
            (firing if case["exp_alerts"] else quiet).add(case["alertname"])
    alerts = set(alerts_of(rule))
    assert alerts == firing, "alerts without a test that fires them, or tests of no alert"
    assert alerts == quiet
    (healthy,) = [t for t in unit_tests["tests"] if t["name"].startswith("a healthy node")]
    assert {c["alertname"] for c in healthy["alert_rule_test"] if not c["exp_alerts"]} == alerts
    assert unit_tests["rule_files"] == ["rules.yaml"]


def _alert_names() -> list[str]:
    """The alerts the unit tests exercise (read at collection, without helm; the test above checks that
    they are the rendered ones)."""
    tests = yaml.safe_load(UNIT_TESTS.read_text())["tests"]
    return sorted({c["alertname"] for t in tests for c in t["alert_rule_test"]})


@pytest.mark.parametrize("name", _alert_names())
@pytest.mark.parametrize("breaks", ["never-fires", "other-for"])
def test_breaking_an_alert_fails_its_unit_tests(
    rule: dict[str, Any], tmp_path: Path, name: str, breaks: str
) -> None:
    """The unit tests would notice an alert that never fires, or one that waits another for: (none where it
    waits, an hour where it waits none)."""
    groups = copy.deepcopy(rule["spec"]["groups"])
    (alert,) = [r for g in groups for r in g["rules"] if r["alert"] == name]
    if breaks == "never-fires":
        alert["expr"] = "vector(0) > 1"
    else:
        alert["for"] = "1h" if alert["for"] == "0s" else "0s"
    write_rules(groups, tmp_path)
    done = promtool("test", "rules", UNIT_TESTS.name, cwd=tmp_path)
    assert done.returncode != 0, f"{name} broken ({breaks}), and its unit tests still pass"
    assert f"alertname: {name}," in done.stdout + done.stderr


def test_every_alert_has_for_severity_summary_description_and_a_runbook_there(rule: dict[str, Any]) -> None:
    doc = ALERTS_DOC.read_text()
    headings = set(re.findall(r"^### (\w+)$", doc, re.M))
    for name, alert in alerts_of(rule).items():
        assert re.fullmatch(r"\d+[smh]", alert["for"]), name
        assert alert["labels"]["severity"] in ("critical", "warning"), name
        annotations = alert["annotations"]
        assert set(annotations) == {"summary", "description", "runbook_url"}, name
        assert "{{ $labels.node }}" in annotations["summary"], f"{name}: the summary names no node"
        assert annotations["runbook_url"] == f"{RUNBOOKS}#{name.lower()}", name
        assert name in headings, f"docs/alerts.md has no runbook '### {name}'"
    assert headings == set(alerts_of(rule)), "runbooks of no alert"


def test_the_docs_table_says_which_alert_reads_which_metric(rule: dict[str, Any]) -> None:
    rows = {}
    for line in ALERTS_DOC.read_text().splitlines():
        if m := re.fullmatch(r"\| \[(\w+)\]\(#(\w+)\) \| (\w+) \| (\w+) \| (.*) \|", line):
            name, anchor, severity, wait, metrics = m.groups()
            assert anchor == name.lower(), line
            rows[name] = (severity, wait, set(re.findall(r"`(\w+)`", metrics)))
    alerts = alerts_of(rule)
    assert set(rows) == set(alerts)
    for name, alert in alerts.items():
        assert rows[name] == (alert["labels"]["severity"], alert["for"], metric_names(alert["expr"])), name


def test_rules_and_dashboard_read_only_metrics_the_programs_serve(rule: dict[str, Any]) -> None:
    served = served_metrics()
    assert {"gfd_gpus_failing", "nfd_lite_api_unreachable", "nfd_lite_rejected_lines_total"} <= served
    read = set().union(*(metric_names(a["expr"]) for a in alerts_of(rule).values()))
    assert read - FOREIGN <= served, f"not served: {sorted(read - FOREIGN - served)}"
    dashboard_read = set().union(*(metric_names(e) for e in dashboard_queries()))
    assert dashboard_read <= served, f"not served: {sorted(dashboard_read - served)}"
    # Both programs are on it, and every signal the alerts read from them.
    assert read - FOREIGN <= dashboard_read


def test_metric_names_finds_what_an_expression_reads() -> None:
    expr = (
        'sum by (node) (rate(nfd_lite_api_errors_total{code="403", x=~"a{1}"}[5m])) '
        "unless on(pod) gfd_no_gpu offset 1h > time() - vector(1)"
    )
    assert metric_names(expr) == {"nfd_lite_api_errors_total", "gfd_no_gpu"}


def dashboard_panels(dashboard: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    for panel in dashboard["panels"]:
        out.append(panel)
        out.extend(panel.get("panels", []))  # a collapsed row holds its panels
    return out


def dashboard_queries() -> list[str]:
    dashboard = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in dashboard_panels(dashboard) for t in p.get("targets", [])]
    for var in dashboard["templating"]["list"]:
        if var["type"] == "query":
            m = re.fullmatch(r"label_values\((.+), \w+\)", var["query"]["query"])
            assert m, var["name"]
            exprs.append(m.group(1))
    return exprs


def test_dashboard_queries_parse_in_promtool(tmp_path: Path) -> None:
    """Each query, with Grafana's variables as Grafana fills them, parses as PromQL (as a recording rule)."""
    filled = {"$namespace": ".*", "$node": ".*", "$__rate_interval": "2m"}
    rules = []
    for i, expr in enumerate(dashboard_queries()):
        for var, value in filled.items():
            expr = expr.replace(var, value)
        assert "$" not in expr, expr
        rules.append({"record": f"dashboard:query{i}", "expr": expr})
    (tmp_path / "dashboard.yaml").write_text(yaml.safe_dump({"groups": [{"name": "d", "rules": rules}]}))
    done = promtool("check", "rules", "dashboard.yaml", cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert len(rules) > 20


@pytest.mark.parametrize("which", HELMS)
def test_dashboard_configmap_is_what_grafanas_sidecar_loads(tmp_path: Path, which: str) -> None:
    values = {"metrics": {"grafanaDashboard": {"enabled": True, "labels": {"team": "gpu"}}}}
    (cm,) = [d for d in by_kind(documents(render(TOOLS, which, values, tmp_path)), "ConfigMap")]
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert cm["metadata"]["labels"]["team"] == "gpu"
    assert cm["metadata"]["namespace"] == "gpu-labeller"
    (name,) = cm["data"]
    dashboard = json.loads(cm["data"][name])
    assert dashboard == json.loads(DASHBOARD.read_text())
    assert dashboard["uid"] == "gpu-labeller" and dashboard["title"]
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["datasource"]["query"] == "prometheus"
    panels = [p for p in dashboard_panels(dashboard) if p["type"] != "row"]
    assert panels and all(p["targets"] and p["datasource"]["uid"] == "${datasource}" for p in panels)
    ids = [p["id"] for p in dashboard_panels(dashboard)]
    assert len(ids) == len(set(ids))
    # Off by default, and where the sidecar looks when told.
    assert not by_kind(documents(render(TOOLS, which, {}, tmp_path)), "ConfigMap")
    values["metrics"]["grafanaDashboard"]["namespace"] = "monitoring"
    (cm,) = by_kind(documents(render(TOOLS, which, values, tmp_path)), "ConfigMap")
    assert cm["metadata"]["namespace"] == "monitoring"


def test_service_monitor_gives_the_node_label_the_alerts_name(tmp_path: Path) -> None:
    sm = one(documents(render(TOOLS, "helm3", VALUES, tmp_path)), "ServiceMonitor")
    for endpoint in sm["spec"]["endpoints"]:
        assert {"sourceLabels": ["__meta_kubernetes_pod_node_name"], "targetLabel": "node"} in endpoint[
            "relabelings"
        ]
    # ... and the job the alerts select is the one the ServiceMonitor's Service gives.
    svc = one(documents(render(TOOLS, "helm3", VALUES, tmp_path)), "Service")
    rule = rule_object(VALUES, tmp_path)
    assert f'job="{svc["metadata"]["name"]}"' in alerts_of(rule)["GpuLost"]["expr"]


def test_rules_are_off_by_default_and_follow_the_values(tmp_path: Path) -> None:
    assert not by_kind(documents(render(TOOLS, "helm3", {}, tmp_path)), "PrometheusRule")
    full = set(alerts_of(rule_object(VALUES, tmp_path)))
    assert len(full) == 13
    unfenced = {**VALUES, "admissionPolicy": {"enabled": False}}
    assert set(alerts_of(rule_object(unfenced, tmp_path))) == full - {"NfdLiteAdmissionPolicyNotEnforced"}
    no_ksm = copy.deepcopy(VALUES)
    no_ksm["metrics"]["prometheusRule"]["kubeStateMetrics"] = False
    assert set(alerts_of(rule_object(no_ksm, tmp_path))) == full - {"GpuNodeWithoutLabeller"}

    custom = copy.deepcopy(VALUES)
    custom["metrics"]["prometheusRule"].update(
        alertLabels={"team": "gpu"},
        labels={"release": "p"},
        selector='job="gpu-nodes"',
        runbookUrl="https://r",
    )
    rule = rule_object(custom, tmp_path)
    assert rule["metadata"]["labels"]["release"] == "p"
    for name, alert in alerts_of(rule).items():
        assert alert["labels"]["team"] == "gpu" and alert["labels"]["severity"], name
        assert "gpu-labeller-metrics" not in alert["expr"], name
        assert alert["annotations"]["runbook_url"] == f"https://r#{name.lower()}"
    assert alerts_of(rule)["GpuLost"]["expr"] == 'gfd_no_gpu{job="gpu-nodes"} == 1'


@pytest.mark.parametrize("which", HELMS)
@pytest.mark.parametrize(
    ("values", "said"),
    [
        (
            {"metrics": {"prometheusRule": {"enabled": True}}},
            "metrics.prometheusRule: its alerts select the pods by the ServiceMonitor's job",
        ),
        ({"metrics": {"prometheusRule": {"alertLabels": {"severity": "page"}}}}, "alertLabels"),
        ({"metrics": {"prometheusRule": {"selector": "{job='x'}"}}}, "selector"),
        ({"metrics": {"prometheusRule": {"labelsExpiringSeconds": 0}}}, "labelsExpiringSeconds"),
    ],
)
def test_bad_rule_values_are_refused_naming_the_value(
    tmp_path: Path, which: str, values: dict[str, Any], said: str
) -> None:
    proc = run_helm(
        TOOLS, which, "template", "x", str(CHART), "--kube-version", "1.30.0", values=values, tmp=tmp_path
    )
    assert proc.returncode != 0
    assert said in proc.stderr


def test_the_documented_command_turns_alerts_and_dashboard_on(tmp_path: Path) -> None:
    """docs/alerts.md's helm upgrade, its --set flags on this checkout's chart (with the metricsFrom its
    comment asks for), renders the ServiceMonitor, the PrometheusRule and the dashboard."""
    (block,) = re.findall(r"```sh\n(helm upgrade .*?)```", ALERTS_DOC.read_text(), re.S)
    command = shlex.split(re.sub(r"#.*", "", block.replace("\\\n", " ")))
    sets = [arg for flag, arg in itertools.pairwise(command) if flag == "--set"]
    assert len(sets) == 3
    metrics_from = json.dumps(VALUES["networkPolicy"]["metricsFrom"])
    args = [a for s in sets for a in ("--set", s)] + [
        "--set-json",
        f"networkPolicy.metricsFrom={metrics_from}",
    ]
    proc = run_helm(
        TOOLS, "helm3", "template", "gpu-labeller", str(CHART), "-n", "gpu-labeller", *args, tmp=tmp_path
    )
    assert proc.returncode == 0, proc.stderr
    docs = documents(proc.stdout)
    assert alerts_of(one(docs, "PrometheusRule")) and one(docs, "ServiceMonitor")
    (cm,) = by_kind(docs, "ConfigMap")
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
