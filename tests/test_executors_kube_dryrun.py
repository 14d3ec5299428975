"""A dry run executes nothing of the user's (issue 23, point 3): `launch --executor kubernetes --dryrun` with a
kubeconfig whose user has an `exec:` credential plugin (as `aws eks get-token` or `gke-gcloud-auth-plugin` are)
neither runs that plugin nor connects to the API server. The plugin here would create a marker file; the server is
a local socket that records every connection."""

from __future__ import annotations

import socket
import threading

import pytest
from _cli import cli

pytestmark = pytest.mark.nemo


@pytest.fixture
def server():
    """A listening socket on 127.0.0.1 that records (and closes) each connection."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    listener.settimeout(0.2)
    accepted: list = []
    stop = threading.Event()

    def serve():
        while not stop.is_set():
            try:
                conn, address = listener.accept()
            except OSError:
                continue
            accepted.append(address)
            conn.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield listener.getsockname()[1], accepted
    stop.set()
    thread.join()
    listener.close()


def exec_kubeconfig(tmp_path, port: int):
    marker = tmp_path / "plugin-ran"
    plugin = tmp_path / "get-token.sh"
    plugin.write_text(
        f"#!/bin/sh\ntouch {marker}\n"
        'echo \'{"apiVersion": "client.authentication.k8s.io/v1beta1", "kind": "ExecCredential", '
        '"status": {"token": "from-plugin"}}\'\n'
    )
    plugin.chmod(0o755)
    config = tmp_path / "kubeconfig"
    config.write_text(
        "apiVersion: v1\nkind: Config\n"
        f'clusters: [{{name: c, cluster: {{server: "https://127.0.0.1:{port}", insecure-skip-tls-verify: true}}}}]\n'
        "contexts: [{name: c, context: {cluster: c, user: u}}]\n"
        "current-context: c\n"
        "users:\n- name: u\n  user:\n    exec:\n"
        "      apiVersion: client.authentication.k8s.io/v1beta1\n"
        f"      command: {plugin}\n"
        "      interactiveMode: Never\n"
    )
    return config, marker


@pytest.mark.slow  # one launch --dryrun through NeMo-Run: 20 to 60 s
def test_a_kubernetes_dry_run_runs_no_credential_plugin_and_connects_nowhere(tmp_path, server):
    port, accepted = server
    config, marker = exec_kubeconfig(tmp_path, port)
    argv = ["launch", "gpt_1_3b", "--executor", "kubernetes", "--dryrun", "--json", "-E", "nodes=2"]
    result = cli(*argv, KUBECONFIG=str(config), timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert not marker.exists(), "the kubeconfig's exec plugin ran during a dry run"
    assert accepted == [], f"the dry run connected to the API server: {accepted}"


def test_the_plugin_is_used_when_the_kubernetes_client_loads_the_config(tmp_path, server):
    """The other side of the check: the marker does appear when the client really loads this kubeconfig (as a real
    submission does), so its absence above means the plugin was not run."""
    import subprocess
    import sys

    config, marker = exec_kubeconfig(tmp_path, server[0])
    code = f"from kubernetes import config; config.load_kube_config({str(config)!r})"
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
    assert marker.exists()


def test_a_broken_kubeconfig_is_still_reported_when_the_executor_is_built(tmp_path, monkeypatch):
    """Deferring the credentials keeps the checks of the file: no current context is one problem, exit 2."""
    config = tmp_path / "kubeconfig"
    config.write_text("apiVersion: v1\nkind: Config\nclusters: []\ncontexts: []\nusers: []\n")
    result = cli("launch", "gpt_1_3b", "--executor", "kubernetes", "--dryrun", KUBECONFIG=str(config), timeout=300)
    assert result.returncode == 2 and "kubeconfig=" in result.stderr and "Fix: " in result.stderr, result.stderr
