"""Tokens, clients and credential files for the fake API server (mixed into FakeApiServer)."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import yaml

from tests.apiserver.auth import Tokens, UserInfo, service_account_user
from tests.apiserver.store import Store


class Identities:
    tokens: Tokens
    store: Store
    ca_cert: Path | None

    @property
    def url(self) -> str:
        raise NotImplementedError

    # -- identities --------------------------------------------------------------------------------
    def token_for_service_account(self, namespace: str, name: str, node_name: str | None = None) -> str:
        """A bearer token for the service account; with node_name a pod-bound one carrying the node claim."""
        node_uid = ""
        if node_name and (node := self.store.get("nodes", node_name)):
            node_uid = node["metadata"]["uid"]
        return self.tokens.issue(service_account_user(namespace, name, node_name, node_uid))

    def token_for_user(self, username: str, groups: tuple[str, ...] = ()) -> str:
        return self.tokens.issue(UserInfo(username, (*groups, "system:authenticated")))

    def admin_token(self) -> str:
        return self.tokens.issue(UserInfo("kubernetes-admin", ("system:masters", "system:authenticated")))

    def revoke_token(self, token: str) -> None:
        """From now on the token is answered 401 (a rotated-away or expired token)."""
        self.tokens.revoke(token)

    def api_client(self, token: str | None) -> Any:
        """An official `kubernetes.client.ApiClient` for this server, authenticating with `token`."""
        from kubernetes import client  # imported here: most of this module's users do not need it

        configuration = client.Configuration(host=self.url)
        if self.ca_cert is not None:
            configuration.ssl_ca_cert = str(self.ca_cert)
        if token is not None:
            configuration.api_key = {"authorization": token}
            configuration.api_key_prefix = {"authorization": "Bearer"}
        return client.ApiClient(configuration)

    def write_kubeconfig(self, path: Path | str, token: str) -> Path:
        path = Path(path)
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "fake", "cluster": self._cluster_entry()}],
            "users": [{"name": "fake-user", "user": {"token": token}}],
            "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "fake-user"}}],
            "current-context": "fake",
        }
        path.write_text(yaml.safe_dump(config))
        return path

    def _cluster_entry(self) -> dict[str, str]:
        entry = {"server": self.url}
        if self.ca_cert is not None:
            entry["certificate-authority-data"] = base64.b64encode(self.ca_cert.read_bytes()).decode()
        return entry

    def write_service_account_dir(
        self, path: Path | str, token: str, namespace: str = "gpu-labeller"
    ) -> Path:
        """What the projected volume puts at /var/run/secrets/kubernetes.io/serviceaccount: token, ca.crt
        (with tls=True) and namespace. Call again with a new token to rotate it in place atomically."""
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        files = {"token": token, "namespace": namespace}
        if self.ca_cert is not None:
            files["ca.crt"] = self.ca_cert.read_text()
        for name, text in files.items():
            temporary = path / f".{name}.tmp"
            temporary.write_text(text)
            temporary.replace(path / name)
        return path
